#!/usr/bin/env bash
# Sets up, builds and runs every test: the Release suite (ctest), then the format and parser
# tests again under AddressSanitizer + UndefinedBehaviorSanitizer.
# Usage: scripts/test.sh            (what CI runs, via .ci/run)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
jobs=$(nproc 2>/dev/null || echo 2)
(cd build && ctest --output-on-failure -j"$jobs")

echo "== sanitizer build (ASan + UBSan): format and parser tests =="
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DENDOR_SANITIZE=ON -DENDOR_CUDA=OFF \
      -DENDOR_BENCH=OFF "-DENDOR_TEST_AREAS=format;packer" >/dev/null
cmake --build build-asan -j"$jobs"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
   ctest --output-on-failure -j"$jobs")
