#!/bin/sh
# bench-compress.sh — the compression table of docs/compression.md (make bench runs it last):
# qvoice-compress steps applied cumulatively to the synthetic 0.6B CustomVoice (vocabulary
# english; the size goal's row with english-small beside it), each spoken for
# 100 frames on QV_BENCH_THREADS (2) threads: size on disk, peak RSS, per-frame time, RTF (wall
# including load), CPU seconds (steadier than wall on a shared machine), and the quality figures
# of each lossy step. The pure-C reference engine's int8 runs in the same session when
# $QVOICE_REF_ENGINE names its binary (built outside this repo).
set -eu
cd "$(dirname "$0")/.."
CACHE=${QVOICE_CACHE:-cache}
CV=$CACHE/q06b-cv
J=${QV_BENCH_THREADS:-2}
FRAMES=${QV_BENCH_FRAMES:-100}
REF=${QVOICE_REF_ENGINE:-}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/bench-compress.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
TEXT="The old lighthouse keeper climbed the narrow stairs every evening, lit the great lamp, and watched the ships pass safely through the dark water below."
SPEAKER=$(bin/speak -m "$CV" --list-speakers | awk 'NR==1{print $1}')

mb() { awk -v b="$1" 'BEGIN { printf "%.0f", b / 1e6 }'; }
st_bytes() { cat "$1/model.safetensors" "$1/speech_tokenizer/model.safetensors" | wc -c; }

# row NAME DIR QUANT MATVECS: speak FRAMES frames; prints one table row
row() {
    /usr/bin/time -f "%e %M %U %S" -o "$TMP/time" bin/speak -m "$2" -s "$SPEAKER" -t "$TEXT" -j "$J" \
        --max-frames "$FRAMES" --ignore-eos --no-guard --no-chunk --quant "$3" -o "$TMP/a.wav" \
        2>"$TMP/err"
    set -- "$1" "$2" "$4" $(cat "$TMP/time")
    fr=$(sed -n 's/.*(\([0-9]*\) frames.*/\1/p' "$TMP/err")
    synth=$(sed -n 's/.* in \([0-9.]*\) s, RTF.*/\1/p' "$TMP/err")
    awk -v n="$1" -v q="$3" -v sz="$(mb "$(st_bytes "$2")")" -v w="$4" -v rss="$5" -v f="$fr" \
        -v s="$synth" -v u="$6" -v sy="$7" \
        'BEGIN { printf "| %s | %s | %s MB | %.0f MiB | %.0f ms | %.2f | %.0f s |\n",
        n, q, sz, rss / 1024, 1000 * s / f, w / (f / 12.5), u + sy }'
}

# greedy codes of DIR with QUANT into FILE (30 frames)
codes() {
    bin/speak -m "$1" -s "$SPEAKER" -t "$TEXT" -j "$J" --greedy --max-frames 30 --no-guard \
        --no-chunk --quant "$2" --dump-codes "$3" -q -o "$TMP/g.wav"
}
same() { cmp -s "$1" "$2" && echo identical || echo differ; }

c() { bin/qvoice-compress "$CV" -o "$TMP/$1" -j "$J" $2 >/dev/null; }
c v "--vocab english"
c vs "--vocab english --strip-encoder"
c vsf "--vocab english --strip-encoder --decoder-f16"
c vsfq "--vocab english --strip-encoder --decoder-f16 --q4"
c vsfqs "--vocab english-small --strip-encoder --decoder-f16 --q4"
# neurons: T = 1.4 keeps ~46 % of layers 10-27's neurons (max |act| averages ~1.45 on the synthetic 0.6B)
c n "--vocab english --strip-encoder --decoder-f16 --q4 --prune-neurons ${QV_BENCH_NEURON_T:-1.4}"
c p2 "--vocab english --strip-encoder --decoder-f16 --q4 --prune-layers 2"
c p4 "--vocab english --strip-encoder --decoder-f16 --q4 --prune-layers 4"

echo "qvoice compression — commit $(git rev-parse --short HEAD 2>/dev/null || echo ?), $(date -u +%Y-%m-%d)," \
     "$(nproc) cores, $J threads, $FRAMES frames, load average $(uptime | sed 's/.*load average: //')"
