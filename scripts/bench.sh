#!/bin/sh
# bench.sh — the speed table of qvoice (make bench): full-size synthetic 0.6B, 2 threads.
# Figures are medians of QV_BENCH_RUNS runs (default 3; the 300-frame syntheses run once).
# Timed with wall clock and CPU time: on a shared machine compare CPU time, not wall.
set -eu
cd "$(dirname "$0")/.."
CACHE=${QVOICE_CACHE:-cache}
CV=$(cd "$CACHE" && pwd)/q06b-cv
BASE=$CACHE/q06b-base
RUNS=${QV_BENCH_RUNS:-3}
J=${QV_BENCH_THREADS:-2}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
TEXT="The old lighthouse keeper climbed the narrow stairs every evening, lit the great lamp, and watched the ships pass safely through the dark water below."

median() { sort -n | awk '{v[NR]=$1} END {if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }
key() { awk -v k="$1" '$1==k {print $2}' "$2"; }

# speak N_FRAMES QUANT [--stream]: one run, prints "wall_s user_s sys_s maxrss_kb frames"
speak_run() {
    n=$1; q=$2; shift 2
    if [ "${1:-}" = --stream ]; then out="--stream"; else out="-o $TMP/a.wav"; fi
    /usr/bin/time -f "%e %U %S %M" -o "$TMP/time" \
        bin/speak -m "$CV" -s "$SPEAKER" -t "$TEXT" -j "$J" --max-frames "$n" --ignore-eos --no-guard --no-chunk \
        --quant "$q" $out >"$TMP/pcm" 2>"$TMP/err"
    frames=$(sed -n "s/.*(\([0-9]*\) frames.*/\1/p" "$TMP/err")
    echo "$(cat "$TMP/time") $frames"
}

# speak_med N QUANT [--stream] RUNS: median RTF (wall incl. load / audio), max RSS, CPU s
speak_med() {
    n=$1; q=$2; s=$3; r=$4
    : >"$TMP/runs"
    i=0; while [ $i -lt "$r" ]; do speak_run "$n" "$q" $s >>"$TMP/runs"; i=$((i + 1)); done
    rtf=$(awk '{print $1 / ($5 / 12.5)}' "$TMP/runs" | median)
    cpu=$(awk '{print $2 + $3}' "$TMP/runs" | median)
    rss=$(awk '{print $4}' "$TMP/runs" | sort -n | tail -1)
    fr=$(awk '{print $5}' "$TMP/runs" | sort -n | head -1)
    echo "$rtf $cpu $rss $fr"
}

# gen_med QUANT RUNS: median wall of generation alone (codes only, no decoder), 100 frames of $CV
gen_med() {
    : >"$TMP/gen"
    i=0; while [ $i -lt "$2" ]; do
        /usr/bin/time -f "%e" -o "$TMP/time" bin/speak -m "$CV" -s "$SPEAKER" -t "$TEXT" -j "$J" \
            --max-frames 100 --ignore-eos --no-guard --no-chunk --quant "$1" --dump-codes "$TMP/codes" -q
        cat "$TMP/time" >>"$TMP/gen"; i=$((i + 1))
    done
    median <"$TMP/gen"
}
# hidden_of GEN_S DEC_MS RTF: share of the decoder's work hidden behind generation, (codes-only
# wall + decoder CPU - wall of the 100-frame run with audio) / decoder CPU, clamped to [0, 1]
hidden_of() { awk -v g="$1" -v d="$2" -v s="$3" 'BEGIN {
    dt = d * 100 / 1000; h = (g + dt - s * 8) / dt; if (h < 0) h = 0; if (h > 1) h = 1;
    printf "%.0f%%", 100 * h }'; }

# Side by side with the pure-C engine (QVOICE_REF_ENGINE: its binary, built outside this repo; it
# is only a stopwatch). Same model, text, speaker, threads and 100 frames, output to a file, wall
# clock including load; runs interleaved (ours, theirs, ours, ...) so both see the same machine.
# It has no --ignore-eos: the lighthouse text keeps it from stopping before 100 frames, and
# every run's frame count is checked (WAV of 100 x 1920 samples).
vs_run() { # engine quant [model] -> "wall_s maxrss_kb samples"; ours reads model (default $CV)
    rm -f "$TMP/vs.wav"
    if [ "$1" = ours ]; then
        /usr/bin/time -f "%e %M" -o "$TMP/vs.time" bin/speak -m "${3:-$CV}" -s "$SPEAKER" -l english \
            -t "$TEXT" -j "$J" --seed 42 --max-frames 100 --ignore-eos --no-guard --no-chunk \
            --quant "$2" -o "$TMP/vs.wav" 2>/dev/null
    else
        fl=""; [ "$2" = int8 ] && fl=--int8; [ "$2" = q4 ] && fl=--int4
        (cd "$TMP/neutral" && /usr/bin/time -f "%e %M" -o "$TMP/vs.time" "$QVOICE_REF_ENGINE" \
            -d "$CV" -s "$SPEAKER" -l English -j "$J" --seed 42 --max-tokens 100 $fl --text "$TEXT" \
            -o "$TMP/vs.wav" >/dev/null 2>&1)
    fi
    # samples from the WAV's header (ours carries provenance chunks before its data)
    echo "$(cat "$TMP/vs.time") $(soxi -s "$TMP/vs.wav" 2>/dev/null || echo 0)"
}
# vs_row LABEL QUANT [MODEL]: one row, runs interleaved; QUANT q4 is the pure-C engine's --int4
vs_row() {
    : >"$TMP/vs.ours"; : >"$TMP/vs.ref"; i=0
    while [ $i -lt "$RUNS" ]; do
        vs_run ours "$2" ${3:-} >>"$TMP/vs.ours"; vs_run ref "$2" >>"$TMP/vs.ref"; i=$((i + 1))
    done
    bad=$(cat "$TMP/vs.ours" "$TMP/vs.ref" | awk '$3 != 192000' | wc -l)
    o=$(awk '{print $1}' "$TMP/vs.ours" | median); r=$(awk '{print $1}' "$TMP/vs.ref" | median)
    om=$(awk '{print $2}' "$TMP/vs.ours" | sort -n | tail -1); rm_=$(awk '{print $2}' "$TMP/vs.ref" | sort -n | tail -1)
    awk -v q="$1" -v o="$o" -v r="$r" -v om="$om" -v rm="$rm_" -v bad="$bad" 'BEGIN {
        printf "| %s: wall s (RTF), peak RSS | %.2f (%.2f), %d MB | %.2f (%.2f), %d MB | %.2fx%s |\n",
            q, o, o / 8, om / 1024, r, r / 8, rm / 1024, r / o, bad ? " (some run not 100 frames!)" : "" }'
}
vs_table() {
    mkdir -p "$TMP/neutral"
    echo "| 100 frames, wall incl. load (median of $RUNS) | qvoice | pure-C engine | speed-up |"
    echo "|---|---|---|---|"
    vs_row bf16 bf16
    vs_row int8 int8
    vs_row "4-bit directory vs --int4" q4 "$(q4_dir "$CV")"
}

