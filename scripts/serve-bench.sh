#!/bin/sh
# serve-bench.sh — qvoice-server figures for issue 14's goals (make serve-bench; make bench runs it
# too): full-size synthetic 0.6B CustomVoice, int8, 2 threads per synthesis, on 127.0.0.1.
#   1. time to the first audio byte at the client, one streamed request alone: p50/p95 of N
#      sequential requests (goal p95 <= 0.6 s)
#   2. aggregate audio seconds per wall second (and per server CPU second): 4 concurrent streamed
#      requests vs one alone; then the batched generation step alone (bench_batch)
#   3. load: hey with 8 concurrent clients (--max-concurrency 4, --max-queue 2: the rest get
#      429): failures other than 429 (goal 0), p50/p95 latency
#   ws. the WebSocket (WS /v1/audio/speech/stream, the ws npm package): text fed word by word at
#      15 tokens/s, the first audio after the piece that ends the first sentence: p50/max of
#      QV_WS_RUNS sessions (goal <= 0.5 s); then split_granularity sentence, clause and none on
#      a text whose first sentence has two commas: the first audio after the first input.text,
#      p50 of QV_WS_RUNS each (1 s of audio per request: only the first audio is timed)
#   dialogue. a 20-line, 3-voice dialogue as markup ([voice:NAME][neutral] per line, 6 style
#      tags) vs a plain request of its first line: time to the first audio byte, p50 of
#      QV_WS_RUNS each, alternated (goal: within 50 ms)
#   5. (run before 4) ref_audio: time to first byte of a request carrying its reference (issue 24),
#      the first (plus one clone) and the next (reference cache hits; goal: within 50 ms of the
#      same request with the voice uploaded from the same clip)
#   4. soak: mixed requests (speech whole/streamed/SSE, a client leaving mid-stream, voices
#      list/upload/get/delete, bad requests and a corrupt audio upload that must get their 4xx,
#      metrics) for QV_SOAK_SECONDS; the server's RSS (and its anonymous part) and open
#      descriptors (/proc) sampled every QV_SOAK_SAMPLE seconds: first, last, max, and whether the
#      last third of the samples rose above the middle third's max (growth) or not (plateaued).
#      Every request has a time limit, so it ends by itself.
# Env: QV_SERVE_MODEL (default $QVOICE_CACHE/q06b-cv; its -base sibling clones), QV_SERVE_AUDIO
# (seconds per request, 4), QV_SERVE_TTFA_RUNS (20), QV_SOAK_SECONDS (600), QV_SOAK_SAMPLE (5),
# QV_SOAK_SAMPLES (a file to keep the soak's samples in: RSS kB, anonymous RSS kB, open fds),
# QV_SERVE_QUANT (int8), QV_SERVE_BATCH (the server's --batch: 8; 0 measures the streams unbatched),
# QV_SERVE_SECTIONS (which of "ttfa ratio load ref ws dialogue soak" to run: all), QV_WS_RUNS (5),
# QV_SERVE_BIN (the server binary:
# bin/qvoice-server; another build's, to compare two in one sitting).
# Figures depend on the machine's load: the load average is printed with them. Exit 1 when a
# step fails outright (a failed load request or an unexpected soak status is printed, not fatal).
set -eu
cd "$(dirname "$0")/.."
CACHE=${QVOICE_CACHE:-cache}
MODEL=${QV_SERVE_MODEL:-$CACHE/q06b-cv}
AUDIO=${QV_SERVE_AUDIO:-4}
RUNS=${QV_SERVE_TTFA_RUNS:-20}
SOAK=${QV_SOAK_SECONDS:-600}
SAMPLE=${QV_SOAK_SAMPLE:-5}
QUANT=${QV_SERVE_QUANT:-int8}
BATCH=${QV_SERVE_BATCH:-8}
SECTIONS=${QV_SERVE_SECTIONS:-ttfa ratio load ref ws dialogue soak}
WS_RUNS=${QV_WS_RUNS:-5}
SERVER=${QV_SERVE_BIN:-bin/qvoice-server}
PATH=$PATH:/usr/sbin
W=$(mktemp -d /tmp/qvoice-bench.XXXXXX)
PID=
SAMPLER=
trap '[ -n "$SAMPLER" ] && kill $SAMPLER 2>/dev/null; [ -n "$PID" ] && kill $PID 2>/dev/null; wait 2>/dev/null; rm -rf "$W"' EXIT INT TERM

