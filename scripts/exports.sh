#!/bin/sh
# Writes the linker version script of libqvoice.so: every function the given public headers
# declare, nothing else. The headers go through the preprocessor first so that usage examples in
# comments are not taken for declarations.
set -e
printf 'QVOICE_0 {\n  global:\n'
for h in "$@"; do
  ${CC:-cc} -E -P -x c "$h"
done | grep -oE '\bqvf?_[a-z0-9_]+[[:space:]]*\(' | tr -d ' (' | sort -u | sed 's/.*/    &;/'
printf '  local: *;\n};\n'
