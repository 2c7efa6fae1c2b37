#!/bin/sh
# serve-bench.sh — qvoice-server figures for issue 14's goals (make serve-bench; make bench runs it
# too): full-size synthetic 0.6B CustomVoice, int8, 2 threads per synthesis, on 127.0.0.1.
#   1. time to the first audio byte at the client, one streamed request alone: p50/p95 of N runs
#   2. aggregate audio seconds per wall second (and per server CPU second): 4 concurrent streamed
#      requests vs one alone; then the batched generation step alone (bench_batch)
#   3. load: hey with 8 concurrent clients (--max-concurrency 4, --max-queue 2: the rest get
#      429): failures other than 429, p50/p95 latency
#   4. soak: mixed requests (speech whole/streamed/SSE, voices list/upload/delete, metrics) for
#      QV_SOAK_SECONDS; the server's RSS and open descriptors at the start and the end
# Env: QV_SERVE_MODEL (default $QVOICE_CACHE/q06b-cv), QV_SERVE_AUDIO (seconds per request, 4),
# QV_SERVE_TTFA_RUNS (20), QV_SOAK_SECONDS (600), QV_SERVE_QUANT (int8), QV_SERVE_BATCH (the
# server's --batch: 8; 0 measures the streams unbatched). Figures depend on the machine's load: report
# `uptime` with them. Exit 1 when a step fails outright.
set -eu
cd "$(dirname "$0")/.."
CACHE=${QVOICE_CACHE:-cache}
MODEL=${QV_SERVE_MODEL:-$CACHE/q06b-cv}
AUDIO=${QV_SERVE_AUDIO:-4}
RUNS=${QV_SERVE_TTFA_RUNS:-20}
SOAK=${QV_SOAK_SECONDS:-600}
QUANT=${QV_SERVE_QUANT:-int8}
BATCH=${QV_SERVE_BATCH:-8}
PATH=$PATH:/usr/sbin
W=$(mktemp -d /tmp/qvoice-bench.XXXXXX)
PID=
trap '[ -n "$PID" ] && kill $PID 2>/dev/null; wait 2>/dev/null; rm -rf "$W"' EXIT INT TERM

bin/qvoice-server -m "$MODEL" --voices "$W/voices" --quant "$QUANT" --batch "$BATCH" --threads 2 \
  --max-concurrency 4 --max-queue 2 --listen 127.0.0.1:0 >/dev/null 2>"$W/log" &
PID=$!
for _ in $(seq 1200); do grep -q "listening on" "$W/log" && break; sleep 0.1; done
PORT=$(sed -n 's/.*listening on .*:\([0-9]*\)$/\1/p' "$W/log")
[ -n "$PORT" ] || { cat "$W/log" >&2; exit 1; }
URL=http://127.0.0.1:$PORT
TEXT="The old lighthouse keeper climbed the narrow stairs every evening and lit the great lamp."
body() { # SEED STREAM_FORMAT FORMAT
  printf '{"input":"%s","voice":"ryan","seed":%s,"max_seconds":%s,"response_format":"%s"%s}' \
    "$TEXT" "$1" "$AUDIO" "$3" "${2:+,\"stream_format\":\"$2\"}"
}
pct() { sort -n | awk -v p="$1" '{v[NR]=$1} END {i=int(p*NR+0.999); if(i<1)i=1; print v[i]}'; }
echo "serve-bench: $MODEL $QUANT, 2 threads/synthesis, --batch $BATCH, machine load: $(cut -d' ' -f1-3 /proc/loadavg)"

# 1. time to first byte, one request alone
: > "$W/ttfa"
for i in $(seq "$RUNS"); do
  curl -s -o /dev/null -w '%{time_starttransfer}\n' -d "$(body "$i" audio pcm)" "$URL/v1/audio/speech" >> "$W/ttfa"
done
echo "serve-bench: time to first audio byte, alone: p50 $(pct 0.5 < "$W/ttfa") s, p95 $(pct 0.95 < "$W/ttfa") s ($RUNS requests; goal p95 <= 0.6 s)"

