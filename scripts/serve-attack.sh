#!/bin/sh
# serve-attack.sh — qvoice-server under a stranger's load, on 127.0.0.1 (make serve-attack), with
# the default limits and a probe listener:
#   1. QV_ATTACK_SOCKETS (200) sockets trickling a header byte every 0.25 s (reconnecting when
#      cut) for QV_ATTACK_SECONDS (30), from one source address, then from 20 (127.0.0.2...):
#      /health probes every 0.25 s on the main port and on --probe-listen, answered / sent and the
#      slowest, the longest any socket was held, the most held from one address
#   2. the voice library with QV_ATTACK_VOICES (300) voices (copies of one tiny clone with their
#      own names): median of 5 lists, and the first byte of a preset request, beside an empty
#      library's
# Every client has a time limit and the run ends by itself. Figures depend on the machine's load.
set -eu
cd "$(dirname "$0")/.."
CACHE=${QVOICE_CACHE:-cache}
SOCKETS=${QV_ATTACK_SOCKETS:-200}
SECONDS_=${QV_ATTACK_SECONDS:-30}
VOICES=${QV_ATTACK_VOICES:-300}
W=$(mktemp -d /tmp/qvoice-attack.XXXXXX)
PID=
trap '[ -n "$PID" ] && kill $PID 2>/dev/null; wait 2>/dev/null; rm -rf "$W"' EXIT INT TERM
[ -x bin/qvoice-server ] && [ -x bin/clone ] || { echo "serve-attack: build first (make)" >&2; exit 1; }

start() { # VOICES_DIR -> PORT PROBE_PORT in $PORT $PROBE
  bin/qvoice-server -m "$CACHE/tiny-cv" --voices "$1" --listen 127.0.0.1:0 \
    --probe-listen 127.0.0.1:0 >/dev/null 2>"$W/log" &
  PID=$!
  for _ in $(seq 600); do grep -qs "probes on" "$W/log" && break; sleep 0.1; done
  PORT=$(sed -n 's/.*listening on .*:\([0-9]*\)$/\1/p' "$W/log")
  PROBE=$(sed -n 's/.*probes on .*:\([0-9]*\)$/\1/p' "$W/log")
  [ -n "$PORT" ] && [ -n "$PROBE" ] || { cat "$W/log" >&2; exit 1; }
}
stop() { kill "$PID"; wait "$PID" 2>/dev/null || true; PID=; }
median() { sort -n | sed -n 3p; }
first_byte() { # URL [curl args]: median of 5
  for _ in 1 2 3 4 5; do curl -s --max-time 60 -o /dev/null -w '%{time_starttransfer}\n' "$@"; done | median
}

mkdir "$W/empty" "$W/lib"
start "$W/empty"
echo "serve-attack: $SOCKETS slow sockets for $SECONDS_ s, machine load: $(cut -d' ' -f1-3 /proc/loadavg)"
for addrs in 1 20; do
  printf '  from %2d address(es): ' "$addrs"
  timeout $((SECONDS_ + 60)) python3 tests/server/client.py "$PORT" trickle "$SOCKETS" "$addrs" \
    "$SECONDS_" "$PROBE"
done
J='{"input":"Hi.","voice":"ryan","max_seconds":0.5}'
E_LIST=$(first_byte "http://127.0.0.1:$PORT/v1/audio/voices")
E_TTFB=$(first_byte -H 'Content-Type: application/json' -d "$J" "http://127.0.0.1:$PORT/v1/audio/speech")
stop

bin/clone -m "$CACHE/tiny-base" tests/audio/en_ohenry_chenevert.wav -o "$W/tiny.qvoice" -n tiny \
  --consent test >/dev/null 2>&1
start "$W/lib"
for i in $(seq "$VOICES"); do
  curl -s --max-time 60 -o /dev/null -F "audio_sample=@$W/tiny.qvoice" -F "name=v$i" \
    -F consent=yes "http://127.0.0.1:$PORT/v1/audio/voices"
done
stop
start "$W/lib" # the index built at start from the files
L_LIST=$(first_byte "http://127.0.0.1:$PORT/v1/audio/voices")
L_TTFB=$(first_byte -H 'Content-Type: application/json' -d "$J" "http://127.0.0.1:$PORT/v1/audio/speech")
N=$(curl -s "http://127.0.0.1:$PORT/v1/audio/voices" | grep -o '"object":"voice"' | wc -l)
stop
echo "  library of $N voices ($(du -sm "$W/lib" | cut -f1) MB): list ${L_LIST} s, preset first byte ${L_TTFB} s"
echo "  empty library:            list ${E_LIST} s, preset first byte ${E_TTFB} s"
