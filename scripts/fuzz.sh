#!/bin/sh
# fuzz.sh — build every tests/fuzz/fuzz_*.c as a libFuzzer binary (clang, ASan + UBSan, fuzz-mode
# library: FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION skips CRC checks) and run each for FUZZ_SECONDS
# (default 60; FUZZ_TARGETS="fuzz_a fuzz_b" runs only those; FUZZ_SNDFILE_SRC: below). New inputs go to build/fuzz/corpus/<target>, crashes to tests/fuzz/findings/.
# Ends with one line per target: runs executed, and whether it found anything. Exit 1 on a finding.
set -u
SECONDS_PER=${FUZZ_SECONDS:-60}
CC=${FUZZ_CC:-clang}
B=build/fuzz
JOBS=${FUZZ_JOBS:-1}
CFLAGS="-g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined \
 -DFUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION -D_GNU_SOURCE -std=c11 -I. \
 -I/usr/include/cjson"
LIBS="-lopenblas -llz4 -lsndfile -lvorbis -logg -lsamplerate -lcjson -lpcre2-8 -lutf8proc -lfftw3f -lcrypto -lpng -lebur128 -lrubberband -lpthread -lm"
AVX2="-mavx2 -mfma -mf16c"
AVX512="$AVX2 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16 -mavx512vnni"
command -v "$CC" >/dev/null || { echo "fuzz.sh: $CC not found (apt-get install clang)" >&2; exit 1; }
mkdir -p "$B/obj" tests/fuzz/findings

