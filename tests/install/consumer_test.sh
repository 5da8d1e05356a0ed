#!/usr/bin/env bash
# The installed runtime is usable outside this tree: install the build into a scratch prefix, then
# build and run a tiny consumer against it with find_package(trainrt) and with pkg-config.
# Usage: consumer_test.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for component in runtime dev; do cmake --install "$build" --prefix "$tmp/prefix" --component "$component" >/dev/null; done
libdir=$(dirname "$(find "$tmp/prefix" -name 'libtrainrt.so.0' | head -1)")
[[ -d $libdir ]] || { echo "FAIL: no libtrainrt.so.0 installed under $tmp/prefix"; exit 1; }
export LD_LIBRARY_PATH=$libdir

# Only the front door is installed: every header there is one the consumer includes, or one an
# installed header includes.
include=$tmp/prefix/include
stray=0
while IFS= read -r header; do
  name=${header#"$include/"}
  grep -rqF "#include \"$name\"" "$here/consumer/main.cpp" "$include" \
    || { echo "FAIL: $name is installed, but no consumer includes it"; stray=1; }
done < <(find "$include" -type f)
(( stray == 0 ))

cmake -S "$here/consumer" -B "$tmp/cmake-build" -DCMAKE_PREFIX_PATH="$tmp/prefix" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF >/dev/null
cmake --build "$tmp/cmake-build" >/dev/null
"$tmp/cmake-build/consumer" "$tmp/ckpt-cmake"

export PKG_CONFIG_PATH=$libdir/pkgconfig
# shellcheck disable=SC2046
c++ "$here/consumer/main.cpp" $(pkg-config --cflags --libs trainrt) -o "$tmp/consumer-pc"
"$tmp/consumer-pc" "$tmp/ckpt-pc"
echo "consumers built with find_package(trainrt) and pkg-config trainrt ($(pkg-config --modversion trainrt)): OK"
