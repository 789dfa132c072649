#!/usr/bin/env bash
# Configures and builds Endor into build/ (Release). CUDA code is built when nvcc is on PATH.
# Usage: scripts/build.sh [--target T...] [extra cmake args...]   (default: every target)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
targets=()
if [ "${1:-}" = --target ]; then
  shift
  while [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; do targets+=("$1"); shift; done
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build -j"$jobs" ${targets[@]+--target "${targets[@]}"}
