#!/usr/bin/env bash
# Regenerates the speed-of-light figures of bench/gpu/SOL.md from the sm_90 build, no GPU needed:
# the SASS of kernels/cuda/fused_linear16.cu (cuobjdump), its loops' instruction counts
# (sass_profile.py -> profile.json), registers and shared memory (cuobjdump -res-usage), and the
# predicted times (sol.py -> predicted.json, read by device.sh's summary; tables on stdout).
# Needs cuobjdump and nvdisasm: the toolkit's, or PyPI's nvidia-cuda-cuobjdump / nvidia-cuda-nvdisasm
# wheels (e.g. `pip install --target ~/.cache/endor/cuda-tools nvidia-cuda-cuobjdump==13.2.78
# nvidia-cuda-nvdisasm==13.2.78`, then CUDA_TOOLS=~/.cache/endor/cuda-tools/nvidia/cu13/bin).
# Usage: bench/gpu/sol.sh [BUILD_DIR (build-gpu)] > tables.md
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build-gpu}
here="$root/bench/gpu"
tools=${CUDA_TOOLS:-}
[[ -n "$tools" ]] && export PATH="$tools:$PATH"
command -v cuobjdump >/dev/null || { echo "error: cuobjdump not found (set CUDA_TOOLS, see the comment)" >&2; exit 1; }
obj="$build/kernels/cuda/CMakeFiles/endor_kernels_cuda.dir/fused_linear16.cu.o"
[[ -f "$obj" ]] || { echo "error: $obj not built (cmake --build $build --target endor_kernels_cuda)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cuobjdump -sass "$obj" > "$tmp/sass.txt"
cuobjdump -res-usage "$obj" > "$tmp/res.txt"
python3 "$here/sass_profile.py" "$tmp/sass.txt" "$tmp/res.txt" > "$here/profile.json"
python3 "$here/sol.py" "$here/profile.json" --json "$here/predicted.json"
