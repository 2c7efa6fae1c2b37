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
# No cycle: neither in the table itself nor between the files of one folder (a folder is read
# top-down like a file: its headers form a tree). tsort names a cycle's members on stderr.
out="${B:-build}/check-layers.cycles"
printf '%s\n' "$rules" | awk -F: '{n = split($2, d, " "); for (i = 1; i <= n; i++) print $1, d[i]}' |
  tsort > /dev/null 2> "$out" || { echo "check-layers: $doc: the layers table has a cycle:"; cat "$out"; exit 1; }
# A file and its header are one node (foo.c including foo.h is no cycle).
for dir in $(printf '%s\n' "$rules" | cut -d: -f1); do
  for f in $(ls "$dir"/*.c "$dir"/*.h 2>/dev/null); do
    sed -n "s|^#include \"\($dir/[^\"]*\)\".*|${f%.*} \1|p" "$f"
  done
done | sed 's/\.h$//' | tsort > /dev/null 2> "$out" ||
  { echo "check-layers: files that include each other in a circle:"; sed -n 's/^tsort: //p' "$out"; exit 1; }
# Calls follow the same table: an object of folder X may only use symbols defined in X or in a
# folder X may include (the public qv_ functions count as `include` for the applications above
# the library, which link it; inside the library they are the folder's that defines them).
apps="server compress tools"
objs=""
for dir in $(printf '%s\n' "$rules" | cut -d: -f1); do
  # only objects whose source is still there: a build dir outlives moved or deleted files
  for o in $(ls "${B:-build}/$dir"/*.o 2>/dev/null); do
    src=${o#"${B:-build}/"}
    [ -f "${src%.o}.c" ] && objs="$objs $o"
  done
done
if [ -n "$objs" ]; then
  map="${B:-build}/qvoice.map"
  nm -A $objs 2>/dev/null | awk -v B="${B:-build}/" -v rules="$rules" -v apps=" $apps " -v mapf="$map" '
    BEGIN {
      n = split(rules, r, "\n")
      for (i = 1; i <= n; i++) { split(r[i], kv, ":"); m = split(kv[2], d, " "); ok[kv[1] " " kv[1]] = 1
                                 for (j = 1; j <= m; j++) ok[kv[1] " " d[j]] = 1 }
      while ((getline line < mapf) > 0) if (line ~ /^ *qv[a-z_0-9]*;/) { gsub(/[ ;]/, "", line); pub[line] = 1 }
    }
    { file = $1; sub(/:.*/, "", file); sub("^" B, "", file); dir = file; sub(/\/.*/, "", dir)
      if ($2 == "U") { use[++nu] = dir SUBSEP $3 SUBSEP file } else if ($2 ~ /^[TDBR]$/ && NF == 3) def[$3] = dir }
    END {
      for (i = 1; i <= nu; i++) {
        split(use[i], u, SUBSEP); y = def[u[2]]
        if (y == "" || ok[u[1] " " y]) continue
        if (index(apps, " " u[1] " ") && pub[u[2]] && ok[u[1] " include"]) continue
        if (u[1] == "tools" && pub[u[2]]) continue
        printf "check-layers: %s calls %s, defined in %s/ (%s/ may not use %s/)\n", u[3], u[2], y, u[1], y
        bad = 1
      }
      exit bad
    }' || exit 1
fi
# Nor do the files of a folder call each other in a circle (a router file and its handlers).
if [ -n "$objs" ]; then
  nm -A $objs 2>/dev/null | awk -v B="${B:-build}/" '
    { f = $1; sub(/:.*/, "", f); sub("^" B, "", f); sub(/\.o$/, "", f)
      if ($2 == "U") u[++n] = f SUBSEP $3; else if ($2 ~ /^[TDBR]$/ && NF == 3) d[$3] = f }
    END { for (i = 1; i <= n; i++) { split(u[i], x, SUBSEP); g = d[x[2]]; a = x[1]; b = g
            sub(/\/.*/, "", a); sub(/\/.*/, "", b)
            if (g != "" && g != x[1] && a == b) print x[1], g } }' | sort -u |
    tsort > /dev/null 2> "$out" ||
    { echo "check-layers: files that call each other in a circle:"; sed -n 's/^tsort: //p' "$out"; exit 1; }
fi
# libqvoice is the library only: no HTTP daemon in it.
so="${B:-build}/libqvoice.so"
if [ -f "$so" ] && readelf -d "$so" 2>/dev/null | grep -q 'NEEDED.*microhttpd'; then
  echo "check-layers: $so links libmicrohttpd (the server is an application, not library)"; exit 1
fi
echo "check-layers: ok ($(printf '%s\n' "$rules" | wc -l) folders)"
