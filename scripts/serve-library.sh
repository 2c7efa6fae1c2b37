#!/bin/sh
# serve-library.sh — a library of QV_LIBRARY_VOICES (1000) default-size 0.6B voices on 127.0.0.1:
# one clone of the bundled clip with the full-size Base model ($QVOICE_CACHE/q06b-base, with its
# 16.8 MB text side), uploaded that many times under other names (so other ids), served by the
# 0.6B CustomVoice model. Prints the bytes on disk, the median of 5 lists, and the median of 5
# first audio bytes (a streamed 0.5 s request) for a preset and for a library voice, beside an
# empty library (preset) and a one-voice library (that voice). Goals (issue 23): list <= 100 ms,
# first bytes within 50 ms of the small library's, <= 100 MB on disk. Needs ~1 GB free in /tmp.
set -eu
cd "$(dirname "$0")/.."
CACHE=${QVOICE_CACHE:-cache}
VOICES=${QV_LIBRARY_VOICES:-1000}
W=$(mktemp -d /tmp/qvoice-library.XXXXXX)
PID=
trap '[ -n "$PID" ] && kill $PID 2>/dev/null; wait 2>/dev/null; rm -rf "$W"' EXIT INT TERM
[ -x bin/qvoice-server ] && [ -x bin/clone ] || { echo "serve-library: build first (make)" >&2; exit 1; }
[ -d "$CACHE/q06b-base" ] && [ -d "$CACHE/q06b-cv" ] || {
  echo "serve-library: $CACHE/q06b-base and q06b-cv missing (make models-full)" >&2; exit 1; }

start() { # VOICES_DIR -> $PORT
  bin/qvoice-server -m "$CACHE/q06b-cv" --voices "$1" --listen 127.0.0.1:0 --quant int8 \
    --max-voices $((VOICES + 10)) >/dev/null 2>"$W/log" &
  PID=$!
  for _ in $(seq 1200); do grep -qs "listening on" "$W/log" && break; sleep 0.1; done
  PORT=$(sed -n 's/.*listening on .*:\([0-9]*\)$/\1/p' "$W/log")
  [ -n "$PORT" ] || { cat "$W/log" >&2; exit 1; }
}
stop() { kill "$PID"; wait "$PID" 2>/dev/null || true; PID=; }
median() { sort -n | sed -n 3p; }
timed() { # [curl args]: median of 5 times to the first byte
  for _ in 1 2 3 4 5; do curl -s --max-time 120 -o /dev/null -w '%{time_starttransfer}\n' "$@"; done | median
}
speech() { # VOICE: median first byte of a streamed 0.5 s request
  timed -H 'Content-Type: application/json' -d "{\"input\":\"Hi.\",\"voice\":\"$1\",\"max_seconds\":0.5,\"stream_format\":\"audio\",\"response_format\":\"pcm\",\"seed\":1}" \
    "http://127.0.0.1:$PORT/v1/audio/speech"
}
upload() { # NAME
  code=$(curl -s --max-time 120 -o "$W/up" -w '%{http_code}' -F "audio_sample=@$W/voice.qvoice" \
    -F "name=$1" -F consent=yes "http://127.0.0.1:$PORT/v1/audio/voices")
  [ "$code" = 200 ] || { echo "serve-library: upload $1: $code $(cat "$W/up")" >&2; exit 1; }
}

echo "serve-library: $VOICES voices, machine load: $(cut -d' ' -f1-3 /proc/loadavg)"
bin/clone -m "$CACHE/q06b-base" tests/audio/en_ohenry_chenevert.wav -o "$W/voice.qvoice" -n v0 \
  --consent test >/dev/null 2>&1
echo "  one clone: $(stat -c %s "$W/voice.qvoice") bytes"
mkdir "$W/empty" "$W/one" "$W/lib"
start "$W/empty"
E_LIST=$(timed "http://127.0.0.1:$PORT/v1/audio/voices")
E_PRESET=$(speech ryan)
stop
start "$W/one"
upload v1
stop
start "$W/one"
O_VOICE=$(speech v1)
stop
start "$W/lib"
t0=$(date +%s)
for i in $(seq "$VOICES"); do upload "v$i"; done
echo "  $VOICES uploads: $(($(date +%s) - t0)) s"
stop
start "$W/lib" # the index built at start from the files
L_LIST=$(timed "http://127.0.0.1:$PORT/v1/audio/voices")
N=$(curl -s "http://127.0.0.1:$PORT/v1/audio/voices" | grep -o '"object":"voice"' | wc -l)
L_PRESET=$(speech ryan)
L_VOICE=$(speech "v$((VOICES / 2))")
stop
echo "  library of $N voices: $(du -sk "$W/lib" | cut -f1) kB on disk ($(ls "$W/lib" | wc -l) files, text sides $(du -sk "$W/lib/.textside" | cut -f1) kB)"
echo "    list ${L_LIST} s, first byte: preset ${L_PRESET} s, library voice ${L_VOICE} s"
echo "  empty library: list ${E_LIST} s, first byte: preset ${E_PRESET} s"
echo "  one-voice library: first byte: that voice ${O_VOICE} s"