# Where the time goes, per model and precision: bf16, the int8 and q4 views (--quant, mapped
# from the prepared cache after the first run) and the fully compressed 4-bit directory, made
# once beside the model (qvoice-compress --q4 --strip-encoder --decoder-f16); for the 1.7B
# CustomVoice (the instruct model) then the same side by side with the pure-C engine (its --int4
# beside our 4-bit directory; the 0.6B's is vs_table). time_table LABEL MODEL_NAME [vs]
q4_dir() { # MODEL_DIR -> its 4-bit directory, made once
    [ -d "$1-q4" ] || bin/qvoice-compress "$1" -o "$1-q4" --q4 --strip-encoder --decoder-f16 -j "$J" >/dev/null
    echo "$1-q4"
}
time_table() {
    L=$1; N=$2; V=${3:-}
    M=$(cd "$CACHE" && pwd)/$N
    MQ=$(q4_dir "$M")
    SPEAKER=$(bin/speak -m "$M" --list-speakers | awk 'NR==1{print $1}')
    for c in bf16 int8 q4 dir; do
        if [ $c = dir ]; then m=$MQ; q=bf16; else m=$M; q=$c; fi
        build/bench/bench_speak "$m" "$J" 30 "$RUNS" $([ $c = dir ] && echo q4 || echo $c) >"$TMP/$N.$c"
        CV=$m
        set -- $(speak_med 100 $q "" "$RUNS"); echo "rtf100 $1" >>"$TMP/$N.$c"
        echo "cpu100 $2" >>"$TMP/$N.$c"; echo "rss100 $(($3 / 1024))" >>"$TMP/$N.$c"
        g=$(gen_med $q "$RUNS"); echo "gen100 $g" >>"$TMP/$N.$c"
        echo "hidden $(hidden_of "$g" "$(key decoder_frame_ms_cpu "$TMP/$N.$c")" "$1")" >>"$TMP/$N.$c"
        if [ $c != bf16 ]; then set -- $(speak_med 300 $q "" 1); echo "rtf300 $1" >>"$TMP/$N.$c"; fi
        build/bench/bench_ttfa "$RUNS" bin/speak -m "$m" -s "$SPEAKER" -l english -t "$TEXT" \
            -j "$J" --seed 42 --max-frames 20 --no-guard --stream --quant $q >"$TMP/ttfa"
        echo "ttfa $(ttfa <"$TMP/ttfa")" >>"$TMP/$N.$c"
        echo "ttfa_cpu $(ttfa_cpu <"$TMP/ttfa")" >>"$TMP/$N.$c"
        CV=$M
    done
    row() { # LABEL KEY [SUFFIX]
        printf '| %s |' "$1"
        for c in bf16 int8 q4 dir; do printf ' %s%s |' "$(key "$2" "$TMP/$N.$c")" "${3:-}"; done
        echo
    }
    echo
    echo "where the time goes: full-size synthetic $L ($M), 4-bit directory $MQ, medians of $RUNS runs, load average $(uptime | sed 's/.*load average: //')"
    echo "| $L | bf16 | int8 (--quant int8) | q4 (--quant q4) | 4-bit directory |"
    echo "|---|---|---|---|---|"
    row "model load (mmap + decoder mapped), s" load_s
    row "start-up: view quantized / mapped from the cache, wall ms" quantize_ms
    row "  (mapped)" quantize_mapped_ms
    row "prefill, 40-token text, wall ms" prefill_ms
    row "frame (talker + code predictor), wall ms" frame_ms
    row "frame, CPU ms" frame_cpu_ms
    row "talker per frame, wall ms" talker_ms
    row "  weights read per frame, GB" talker_gb_per_frame
    row "  achieved, GB/s" talker_gbs
    row "code predictor per frame, wall ms" cp_ms
    row "  weights read per frame, GB" cp_gb_per_frame
    row "  achieved, GB/s" cp_gbs
    row "speech decoder per frame, one thread, CPU ms" decoder_frame_ms_cpu
    row "  on the $J-thread pool (the frames left when generation ends), wall ms" decoder_frame_pool_ms
    row "RTF 100 frames, -o file (wall incl. load)" rtf100
    row "CPU s, 100 frames" cpu100
    row "codes only, 100 frames (no decoder), wall s" gen100
    row "decoder work hidden behind generation, -o file" hidden
    row "RTF 300 frames, -o file (1 run)" rtf300
    row "time to first audio (speak --stream), s" ttfa
    row "  CPU used by then (every thread), s" ttfa_cpu
    row "peak RSS, 100 frames, MB" rss100
    if [ "$V" = vs ] && [ -n "${QVOICE_REF_ENGINE:-}" ]; then
        echo
        echo "side by side with the pure-C engine ($QVOICE_REF_ENGINE), same run, $L, $J threads"
        mkdir -p "$TMP/neutral"
        echo "| 100 frames, wall incl. load (median of $RUNS) | qvoice | pure-C engine | speed-up |"
        echo "|---|---|---|---|"
        vs_row bf16 bf16
        vs_row int8 int8
        vs_row "4-bit directory vs --int4" q4 "$MQ"
    fi
}
bench_17b() { time_table "1.7B CustomVoice" q17b-cv vs; }
ttfa() { sed -n 's/^ttfa \([0-9.]*\) s.*/\1/p'; }
ttfa_cpu() { sed -n 's/.*CPU to the first byte \([0-9.]*\) s.*/\1/p'; } # bench_ttfa's second figure
# QV_BENCH_MODELS: which models (default "0.6b 1.7b")
case " ${QV_BENCH_MODELS:-0.6b 1.7b} " in *" 0.6b "*) ;; *) bench_17b; exit 0 ;; esac