echo "| step (cumulative) | matvecs | size | peak RSS | per frame | RTF (wall incl. load) | CPU (user+sys) |"
echo "|---|---|---|---|---|---|---|"
row "0.6B CustomVoice as published" "$CV" bf16 bf16
row "same, int8 at load" "$CV" int8 int8
row "+ vocabulary (english)" "$TMP/v" bf16 bf16
row "+ encoder strip" "$TMP/vs" bf16 bf16
row "+ decoder f16" "$TMP/vsf" bf16 bf16
row "+ q4 (fully compressed, english)" "$TMP/vsfq" bf16 q4
row "fully compressed, english-small (size goal)" "$TMP/vsfqs" bf16 q4
row "+ MLP neurons pruned" "$TMP/n" bf16 q4
row "q4, 2 talker layers pruned" "$TMP/p2" bf16 q4
row "q4, 4 talker layers pruned" "$TMP/p4" bf16 q4
if [ -x "$REF" ]; then
    # from a neutral directory: it falls back to ./config.json
    cva=$(cd "$CV" && pwd)
    (cd "$TMP" && /usr/bin/time -f "%e %M %U %S" -o "$TMP/time" "$REF" -d "$cva" -s ryan -l English \
        -j "$J" --seed 42 --max-tokens "$FRAMES" --int8 --text "$TEXT" -o "$TMP/r.wav" \
        2>"$TMP/rerr") || true
    fr=$(sed -n 's/.*Generated \([0-9]*\) frames.*/\1/p' "$TMP/rerr")
    set -- $(cat "$TMP/time")
    [ -n "$fr" ] && awk -v w="$1" -v rss="$2" -v f="$fr" -v sz="$(mb "$(st_bytes "$CV")")" \
        -v cpu="$3 $4" 'BEGIN { split(cpu, c, " "); printf "| reference pure-C engine, int8 | int8 | %s MB | %.0f MiB | | %.2f | %.0f s |\n",
        sz, rss / 1024, w / (f / 12.5), c[1] + c[2] }'
fi

echo "load average at the end of the table: $(uptime | sed 's/.*load average: //')"
echo "size column: the two safetensors files; whole directories (du -b, tokenizer files included):" \
     "english $(du -sb "$TMP/vsfq" | cut -f1), english-small $(du -sb "$TMP/vsfqs" | cut -f1) bytes"
echo
echo "quality (greedy, 30 frames, against the published model):"
codes "$CV" bf16 "$TMP/c0"; codes "$CV" q4 "$TMP/c0q"
codes "$TMP/vs" bf16 "$TMP/c1"; codes "$TMP/vsfq" bf16 "$TMP/c2"; codes "$TMP/vsfqs" bf16 "$TMP/c2s"
codes "$TMP/p2" bf16 "$TMP/c3"; codes "$TMP/p4" bf16 "$TMP/c4"; codes "$TMP/n" bf16 "$TMP/c5"
echo "  vocabulary + encoder strip: codes $(same "$TMP/c0" "$TMP/c1") (lossless claim)"
echo "  fully compressed vs --quant q4 of the original: codes $(same "$TMP/c0q" "$TMP/c2")" \
     "(english), $(same "$TMP/c0q" "$TMP/c2s") (english-small)"
agree() { paste "$1" "$2" | awk '{ for (i = 1; i <= NF / 2; i++) { n++; s += $i == $(i + NF / 2) } }
    END { printf "%.1f %%", n ? 100 * s / n : 0 }'; }
echo "  2 / 4 layers pruned vs unpruned q4: codes equal $(agree "$TMP/c2" "$TMP/c3") / $(agree "$TMP/c2" "$TMP/c4")"
echo "  MLP neurons pruned vs unpruned q4: codes equal $(agree "$TMP/c2" "$TMP/c5")"
build/bench/bench_q8_quality "$CV" 30 "$J" int8 | sed 's/^/  /'
build/bench/bench_q8_quality "$CV" 30 "$J" q4 | sed 's/^/  /'