CLONE=
[ -d "${MODEL%-cv}-base" ] && CLONE="--clone-model ${MODEL%-cv}-base" # the soak's audio uploads
"$SERVER" -m "$MODEL" $CLONE --voices "$W/voices" --quant "$QUANT" --batch "$BATCH" --threads 2 --max-concurrency 4 \
  --max-queue 2 --listen 127.0.0.1:0 >/dev/null 2>"$W/log" &
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
load() { cut -d' ' -f1-3 /proc/loadavg; }
echo "serve-bench: $SERVER, $MODEL $QUANT, 2 threads/synthesis, --batch $BATCH, machine load: $(load)"
want() { case " $SECTIONS " in *" $1 "*) return 0 ;; esac; return 1; }

# 1. time to first byte, one streamed request alone, sequential
ttfa_section() {
  : > "$W/ttfa"
  for i in $(seq "$RUNS"); do
    curl -s --max-time 300 -o /dev/null -w '%{time_starttransfer}\n' -d "$(body "$i" audio pcm)" \
      "$URL/v1/audio/speech" >> "$W/ttfa"
  done
  echo "serve-bench: time to first audio byte, alone: p50 $(pct 0.5 < "$W/ttfa") s, p95 $(pct 0.95 < "$W/ttfa") s, max $(pct 1 < "$W/ttfa") s ($RUNS sequential streamed requests; goal p95 <= 0.6 s; load $(load))"
}
want ttfa && ttfa_section

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
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b / a }'; }
ratio_section() {
  want ttfa || warm=$(run_batch 1) # first use: the decoder loads, the weights page in
  set -- $(run_batch 1); one=$1; one_cpu=$2
  s0=$(metric qvoice_batch_steps_total); f0=$(metric qvoice_batch_frames_total)
  set -- $(run_batch 4); four=$1; four_cpu=$2
  s1=$(metric qvoice_batch_steps_total); f1=$(metric qvoice_batch_frames_total)
  mean=$(awk -v s="$((s1 - s0))" -v f="$((f1 - f0))" 'BEGIN { if (s > 0) printf "%.2f", f / s; else print "-" }')
  echo "serve-bench: audio s per wall s: 1 stream $one, 4 streams $four, ratio $(ratio "$one" "$four") (goal >= 2.5; mean batch of the 4: $mean streams per step), load $(load)"
  # the same per CPU second of the server: what batching saves, whatever else the machine runs;
  # cores busy = CPU s per wall s of the server
  echo "serve-bench: audio s per server CPU s: 1 stream $one_cpu, 4 streams $four_cpu, ratio $(ratio "$one_cpu" "$four_cpu"); server CPU s per audio s: $(ratio "$one_cpu" 1) -> $(ratio "$four_cpu" 1); cores busy: $(ratio "$one_cpu" "$one") -> $(ratio "$four_cpu" "$four")"
  # the generation step alone (no decoder, one thread): 4 sessions stepped together vs one by one
  [ -n "${QV_SERVE_NO_STEP:-}" ] || echo "serve-bench: $(build/bench/bench_batch "$MODEL" 1 "$QUANT" 4 10 3)"
}
want ratio && ratio_section

# 3. load: 8 concurrent clients
load_section() {
  body 7 "" wav > "$W/load.json"
  # per-request CSV (hey's own percentile lines print 0 for the top ones when there are few requests):
  # response-time,DNS+dialup,DNS,Request-write,Response-delay,Response-read,status-code,offset
  hey -n 16 -c 8 -t 600 -o csv -m POST -T application/json -D "$W/load.json" "$URL/v1/audio/speech" \
    > "$W/hey.csv" 2>&1 || true
  grep -E '^[0-9.]+,' "$W/hey.csv" > "$W/hey.rows" || true
  codes=$(cut -d, -f7 "$W/hey.rows" | sort | uniq -c | awk '{printf "%s:%s ", $2, $1}')
  # a request that got no response (a transport error) has no row
  failed=$(awk -F, -v n=16 '$7 != 200 && $7 != 429 {f++} END {print f + n - NR}' "$W/hey.rows")
  awk -F, '$7 == 200 {print $1}' "$W/hey.rows" > "$W/lat200"
  echo "serve-bench: load, 8 clients x 2 requests: status $codes; failed (not 200/429, or no response) $failed (goal 0); latency of the 200s p50 $(pct 0.5 < "$W/lat200") s, p95 $(pct 0.95 < "$W/lat200") s; all $(wc -l < "$W/hey.rows") p50 $(cut -d, -f1 "$W/hey.rows" | pct 0.5) s, p95 $(cut -d, -f1 "$W/hey.rows" | pct 0.95) s (load $(load))"
}
want load && load_section