SPEAKER=$(bin/speak -m "$CV" --list-speakers | awk 'NR==1{print $1}')
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
load=$(uptime | sed 's/.*load average: //')

build/bench/bench_speak "$CV" "$J" 30 "$RUNS" bf16 >"$TMP/bf16"
build/bench/bench_speak "$CV" "$J" 30 "$RUNS" int8 >"$TMP/int8"
build/bench/bench_decoder "$BASE" 100 >"$TMP/dec"
dec_ms=$(sed -n 's/.*one-shot : *\([0-9.]*\) ms CPU.*/\1/p' "$TMP/dec")
set -- $(speak_med 100 bf16 "" "$RUNS"); b100=$1; b100cpu=$2; rss=$3; b100f=$4
set -- $(speak_med 100 bf16 --stream "$RUNS"); s100=$1; s100cpu=$2
set -- $(speak_med 300 bf16 "" 1); b300=$1
set -- $(speak_med 100 int8 "" "$RUNS"); i100=$1; i100cpu=$2; rss8=$3
set -- $(speak_med 300 int8 "" 1); i300=$1
# generation alone (codes only) for the decoder overlap: -o (decoder thread at idle priority
# beside the whole pool) and --stream
gen=$(gen_med bf16 "$RUNS")
hidden=$(hidden_of "$gen" "$dec_ms" "$s100")
hidden_o=$(hidden_of "$gen" "$dec_ms" "$b100")
# time to first audio as a user sees it: process start -> first PCM byte of speak --stream on
# stdout (warm page cache: bench_ttfa runs once unmeasured first); beside it, when
# QVOICE_REF_ENGINE names the pure-C engine's binary (built outside this repo), its --stdout mode
o=$(build/bench/bench_ttfa "$RUNS" bin/speak -m "$CV" -s "$SPEAKER" -l english -t "$TEXT" -j "$J" \
    --seed 42 --max-frames 20 --no-guard --stream)
