#!/bin/sh
# check-layers.sh — fails on an #include that runs against the layering of docs/architecture.md,
# and on a library symbol exported without the project's qv prefix.
# The allowed directions are read from that document's "Layers" table (written once, there):
# | `folder` | `dep` `dep` … |. A folder may always include its own headers; tests/ may include
# anything. `tools` may include only the public headers listed under "Public headers".
set -u
cd "$(dirname "$0")/.."
doc=docs/architecture.md
rules=$(sed -n '/^<!-- layers -->/,/^<!-- \/layers -->/p' "$doc" | grep '^| `' |
        sed 's/^| `\([a-z]*\)` | \(.*\) |.*$/\1:\2/; s/`//g; s/—//g')
public=$(sed -n '/^<!-- public -->/,/^<!-- \/public -->/p' "$doc" | grep -o '`[a-z]*/[a-z_]*\.h`' | tr -d '`')
[ -n "$rules" ] || { echo "check-layers: $doc: no layers table found" >&2; exit 2; }
bad=0
for dir in $(printf '%s\n' "$rules" | cut -d: -f1); do
  allowed="$dir $(printf '%s\n' "$rules" | grep "^$dir:" | cut -d: -f2)"
  for f in $(ls "$dir"/*.c "$dir"/*.h 2>/dev/null); do
    grep -n '^#include "' "$f" | while IFS= read -r line; do
      inc=$(printf '%s' "$line" | sed 's/.*#include "\([^"]*\)".*/\1/')
      top=${inc%%/*}
      ok=0
      if [ "$top" = "$inc" ]; then
        echo "check-layers: $f: #include \"$inc\" does not name its folder"; echo x; continue
      fi
      for a in $allowed; do [ "$a" = "$top" ] && ok=1; done
      if [ "$dir" = tools ] && [ "$top" != tools ]; then
        ok=0; for p in $public; do [ "$p" = "$inc" ] && ok=1; done
      fi
      [ $ok = 1 ] || { echo "check-layers: $f:${line%%:*}: $dir/ may not include \"$inc\""; echo x; }
    done
  done
done > "${B:-build}/check-layers.out" 2>&1
grep -v "^x$" "${B:-build}/check-layers.out"
n=$(grep -c "^x$" "${B:-build}/check-layers.out")
if [ "$n" -gt 0 ]; then echo "check-layers: $n include(s) against docs/architecture.md"; exit 1; fi
# Every symbol the library exports carries the project prefix (nothing clashes in a user's link).
lib="${B:-build}/libqvoice.a"
if [ -f "$lib" ]; then
  stray=$(nm -g --defined-only "$lib" 2>/dev/null | awk 'NF == 3 {print $3}' | grep -v '^qv' | grep -Ev '^__(odr_asan|asan|ubsan|tsan)' | sort -u)
  if [ -n "$stray" ]; then
    echo "check-layers: $lib exports symbols without the qv prefix:" $stray
    exit 1
  fi
fi
echo "check-layers: ok ($(printf '%s\n' "$rules" | wc -l) folders)"
