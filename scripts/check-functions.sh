#!/bin/sh
# check-functions.sh — fails when a function of the library, server/, compress/ or tools/ is
# over 100 lines (signature to closing brace), naming it: long functions are split along their own seams
# (issue 22). Reads K&R-style definitions as the house writes them: a signature at column 0
# holding "(", a body closed by "}" alone at column 0.
set -u
cd "$(dirname "$0")/.."
max=100
dirs="util kernels voicefmt checkpoint features clone engine server compress tools"
# Table-like functions (one line per entry, nothing to split), "file:function" — none today.
allow=""
files=$(for d in $dirs; do ls "$d"/*.c 2>/dev/null; done)
[ -n "$files" ] || { echo "check-functions: no sources found" >&2; exit 2; }
long=$(awk -v max=$max -v allow=" $allow " '
  FNR == 1 { fn = "" }
  /^[A-Za-z_].*\(/ && !/;[ \t]*$/ && !/^(typedef|struct|enum|union)[ \t]/ {
    sig = $0; sub(/\(.*/, "", sig); n = split(sig, w, /[ \t*]+/); fn = w[n]; start = FNR }
  /^}[ \t]*$/ {
    if (fn != "" && FNR - start + 1 > max && !index(allow, " " FILENAME ":" fn " "))
      printf "check-functions: %s:%d: %s is %d lines (at most %d)\n", FILENAME, start, fn,
             FNR - start + 1, max
    fn = "" }' $files)
if [ -n "$long" ]; then printf '%s\n' "$long"; exit 1; fi
echo "check-functions: ok (no function over $max lines)"
