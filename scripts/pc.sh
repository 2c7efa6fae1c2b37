#!/bin/sh
# pc.sh TEMPLATE PREFIX LIBDIR INCLUDEDIR VERSION "LIBS": qvoice.pc on stdout. Each -lNAME of LIBS
# whose pkg-config file (NAME.pc or libNAME.pc) exists goes to Requires.private, so that
# `pkg-config --static` also brings that library's own dependencies; the rest to Libs.private.
set -e
template=$1 prefix=$2 libdir=$3 includedir=$4 version=$5 libs=$6
requires="" private=""
for f in $libs; do
  name=${f#-l}
  if [ "$name" != "$f" ] && pkg-config --exists "$name" 2>/dev/null; then
    requires="$requires $name"
  elif [ "$name" != "$f" ] && pkg-config --exists "lib$name" 2>/dev/null; then
    requires="$requires lib$name"
  else
    private="$private $f"
  fi
done
sed -e "s|@PREFIX@|$prefix|" -e "s|@LIBDIR@|$libdir|" -e "s|@INCLUDEDIR@|$includedir|" \
    -e "s|@VERSION@|$version|" -e "s|@REQUIRES_PRIVATE@|${requires# }|" \
    -e "s|@LIBS_PRIVATE@|${private# }|" "$template"
