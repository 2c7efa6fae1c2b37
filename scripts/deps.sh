#!/bin/sh
# Install the Debian packages qvoice builds and tests with; idempotent and quiet when all is there.
# As root it runs apt-get; otherwise it prints the exact command to run.
set -e
# help2man: make install's man pages. libmp3lame-dev, libunistring-dev: sndfile.pc and gnutls.pc
# (through libmicrohttpd) list -lmp3lame and -lunistring for `pkg-config --static`, and their -dev
# packages do not pull them in. lame, opus-tools, sox, espeak-ng: test_watermark runs marked audio
# through the codecs shared audio goes through. libimage-exiftool-perl: test_encode reads every
# container's provenance tags back with exiftool. python3-*: the Python package is
# pip-installed offline into a venv by its test (which runs it with and without numpy). ffmpeg:
# the tests decode `aac` output with ffmpeg and read its tags with ffprobe. libavcodec-dev: the
# headers `aac` is compiled against (libqvoice loads libavcodec itself only when aac is asked
# for, so a program that never asks does not need it installed).
INSTALL_PKGS="help2man libmp3lame-dev libunistring-dev python3 python3-venv python3-setuptools
python3-wheel python3-numpy lame opus-tools sox espeak-ng
libimage-exiftool-perl ffmpeg"

PKGS="gcc make pkg-config liblz4-dev libsndfile1-dev libvorbis-dev libogg-dev libsamplerate0-dev libopenblas-pthread-dev
libcjson-dev libpcre2-dev libutf8proc-dev libfftw3-dev libcmocka-dev libssl-dev libpng-dev libebur128-dev librubberband-dev
libavcodec-dev
clang libclang-rt-14-dev wamerican wamerican-small libmicrohttpd-dev libcurl4-openssl-dev nginx-light hey chromium"
missing=""
for p in $PKGS $INSTALL_PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
# node/npm run the reference tokenizer; any install that puts them on PATH will do.
command -v node >/dev/null 2>&1 || missing="$missing nodejs"
command -v npm  >/dev/null 2>&1 || missing="$missing npm"
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ]; then
  echo "deps: installing:$missing" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $missing >/dev/null
else
  echo "deps: missing packages; run:" >&2
  echo "  sudo apt-get update && sudo apt-get install -y$missing" >&2
  exit 1
fi
