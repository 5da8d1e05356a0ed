#!/usr/bin/env bash
# nodiscard_check.sh CXX INCLUDE_DIR...: an asynchronous collective's Work must not be droppable
# unnoticed. A snippet that keeps it compiles; the same snippet dropping it fails under
# -Werror=unused-result, naming nodiscard. (Blocking calls return nothing: nothing to drop.)
set -u
cxx=$1
shift
inc=()
for d in "$@"; do inc+=(-I "$d"); done
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
body='#include "trainrt/runtime/communicator.hpp"
void f(trainrt::Communicator& c, float* x) {
  c.allreduce(x, x, 1, trainrt::DType::F32, trainrt::ReduceOp::Sum);
  KEEP c.allreduce_async(x, x, 1, trainrt::DType::F32, trainrt::ReduceOp::Sum);
}'
echo "${body/KEEP/trainrt::Work w =}" > "$dir/keep.cpp"
echo "${body/KEEP/}" > "$dir/drop.cpp"
if ! "$cxx" -std=c++20 -fsyntax-only -Werror=unused-result "${inc[@]}" "$dir/keep.cpp"; then
  echo "FAIL: the control snippet (Work kept) does not compile"
  exit 1
fi
if out=$("$cxx" -std=c++20 -fsyntax-only -Werror=unused-result "${inc[@]}" "$dir/drop.cpp" 2>&1); then
  echo "FAIL: dropping an async collective's Work compiled without a diagnostic"
  exit 1
fi
if ! grep -q nodiscard <<<"$out"; then
  echo "FAIL: dropping the Work failed, but not for nodiscard:"
  echo "$out"
  exit 1
fi
echo "OK: a dropped Work is a nodiscard diagnostic"
