#!/bin/sh
# serve-demo.sh — qvoice-server on the synthetic 0.6B pair (called by `make serve-demo` after the
# build and `make models-full`): start the server, put the bundled clip's voice in the library
# (cloned from the clip by the server when libqvoice can clone, with its first 12 s transcribed as
# the ICL window, else voices/ohenry.qvoice) and show its fit to the served model, speak
# with a preset speaker (whole WAV) and with the library voice (streamed: time to first byte at
# the client), show the metrics. Then it prints the studio's address (GET /, docs/studio.md), opens
# it when a desktop is there, and keeps serving until Ctrl-C when run from a terminal; otherwise
# (or with QVOICE_DEMO_STAY=0) it stops with SIGTERM. Output in out/serve-demo (QVOICE_DEMO_OUT).
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
cache=${QVOICE_CACHE:-$root/cache}
out=${QVOICE_DEMO_OUT:-out/serve-demo}
threads=$(nproc 2>/dev/null || echo 1)
mkdir -p "$out/voices"
bin/qvoice-server -m "$cache/q06b-cv" --clone-model "$cache/q06b-base" --voices "$out/voices" \
  --threads "$threads" --listen 127.0.0.1:0 >/dev/null 2>"$out/server.log" &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT INT TERM
for _ in $(seq 600); do grep -q "listening on" "$out/server.log" && break; sleep 0.1; done
port=$(sed -n 's/.*listening on .*:\([0-9]*\)$/\1/p' "$out/server.log")
[ -n "$port" ] || { cat "$out/server.log" >&2; exit 1; }
url=http://127.0.0.1:$port
echo "serve-demo: $(sed -n 's/.*\(listening on .*\)/\1/p' "$out/server.log"); GET /ready:"
curl -s "$url/ready"; echo

# cloned by the server: with the transcript of the clip's first 12 s as its ICL window, so the
# studio's library can play the reference the voice holds
icl=""
if curl -s "$url/ready" | grep -q '"cloning":true'; then
  src=tests/audio/en_ohenry_chenevert.wav
  icl="One dollar and eighty-seven cents. That was all. And sixty cents of it was in pennies, saved one and two at a time by bulldozing the grocer."
else
  src=voices/ohenry.qvoice
fi
echo "serve-demo: POST /v1/audio/voices with $src"
curl -s -F audio_sample=@"$src" -F name=ohenry -F language=english \
  ${icl:+-F icl_window=0-12 -F "transcript=$icl"} \
  -F consent="LibriVox recording in the public domain (tests/audio/ATTRIBUTION.md)" \
  "$url/v1/audio/voices" | head -c 600; echo
echo "serve-demo: GET /v1/audio/voices/ohenry/fit"
curl -s "$url/v1/audio/voices/ohenry/fit"; echo

text="Hello. This is qvoice, a voice-cloning workbench written in C."
echo "serve-demo: preset speaker ryan, whole WAV -> $out/ryan.wav"
curl -s -o "$out/ryan.wav" -w '  HTTP %{http_code}, %{size_download} bytes, %{time_total} s\n' \
  -d "{\"input\":\"$text\",\"voice\":\"ryan\",\"max_seconds\":4}" "$url/v1/audio/speech"
echo "serve-demo: library voice ohenry, streamed (stream_format audio) -> $out/ohenry.wav"
curl -s -o "$out/ohenry.wav" \
  -w '  HTTP %{http_code}, first byte after %{time_starttransfer} s, %{size_download} bytes in %{time_total} s\n' \
  -d "{\"input\":\"$text\",\"voice\":\"ohenry\",\"stream_format\":\"audio\",\"max_seconds\":4}" \
  "$url/v1/audio/speech"
echo "serve-demo: metrics"
curl -s "$url/metrics" | grep -E '^qvoice_(requests_total|audio_seconds_total|rtf_(sum|count)|time_to_first_audio_seconds_(sum|count))'
echo "serve-demo: the studio is at $url/ (record or drop a clip, clone, speak, manage the library)"
if [ "${QVOICE_DEMO_STAY:-$([ -t 0 ] && echo 1 || echo 0)}" = 1 ]; then
  if [ -n "${DISPLAY:-}${WAYLAND_DISPLAY:-}" ] && command -v xdg-open >/dev/null; then
    xdg-open "$url/" >/dev/null 2>&1 || true
  fi
  echo "serve-demo: serving until Ctrl-C"
  trap 'kill -TERM $pid 2>/dev/null || true' INT TERM
  wait $pid || true
  wait $pid 2>/dev/null || true
else
  kill -TERM $pid
  wait $pid
fi
echo "serve-demo: server log"
cat "$out/server.log"