# 5. a per-request reference (issue 24): time to first byte of a streamed request with ref_audio
# (the bundled clip as a data URL, x-vector only), the first (a clone, then cached) and the next
# ones (reference cache hits), against the same request with the voice uploaded from that clip
ref_section() {
  [ -n "$CLONE" ] || { echo "serve-bench: ref: skipped (no ${MODEL%-cv}-base to clone on)"; return 0; }
  clip=tests/audio/en_ohenry_chenevert.wav
  curl -s --max-time 300 -o /dev/null -F audio_sample=@"$clip" -F consent=bench -F name=refbench \
    "$URL/v1/audio/voices"
  # seconds from sending the request to the first audio byte (curl 7.88's time_starttransfer is
  # taken when a large body starts to go out, not when the reply's first byte comes back)
  ttfb() { python3 -c 'import http.client, sys, time
body = open(sys.argv[2], "rb").read()
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=300)
t = time.monotonic()
c.request("POST", "/v1/audio/speech", body=body, headers={"Content-Type": "application/json"})
r = c.getresponse()
r.read(1)
print("%.3f" % (time.monotonic() - t) if r.status == 200 else "failed %d" % r.status)
r.read()' "$PORT" "$1"; }
  printf '{"input":"%s","voice":"refbench","seed":5,"max_seconds":%s,"response_format":"pcm","stream":true,"stream_format":"audio"}' \
    "$TEXT" "$AUDIO" > "$W/stored.json"
  { printf '{"input":"%s","seed":5,"max_seconds":%s,"response_format":"pcm","stream":true,"stream_format":"audio",' "$TEXT" "$AUDIO"
    printf '"x_vector_only_mode":true,"ref_audio":"data:audio/wav;base64,'
    base64 -w0 "$clip"; printf '"}'; } > "$W/ref.json"
  ttfb "$W/stored.json" > /dev/null # warm: decoder, weights
  : > "$W/stored"; : > "$W/hits"
  first=$(ttfb "$W/ref.json")
  for _ in 1 2 3 4 5; do ttfb "$W/stored.json" >> "$W/stored"; ttfb "$W/ref.json" >> "$W/hits"; done
  stored=$(pct 0.5 < "$W/stored"); hit=$(pct 0.5 < "$W/hits")
  echo "serve-bench: ref_audio, time to first byte: first request $first s (a clone, then cached), next ones p50 $hit s (max $(pct 1 < "$W/hits")), stored voice p50 $stored s; hit - stored $(awk -v a="$hit" -v b="$stored" 'BEGIN { printf "%+.3f", a - b }') s (goal <= +0.050); cache hits $(metric qvoice_ref_cache_hits_total), misses $(metric qvoice_ref_cache_misses_total); load $(load)"
}
want ref && ref_section

# ws. text arriving at 15 tokens/s over the WebSocket
ws_section() {
  [ -d tests/server/node_modules/ws ] || (cd tests/server && timeout 300 npm install --no-audit --no-fund --silent >/dev/null 2>&1) || true
  [ -d tests/server/node_modules/ws ] || { echo "serve-bench: ws: no ws npm package (npm install in tests/server)"; return; }
  mkdir -p "$W/ws"
  : > "$W/ws.ms"
  for i in $(seq "$WS_RUNS"); do
    node tests/server/ws_speech.mjs stream "ws://127.0.0.1:$PORT/v1/audio/speech/stream" \
      "{\"voice\":\"ryan\",\"seed\":$i,\"max_seconds\":$AUDIO,\"response_format\":\"pcm\",\"stream_audio\":true}" \
      "$TEXT It was a long climb. " "$W/ws" | sed -n 's/.*"first_audio_after_sentence_end_ms":\([0-9.]*\).*/\1/p' >> "$W/ws.ms"
  done
  echo "serve-bench: WebSocket, text at 15 tokens/s: first audio after the first sentence's end arrived p50 $(pct 0.5 < "$W/ws.ms" | xargs printf %.0f) ms, max $(pct 1 < "$W/ws.ms" | xargs printf %.0f) ms ($(wc -l < "$W/ws.ms") sessions; goal <= 500 ms; load $(load))"
  for g in sentence clause none; do
    : > "$W/ws.$g"
    for i in $(seq "$WS_RUNS"); do
      node tests/server/ws_speech.mjs stream "ws://127.0.0.1:$PORT/v1/audio/speech/stream" \
        "{\"voice\":\"ryan\",\"seed\":$i,\"max_seconds\":1,\"response_format\":\"pcm\",\"stream_audio\":true,\"split_granularity\":\"$g\"}" \
        "Every evening, when the wind had dropped, the old keeper climbed the stairs and lit the lamp. It was a long climb. " \
        "$W/ws" | sed -n 's/.*"first_audio_ms":\([0-9.]*\).*/\1/p' >> "$W/ws.$g"
    done
  done
  echo "serve-bench: WebSocket split_granularity, first audio after the first input.text (text at 15 tokens/s, commas after words 2 and 7, the sentence ends after word 17), p50 of $WS_RUNS: sentence $(pct 0.5 < "$W/ws.sentence" | xargs printf %.0f) ms, clause $(pct 0.5 < "$W/ws.clause" | xargs printf %.0f) ms, none $(pct 0.5 < "$W/ws.none" | xargs printf %.0f) ms (load $(load))"
}
want ws && ws_section