ours=$(echo "$o" | ttfa); ours_cpu=$(echo "$o" | ttfa_cpu)
o=$(build/bench/bench_ttfa "$RUNS" bin/speak -m "$CV" -s "$SPEAKER" -l english -t "$TEXT" -j "$J" \
    --seed 42 --max-frames 20 --no-guard --stream --quant int8)
ours8=$(echo "$o" | ttfa); ours8_cpu=$(echo "$o" | ttfa_cpu)
ref="not measured (set QVOICE_REF_ENGINE)"
if [ -n "${QVOICE_REF_ENGINE:-}" ]; then
    mkdir -p "$TMP/neutral" # it falls back to ./config.json: run it where there is none
    o=$(build/bench/bench_ttfa "$RUNS" sh -c 'cd "$0" && exec "$@"' "$TMP/neutral" "$QVOICE_REF_ENGINE" -d "$CV" -s "$SPEAKER" -l English -j "$J" \
        --seed 42 --max-tokens 20 --stdout --text "$TEXT")
    r=$(echo "$o" | ttfa)
    ref="$r s, CPU $(echo "$o" | ttfa_cpu) s ($(awk -v a="$ours" -v b="$r" 'BEGIN {printf "ours / theirs = %.2f", a / b}'))"
fi
build/bench/bench_clone "$J" >"$TMP/clone"
ecapa=$(sed -n 's/.*mel + ECAPA *\([0-9.]*\) s wall (\([0-9.]*\) s CPU[;)].*/\1 \2/p' "$TMP/clone")
enc=$(sed -n 's/.*speech encoder *\([0-9.]*\) s wall (\([0-9.]*\) s CPU[;)].*/\1 \2/p' "$TMP/clone")
w16=$( { /usr/bin/time -f "%e" dd if=/dev/zero of="$TMP/w16" bs=1M count=16 conv=fsync status=none; } 2>&1 )
build/bench/bench_wdelta "$BASE" "$CV" "$TMP/wd.qvoice" >"$TMP/wd"
wd=$(cat "$TMP/wd")
build/bench/bench_tokenizer "$CV" >"$TMP/tok"
tok=$(sed -n 's/^tokenizer *//p' "$TMP/tok" | head -1)
wm=$(build/bench/bench_watermark | sed -n 's/^watermark: //p')
# issue 28's false-positive goal on its own terms: 10,000 windows that share no sample
wmfp=$(build/bench/bench_watermark --false-positives 10000 | sed -n 's/^watermark false positives: //p')
# Python list input (4 texts, 40 frames each) vs 4 calls one by one, same model and threads
PYTHONPATH=python QVOICE_LIB=build/libqvoice.so.0 python3 tests/bench/bench_python_batch.py "$CV" "$J" 40 >"$TMP/py" || true
pyb=$(awk '$1=="python_one_by_one_s"{a=$2" s ("$3" s CPU)"} $1=="python_list_s"{b=$2" s ("$3" s CPU)"}
    $1=="python_list_ratio"{r=$2} $1=="python_list_identical"{i=$2} $1=="python_batch_audio_s"{s=$2}
    END {printf "%s s of audio: %s one by one, %s as a list: %sx (goal >= 2x), same samples: %s", s, a, b, r, i}' "$TMP/py")

B="$TMP/bf16"; Q="$TMP/int8"
cat <<TABLE
qvoice benchmark — commit $commit, $(date -u +%Y-%m-%d), $(nproc) cores, $J threads, load average $load
model: full-size synthetic 0.6B CustomVoice ($CV), medians of $RUNS runs
| figure | bf16 | int8 |
|---|---|---|
| read bandwidth, $J threads (1 GiB) | $(key read_gbs $B) GB/s | |
| model load (mmap + decoder mapped from the prepared cache) | $(key load_s $B) s | |
| start-up: decoder weights prepared / mapped (wall, CPU ms) | $(key decoder_prepare_ms $B) ($(key decoder_prepare_ms_cpu $B)) / $(key decoder_mapped_ms $B) ($(key decoder_mapped_ms_cpu $B)) | |
| start-up: int8 view quantized / mapped (wall, CPU ms) | | $(key quantize_ms $Q) ($(key quantize_ms_cpu $Q)) / $(key quantize_mapped_ms $Q) ($(key quantize_mapped_ms_cpu $Q)) |
| start-up: tokenizer open (wall, CPU ms) | $(key tokenizer_open_ms $B) ($(key tokenizer_open_ms_cpu $B)) | |
| start-up: first / second one-frame decoder block, cold state (wall, CPU ms) | $(key first_block_cold_ms $B) ($(key first_block_cold_ms_cpu $B)) / $(key second_first_block_cold_ms $B) ($(key second_first_block_cold_ms_cpu $B)) | |
| start-up: the same on a stream thread started early, as --stream does (wall ms) | $(key first_block_ms $B) / $(key second_first_block_ms $B) | |
| prefill, 40-token text ($(key prefill_positions $B) positions; bf16 GEMM in both modes), wall | $(key prefill_ms $B) ms | $(key prefill_ms $Q) ms |
| frame (talker + code predictor), wall / CPU | $(key frame_ms $B) / $(key frame_cpu_ms $B) ms | $(key frame_ms $Q) / $(key frame_cpu_ms $Q) ms |
| talker per frame (frame − code predictor), wall | $(key talker_ms $B) ms ($(key talker_gbs $B) GB/s of $(key talker_gb_per_frame $B) GB) | $(key talker_ms $Q) ms ($(key talker_gbs $Q) GB/s) |
| code predictor per frame, wall / CPU | $(key cp_ms $B) / $(key cp_cpu_ms $B) ms ($(key cp_gbs $B) GB/s of $(key cp_gb_per_frame $B) GB) | $(key cp_ms $Q) / $(key cp_cpu_ms $Q) ms ($(key cp_gbs $Q) GB/s) |
| speech decoder, CPU per 80 ms frame | $dec_ms ms | |
| RTF 100 frames, -o file (wall incl. load) | $b100 (CPU $b100cpu s) | $i100 (CPU $i100cpu s) |
| RTF 100 frames, --stream (decoder thread + $((J - 1)) talker thread) | $s100 (CPU $s100cpu s) | |
| codes only, 100 frames (no decoder), wall | $gen s | |
| decoder work hidden behind generation, -o file / --stream | $hidden_o / $hidden | |
| RTF 300 frames, -o file (1 run) | $b300 | $i300 |
| time to first audio: process start -> first PCM byte of speak --stream (CPU used by then) | $ours s ($ours_cpu s) | $ours8 s ($ours8_cpu s) |
| the same for the pure-C engine's --stdout | $ref | |
| peak RSS, 100 frames | $((rss / 1024)) MB | $((rss8 / 1024)) MB |
| clone: mel + ECAPA, 30 s clip (wall CPU, s) | $ecapa | |
| clone: Mimi encoder, 30 s clip (wall CPU, s) | $enc | |
| write 16 MB file (fsync) | ${w16} s | |
| tokenizer | $tok | |
| Python list input of 4 texts vs 4 calls one by one (wall s, throughput) | $pyb | |
wdelta: $wd
watermark: $wm
watermark false positives: $wmfp
frames produced per 100-frame run: $b100f (--ignore-eos)
TABLE
if [ -n "${QVOICE_REF_ENGINE:-}" ]; then
    echo
    echo "side by side with the pure-C engine ($QVOICE_REF_ENGINE), same run, 0.6B CustomVoice, $J threads"
    vs_table
else
    echo "(set QVOICE_REF_ENGINE to the pure-C engine's binary for the side-by-side table)"
fi
time_table "0.6B CustomVoice" q06b-cv
case " ${QV_BENCH_MODELS:-0.6b 1.7b} " in *" 1.7b "*) bench_17b ;; esac