# 2. aggregate audio seconds per wall second: 1 alone, then 4 at once
cpu() { awk '{print $14 + $15}' "/proc/$PID/stat"; } # server CPU time, clock ticks
run_batch() { # N -> prints "audio seconds per wall second, per server CPU second"
  c0=$(cpu)
  t0=$(date +%s.%N)
  for i in $(seq "$1"); do
    curl -s -o "$W/b$i.pcm" -d "$(body "$((100 + i))" audio pcm)" "$URL/v1/audio/speech" &
  done
  wait
  t1=$(date +%s.%N)
  bytes=$(cat "$W"/b*.pcm | wc -c)
  rm -f "$W"/b*.pcm
  c1=$(cpu)
  awk -v b="$bytes" -v a="$t0" -v z="$t1" -v c="$((c1 - c0))" -v hz="$(getconf CLK_TCK)" \
    'BEGIN { printf "%.3f %.3f", b / 48000 / (z - a), b / 48000 / (c / hz) }'
}
metric() { curl -s "$URL/metrics" | sed -n "s/^$1 //p"; }
set -- $(run_batch 1); one=$1; one_cpu=$2
s0=$(metric qvoice_batch_steps_total); f0=$(metric qvoice_batch_frames_total)
set -- $(run_batch 4); four=$1; four_cpu=$2
s1=$(metric qvoice_batch_steps_total); f1=$(metric qvoice_batch_frames_total)
mean=$(awk -v s="$((s1 - s0))" -v f="$((f1 - f0))" 'BEGIN { if (s > 0) printf "%.2f", f / s; else print "-" }')
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b / a }'; }
echo "serve-bench: audio s per wall s: 1 stream $one, 4 streams $four, ratio $(ratio "$one" "$four") (goal >= 2.5; mean batch of the 4: $mean streams per step), load $(cut -d' ' -f1-3 /proc/loadavg)"
# the same per CPU second of the server: what batching saves, whatever else the machine runs
echo "serve-bench: audio s per server CPU s: 1 stream $one_cpu, 4 streams $four_cpu, ratio $(ratio "$one_cpu" "$four_cpu")"
# the generation step alone (no decoder, one thread): 4 sessions stepped together vs one by one
echo "serve-bench: $(build/bench/bench_batch "$MODEL" 1 "$QUANT" 4 10 3)"

# 3. load: 8 concurrent clients
body 7 "" wav > "$W/load.json"
hey -n 16 -c 8 -t 600 -m POST -T application/json -D "$W/load.json" "$URL/v1/audio/speech" > "$W/hey" 2>&1 || true
codes=$(sed -n 's/^[[:space:]]*\[\([0-9]*\)\][[:space:]]*\([0-9]*\) responses.*/\1:\2/p' "$W/hey" | tr '\n' ' ')
failed=$(sed -n 's/^[[:space:]]*\[\([0-9]*\)\][[:space:]]*\([0-9]*\) responses.*/\1 \2/p' "$W/hey" | awk '$1 != 200 && $1 != 429 {n += $2} END {print n + 0}')
errors=$(sed -n '/^Error distribution/,$p' "$W/hey" | grep -c '\[' || true)
echo "serve-bench: load, 8 clients x 2 requests: status $codes; failed (not 200/429) $failed, transport errors $errors; latency p50 $(sed -n 's/^ *50% in \([0-9.]*\) secs/\1/p' "$W/hey") s, p95 $(sed -n 's/^ *95% in \([0-9.]*\) secs/\1/p' "$W/hey") s"

# 4. soak
rss() { awk '/^VmRSS/ {print $2}' "/proc/$PID/status"; }
fds() { ls "/proc/$PID/fd" | wc -l; }
bin/clone -m "${MODEL%-cv}-base" tests/audio/en_ohenry_chenevert.wav -o "$W/soak.qvoice" -n soak \
  --consent bench >/dev/null 2>&1 || cp voices/ohenry.qvoice "$W/soak.qvoice"
rss0=$(rss); fd0=$(fds)
end=$(( $(date +%s) + SOAK ))
n=0
while [ "$(date +%s)" -lt "$end" ]; do
  n=$((n + 1))
  case $((n % 5)) in
    0) curl -s -o /dev/null -d "$(body "$n" "" wav)" "$URL/v1/audio/speech" ;;
    1) curl -s -o /dev/null -d "$(body "$n" audio pcm)" "$URL/v1/audio/speech" ;;
    2) curl -s -o /dev/null -d "$(body "$n" sse pcm)" "$URL/v1/audio/speech" ;;
    3) id=$(curl -s -F audio_sample=@"$W/soak.qvoice" -F consent=bench -F name=soak "$URL/v1/audio/voices" | sed -n 's/.*"id":"\([0-9a-f]*\)".*/\1/p')
       [ -n "$id" ] && curl -s -o /dev/null -X DELETE "$URL/v1/audio/voices/$id" ;;
    4) curl -s -o /dev/null "$URL/v1/audio/voices"; curl -s -o /dev/null "$URL/metrics" ;;
  esac
done
echo "serve-bench: soak ${SOAK} s, $n rounds: RSS $rss0 -> $(rss) kB, open fds $fd0 -> $(fds)"
kill -TERM $PID; wait $PID; PID=