# dialogue: a 20-line, 3-voice script with 6 style switches as one markup request
dialogue_section() {
  python3 - "$W/dialogue.json" "$W/plain.json" "$AUDIO" <<'PY'
import json, sys
voices = ["ryan", "vivian", "aiden"]
styles = {2: "sad", 5: "joy", 8: "whisper", 11: "angry", 14: "tired", 17: "excited"}
lines = []
for i in range(20):
    tag = "[%s] " % styles[i] if i in styles else ""
    lines.append("[voice:%s][neutral]%sLine %d of the dialogue is spoken here." % (voices[i % 3], tag, i + 1))
first = "Line 1 of the dialogue is spoken here."
for path, text, voice in ((sys.argv[1], " ".join(lines), "ryan"), (sys.argv[2], first, "ryan")):
    json.dump({"input": text, "voice": voice, "seed": 1, "max_seconds": float(sys.argv[3]),
               "response_format": "pcm", "stream_format": "audio"}, open(path, "w"))
PY
  : > "$W/d.s"; : > "$W/p.s"
  for i in $(seq "$WS_RUNS"); do
    curl -s --max-time 300 -o /dev/null -w '%{time_starttransfer}\n' -d @"$W/dialogue.json" "$URL/v1/audio/speech" >> "$W/d.s"
    curl -s --max-time 300 -o /dev/null -w '%{time_starttransfer}\n' -d @"$W/plain.json" "$URL/v1/audio/speech" >> "$W/p.s"
  done
  d=$(pct 0.5 < "$W/d.s"); p=$(pct 0.5 < "$W/p.s")
  echo "serve-bench: dialogue (20 lines, 3 voices, 6 style tags, one markup request) vs its first line alone: time to first audio byte p50 $d s vs $p s, difference $(awk -v a="$d" -v b="$p" 'BEGIN { printf "%+.0f", (a - b) * 1000 }') ms ($WS_RUNS each, alternated; goal within 50 ms; load $(load))"
}
want dialogue && dialogue_section

