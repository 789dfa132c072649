#!/usr/bin/env bash
# Builds, here, the binaries the GPU benchmarks (bench/offload/run.sh, bench/gpu/device.sh) use, for
# sm_90 only, and copies them stripped into build-gpu-carry/ (ignored; ~25 MB, mostly sm_90 code), to
# carry to the GPU machine with bench/offload/device.sh or bench/gpu/device.sh. Needs nvcc (the CUDA
# toolkit of the machine's major version: 13 here and there) and the project's build dependencies
# (scripts/setup.sh).
# --pack: also writes build-gpu-pack/carry.tar.xz (~20 MB) of every binary here, for bench/gpu/device.sh and bench/offload/device.sh, which a
# call carries beside the tree where the binaries themselves (~80 MB) do not fit.
set -euo pipefail
pack=0
[[ "${1:-}" == "--pack" ]] && pack=1
root=$(cd "$(dirname "$0")/.." && pwd)
build="$root/build-gpu"
carry="$root/build-gpu-carry"
bins=(runtime/endor-infer packer/endor-pack bench/bench_offload_probe bench/bench_cuda_kernels bench/bench_fused16
      tests/cuda/test_cuda_kernels tests/offload/test_offload_cuda)
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DENDOR_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DCMAKE_DISABLE_FIND_PACKAGE_dnnl=ON "-DENDOR_TEST_AREAS=cuda;offload" -DENDOR_TESTS=ON -DENDOR_BENCH=ON >/dev/null
cmake --build "$build" -j"$(nproc)" --target endor-pack endor-infer bench_offload_probe bench_cuda_kernels bench_fused16 \
      test_cuda_kernels test_offload_cuda
rm -rf "$carry"
for b in "${bins[@]}"; do
  mkdir -p "$carry/$(dirname "$b")"
  strip -o "$carry/$b" "$build/$b"
done
# The one library outside glibc/libstdc++/CUDA that they need (GPU machines may lack it).
mkdir -p "$carry/lib"
cp -L "$(ldd "$build/tests/cuda/test_cuda_kernels" | awk '$1 == "libgomp.so.1" {print $3}')" "$carry/lib/"
du -sh "$carry"
if (( pack )); then
  mkdir -p "$root/build-gpu-pack"
  tar -C "$carry" -cf - runtime packer tests lib bench |
    xz -T2 -6 > "$root/build-gpu-pack/carry.tar.xz"
  du -sh "$root/build-gpu-pack/carry.tar.xz"
fi
