#!/usr/bin/env bash
# One device call of the GPU benchmark: run from the repository root on the GPU machine as
#   run(command="bench/offload/device.sh $OUT [PHASE]", carry=["build-gpu-pack"], timeout_s=...) (PHASE: run.sh's, default all), or
#   run(command="bench/offload/device.sh $OUT", carry=[".device-deps", "build-gpu-carry"], timeout_s=600)
# .device-deps: the build dependencies as Debian packages (`apt-get download` of scripts/setup.sh's list plus
# pkgconf pkgconf-bin libpkgconf3 libxxhash0 libgomp1; oneDNN/LAPACK debs may be left out: the benchmark builds
# without them), unpacked, with an unpack.sh that points the compiler and CMake at them.
# build-gpu-carry (optional): the six binaries run.sh uses, built here for sm_90 and stripped
# (`scripts/build_gpu_carry.sh`), so the lease is not spent compiling; when they do not run there,
# run.sh builds on the machine. ENDOR_BENCH_DEADLINE (default 530 s) bounds the call; a second call
# while the machine is warm goes on where this one stopped.
set -uo pipefail
out=${1:?usage: bench/offload/device.sh OUT_DIR}
root=$(cd "$(dirname "$0")/../.." && pwd)
saved_ld=${LD_LIBRARY_PATH:-}
phase=${2:-all}
if [[ ! -d "$root/build-gpu-carry" && -f "$root/build-gpu-pack/carry.tar.xz" ]]; then
  # scripts/build_gpu_carry.sh --pack: the binaries compressed (a call carries 64 MiB with the tree)
  mkdir -p "$root/build-gpu-carry" && tar -C "$root/build-gpu-carry" -xJf "$root/build-gpu-pack/carry.tar.xz"
fi
# shellcheck disable=SC1091
[[ -f "$root/.device-deps/unpack.sh" ]] && source "$root/.device-deps/unpack.sh"  # for a build on the machine
# The carried Debian libraries stay off the loader path of the machine's own Python (torch): only
# the two our binaries may miss are linked in, next to the CUDA libraries.
mkdir -p /tmp/endor-libs
for lib in libxxhash.so.0 libgomp.so.1; do
  ldconfig -p | grep -q "$lib" && continue
  if [[ -f "$root/build-gpu-carry/lib/$lib" ]]; then ln -sf "$root/build-gpu-carry/lib/$lib" /tmp/endor-libs/
  else ln -sf /opt/endor-deps/usr/lib/x86_64-linux-gnu/$lib* /tmp/endor-libs/; fi
done
cuda_libs=$(python3 -c "import glob, site; print(':'.join(sorted({p.rsplit('/', 1)[0] for d in site.getsitepackages() for p in glob.glob(d + '/nvidia/**/libcublas.so*', recursive=True)})))" 2>/dev/null)
export LD_LIBRARY_PATH="/tmp/endor-libs:/usr/local/cuda/lib64:/usr/local/cuda/lib${cuda_libs:+:$cuda_libs}${saved_ld:+:$saved_ld}"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$out/gpu.txt"
nvcc --version | tail -1 | tee -a "$out/gpu.txt"
build=""
if [[ -d "$root/build-gpu-carry" ]]; then
  build="$root/build-gpu-carry"
  # test_offload_cuda runs endor-pack/endor-infer from the folder it was built in (<root>/build-gpu
  # by scripts/build_gpu_carry.sh; the device machine's checkout is at the same path as here).
  [[ -e "$root/build-gpu" ]] || ln -s build-gpu-carry "$root/build-gpu"
fi
ENDOR_BENCH_BUILD=${ENDOR_BENCH_BUILD:-${build:-}} ENDOR_BENCH_DEADLINE=${ENDOR_BENCH_DEADLINE:-530} \
  "$root/bench/offload/run.sh" "$phase" "$out"