# The library, instrumented (a file another module cannot build with clang is skipped with a note;
# a target that needs it then fails to link and is reported as not built).
objs=""
for src in $(ls util/*.c kernels/*.c voicefmt/*.c checkpoint/*.c features/*.c clone/*.c engine/*.c 2>/dev/null); do
  obj="$B/obj/$(echo "$src" | tr / _ | sed 's/\.c$/.o/')"
  isa=""
  case "$src" in *_avx2.c) isa=$AVX2 ;; *_avx512.c) isa=$AVX512 ;; esac
  if $CC $CFLAGS $isa -fsanitize=fuzzer-no-link -c "$src" -o "$obj" 2>"$obj.log"; then
    objs="$objs $obj"
  else
    echo "fuzz.sh: note: $src does not build with $CC (see $obj.log)" >&2
  fi
done
rm -f "$B/libqvoice-fuzz.a"
ar rcs "$B/libqvoice-fuzz.a" $objs

# FUZZ_SNDFILE_SRC=DIR: a libsndfile source tree (e.g. a checkout of the tag of the system's
# version). It is built once into $B/sndfile with the same instrumentation and linked before the
# system's, so libFuzzer sees coverage inside libsndfile and ASan checks its memory accesses.
# Without it the system libsndfile runs uninstrumented: ASan checks our code, the heap, and the
# libc calls libsndfile makes, and libFuzzer is guided by our code's coverage only.
SNDFILE=""
if [ -n "${FUZZ_SNDFILE_SRC:-}" ]; then
  sb="$B/sndfile"
  if [ ! -f "$sb/libsndfile.a" ]; then
    echo "fuzz.sh: building libsndfile from $FUZZ_SNDFILE_SRC (instrumented, static)" >&2
    { cmake -S "$FUZZ_SNDFILE_SRC" -B "$sb" -DCMAKE_C_COMPILER="$CC" \
        -DCMAKE_C_FLAGS="-g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined" \
        -DBUILD_SHARED_LIBS=OFF -DBUILD_PROGRAMS=OFF -DBUILD_EXAMPLES=OFF -DBUILD_TESTING=OFF \
        -DENABLE_CPACK=OFF -DINSTALL_MANPAGES=OFF &&
      cmake --build "$sb" --target sndfile -j "$JOBS"; } >"$sb.log" 2>&1 ||
      { echo "fuzz.sh: libsndfile did not build (see $sb.log)" >&2; exit 1; }
  fi
  SNDFILE="$sb/libsndfile.a -lFLAC -lvorbisenc -lopus -lmpg123 -lmp3lame"
fi

# The server targets (they include tests/fuzz/fuzz_server.h or server/server_impl.h) link server/'s
# objects, without its main, and libmicrohttpd.
sobjs=""
for src in $(ls server/*.c | grep -v server/main.c); do
  obj="$B/obj/$(echo "$src" | tr / _ | sed 's/\.c$/.o/')"
  $CC $CFLAGS -fsanitize=fuzzer-no-link -c "$src" -o "$obj" 2>"$obj.log" && sobjs="$sobjs $obj"
done
scripts/embed-studio.sh $(ls server/studio/* | sort) > "$B/studio_assets.c" &&
  $CC $CFLAGS -c "$B/studio_assets.c" -o "$B/obj/studio_assets.o" && sobjs="$sobjs $B/obj/studio_assets.o"
rm -f "$B/libqvserver-fuzz.a"
ar rcs "$B/libqvserver-fuzz.a" $sobjs

status=0
summary=""
for t in tests/fuzz/fuzz_*.c; do
  name=$(basename "$t" .c)
  if [ -n "${FUZZ_TARGETS:-}" ] && ! echo " $FUZZ_TARGETS " | grep -q " $name "; then continue; fi
  bin="$B/$name"
  # the targets that serve or check against the tiny model exit at their first input without it:
  # reported here, never counted as a clean run
  if grep -q 'tiny-cv\|fuzz_server.h' "$t" && [ ! -f "${QVOICE_CACHE:-cache}/tiny-cv/config.json" ]; then
    summary="$summary\n$name: NOT RUN (needs ${QVOICE_CACHE:-cache}/tiny-cv: make models)"
    status=1
    continue
  fi
  server=""
  grep -qE "fuzz_server.h|server/server_impl.h" "$t" && server="$B/libqvserver-fuzz.a -lmicrohttpd -lcurl"
  if ! $CC $CFLAGS -fsanitize=fuzzer "$t" $server "$B/libqvoice-fuzz.a" $SNDFILE $LIBS -o "$bin" 2>"$bin.log"; then
    summary="$summary\n$name: NOT BUILT (see $bin.log)"
    status=1
    continue
  fi
  mkdir -p "$B/corpus/$name"
  seeds=""
  [ -d "tests/fuzz/corpus/$name" ] && seeds="tests/fuzz/corpus/$name"
  # a target with a plain-program mode (-DQV_FUZZ_MAIN, fuzz_audio_load) writes its seeds itself,
  # made from the bundled clips each run (no binary audio is committed)
  if grep -q QV_FUZZ_MAIN "$t"; then
    mkdir -p "$B/seeds/$name"
    if $CC $CFLAGS -DQV_FUZZ_MAIN "$t" "$B/libqvoice-fuzz.a" $SNDFILE $LIBS -o "$bin-main" 2>>"$bin.log" &&
       "$bin-main" --seeds "$B/seeds/$name" >/dev/null 2>&1; then
      seeds="$seeds $B/seeds/$name"
    else
      echo "fuzz.sh: note: $name: no seeds written (see $bin.log)" >&2
    fi
  fi
  dict=""
  if [ -f "tests/fuzz/$name.dict" ]; then dict="-dict=tests/fuzz/$name.dict"
  else case "$name" in *qvf*|*legacy*|*roundtrip*|*voice_accept*) dict="-dict=tests/fuzz/qvf.dict" ;; esac; fi
  # the voice-acceptance path must never allocate more than a voice needs: with inputs of tens of
  # kB a legacy record decoding to 4 MiB is an expansion (the reader allows 8x + 1 MiB)
  limits="-rss_limit_mb=2048"
  [ "$name" = fuzz_voice_accept ] && limits="-rss_limit_mb=1024 -malloc_limit_mb=4"
  echo "== $name: $SECONDS_PER s" >&2
  "$bin" -max_total_time="$SECONDS_PER" $limits -timeout=10 -print_final_stats=1 $dict \
    -artifact_prefix="tests/fuzz/findings/$name-" "$B/corpus/$name" $seeds >"$B/$name.out" 2>&1
  rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$B/$name.out" | tail -1)
  if [ $rc -eq 0 ]; then
    summary="$summary\n$name: ${runs:-?} runs in ${SECONDS_PER}s, no finding"
  else
    summary="$summary\n$name: FINDING after ${runs:-?} runs (see $B/$name.out and tests/fuzz/findings/)"
    status=1
  fi
done
printf "$summary\n"
exit $status