# 4. soak
# resident kB: all, and the anonymous part (heap, caches; the rest is the weights' file pages)
rss() { awk '/^VmRSS/ {r = $2} /^RssAnon/ {a = $2} END {print r, a}' "/proc/$PID/status"; }
fds() { ls "/proc/$PID/fd" | wc -l; }
# req EXPECTED_STATUS CURL_ARGS...: one request with a time limit; a status other than the
# expected one is counted and logged
req() {
  want=$1; shift
  got=$(curl -s --max-time 120 -o "$W/soak.out" -w '%{http_code}' "$@" || true)
  n_req=$((n_req + 1))
  if [ "$got" != "$want" ]; then
    n_bad=$((n_bad + 1))
    echo "serve-bench: soak: expected $want, got $got: $* $(head -c 200 "$W/soak.out")" >> "$W/soak.bad"
  fi
}
soak_section() {
  bin/clone -m "${MODEL%-cv}-base" tests/audio/en_ohenry_chenevert.wav -o "$W/soak.qvoice" -n soak \
    --consent bench >/dev/null 2>&1 || cp voices/ohenry.qvoice "$W/soak.qvoice"
  head -c 3000 tests/audio/en_ohenry_chenevert.wav > "$W/bad.wav"   # a WAV cut short, then noise
  head -c 20000 /dev/urandom >> "$W/bad.wav"
  printf '{"input":"%0*d"}' 5000 0 > "$W/long.json"                 # over --max-text-chars
  : > "$W/soak.bad"
  ( while kill -0 "$PID" 2>/dev/null; do echo "$(rss) $(fds)"; sleep "$SAMPLE"; done ) > "$W/samples" 2>/dev/null &
  SAMPLER=$!
  load0=$(load)
  end=$(( $(date +%s) + SOAK ))
  n=0 n_req=0 n_bad=0
  while [ "$(date +%s)" -lt "$end" ]; do
    n=$((n + 1))
    case $((n % 8)) in
      0) req 200 -d "$(body "$n" "" wav)" "$URL/v1/audio/speech" ;;
      1) req 200 -d "$(body "$n" audio pcm)" "$URL/v1/audio/speech" ;;
      2) req 200 -d "$(body "$n" sse pcm)" "$URL/v1/audio/speech" ;;
      3) id=$(curl -s --max-time 120 -F audio_sample=@"$W/soak.qvoice" -F consent=bench -F name=soak "$URL/v1/audio/voices" | sed -n 's/.*"id":"\([0-9a-f]*\)".*/\1/p')
         n_req=$((n_req + 1))
         [ -n "$id" ] || { n_bad=$((n_bad + 1)); echo "serve-bench: soak: upload failed" >> "$W/soak.bad"; }
         req 200 -d "{\"input\":\"$TEXT\",\"voice\":\"soak\",\"max_seconds\":2,\"stream_format\":\"audio\"}" "$URL/v1/audio/speech"
         req 200 "$URL/v1/audio/voices/soak"
         [ -n "$id" ] && req 200 -X DELETE "$URL/v1/audio/voices/$id" ;;
      4) req 200 "$URL/v1/audio/voices"; req 200 "$URL/metrics"; req 200 "$URL/ready" ;;
      5) req 400 -d '{"input": "unterminated' "$URL/v1/audio/speech"
         req 400 -d '{"input": 5}' "$URL/v1/audio/speech"
         req 400 -d '{"input": "hi", "voice": "nobody"}' "$URL/v1/audio/speech"
         req 404 -d '{"input": "hi", "model": "gpt-9"}' "$URL/v1/audio/speech"
         req 400 -d @"$W/long.json" "$URL/v1/audio/speech"
         req 404 "$URL/v1/audio/voices/nobody"
         if [ -n "$CLONE" ]; then req 400 -F audio_sample=@"$W/bad.wav" -F consent=bench "$URL/v1/audio/voices"; fi ;;
      6) # a client that leaves after a second: the server cancels the synthesis
         curl -s --max-time 1 -o /dev/null -d "$(body "$n" audio pcm)" "$URL/v1/audio/speech" || true
         n_req=$((n_req + 1)) ;;
      7) req 200 -d "$(body "$n" audio wav)" "$URL/v1/audio/speech" ;;
    esac
  done
  sleep "$SAMPLE"
  kill "$SAMPLER" 2>/dev/null; wait "$SAMPLER" 2>/dev/null || true; SAMPLER=
  # first, last, max, and the max of the middle and of the last third of the samples: a value that
  # plateaus (warm-up: the first requests page in weights and fill allocator arenas) has a
  # last-third max within 1% (and 1, for descriptors) of the middle third's; growth (a leak)
  # keeps raising it
  stats() { awk -v c="$1" 'NF == 3 {v[++n] = $c; if ($c > m) m = $c}
    END {for (i = int(n / 3) + 1; i <= n; i++) if (i <= int(2 * n / 3)) { if (v[i] > a) a = v[i] } else if (v[i] > b) b = v[i]
         printf "first %s, last %s, max %s; max of the middle third %s, of the last third %s (%s)", v[1], v[n], m, a, b, (b > a * 1.01 + 1 ? "still rising" : "plateaued")}' "$W/samples"; }
  [ -n "${QV_SOAK_SAMPLES:-}" ] && cp "$W/samples" "$QV_SOAK_SAMPLES"
  cat "$W/soak.bad"
  echo "serve-bench: soak ${SOAK} s, $n rounds, $n_req requests, $n_bad unexpected statuses; RSS (kB) $(stats 1); anonymous RSS (kB) $(stats 2); open fds $(stats 3); $(wc -l < "$W/samples") samples every ${SAMPLE} s; load $load0 at the start, $(load) at the end"
}
want soak && soak_section
kill -TERM $PID; wait $PID; PID=
