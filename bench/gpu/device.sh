#!/usr/bin/env bash
# The one-call GPU run (issue 26's kernels and the runtime on the GPU), from the repository root on
# the GPU machine:
#   run(command="bench/gpu/device.sh $OUT", carry=["build-gpu-pack"], timeout_s=540)
# build-gpu-pack/carry.tar.xz holds the stripped sm_90 binaries (scripts/build_gpu_carry.sh --pack:
# test_cuda_kernels, test_offload_cuda, endor-pack, endor-infer, bench_fused16, libgomp; ~15 MB
# compressed, where the binaries themselves are ~80 MB and a call carries 64 MiB with the ~31 MB
# tree). An unpacked build-gpu-carry/ (carried by parts) works too. Prepared on the CPU machine:
#   scripts/build_gpu_carry.sh --pack  the binaries, so the lease measures instead of compiling
#   bench/gpu/sol.sh                   bench/gpu/predicted.json (committed): the times SOL.md predicts
# Steps, each bounded by the deadline (ENDOR_GPU_DEADLINE, 470 s):
#   1. test_cuda_kernels (every CUDA kernel against the CPU backend / reference, on this GPU)
#   2. test_offload_cuda (the runtime on the CUDA backend: fixtures' logits, streaming tiers, batches)
#   3. compute-sanitizer memcheck, synccheck, racecheck over the 16-byte kernels' exact case, and
#      memcheck over test_offload_cuda, each bounded
#   4. bench_fused16: the kernel table (16-byte vs previous kernels vs cuBLAS dense f16, T = 1 and 8)
#      in the time left (the 128256-row head is last)
#   5. summary.json in the issue's shape (bench/gpu/summary.py), predictions beside measurements
# OUT gets: gpu.txt, tests.txt, sanitize.txt, kernels.txt, kernels.jsonl, summary.json, device.log.
# Commit them under bench/gpu/<date>-<gpu>/.
set -uo pipefail
out=${1:?usage: bench/gpu/device.sh OUT_DIR}
root=$(cd "$(dirname "$0")/../.." && pwd)
deadline=${ENDOR_GPU_DEADLINE:-470}
start=$(date +%s)
mkdir -p "$out"
exec > >(tee -a "$out/device.log") 2>&1
elapsed() { echo $(( $(date +%s) - start )); }
left() { echo $(( deadline - $(elapsed) )); }
time_for() { (( $(elapsed) + $1 <= deadline )); }
note() { echo "== [$(elapsed)s] $*"; }

if [[ ! -d "$root/build-gpu-carry" && -f "$root/build-gpu-pack/carry.tar.xz" ]]; then
  mkdir -p "$root/build-gpu-carry" && tar -C "$root/build-gpu-carry" -xJf "$root/build-gpu-pack/carry.tar.xz"
fi
saved_ld=${LD_LIBRARY_PATH:-}
# Only the library our binaries may miss goes on the loader path (as bench/offload/device.sh), from
# build-gpu-carry/lib (scripts/build_gpu_carry.sh) or .device-deps when carried.
mkdir -p /tmp/endor-libs
if ! ldconfig -p | grep -q libgomp.so.1; then
  if [[ -f "$root/build-gpu-carry/lib/libgomp.so.1" ]]; then
    ln -sf "$root/build-gpu-carry/lib/libgomp.so.1" /tmp/endor-libs/
  elif [[ -f "$root/.device-deps/unpack.sh" ]]; then
    # shellcheck disable=SC1091
    source "$root/.device-deps/unpack.sh"
    ln -sf /opt/endor-deps/usr/lib/x86_64-linux-gnu/libgomp.so.1* /tmp/endor-libs/ 2>/dev/null
  fi
fi
cuda_libs=$(python3 -c "import glob, site; print(':'.join(sorted({p.rsplit('/', 1)[0] for d in site.getsitepackages() for p in glob.glob(d + '/nvidia/**/libcublas.so*', recursive=True)})))" 2>/dev/null)
export LD_LIBRARY_PATH="/tmp/endor-libs:/usr/local/cuda/lib64:/usr/local/cuda/lib${cuda_libs:+:$cuda_libs}${saved_ld:+:$saved_ld}"

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv | tee "$out/gpu.txt"
nvcc --version 2>/dev/null | tail -1 | tee -a "$out/gpu.txt"
build="$root/build-gpu-carry"
[[ -d "$build" ]] || { note "error: no build-gpu-carry (run scripts/build_gpu_carry.sh first)"; exit 1; }
# The test binaries were built in <root>/build-gpu (the same path here).
[[ -e "$root/build-gpu" ]] || ln -s build-gpu-carry "$root/build-gpu"

if time_for 60; then
  note "test_cuda_kernels"
  (cd "$build/tests/cuda" && timeout --signal=KILL 120 ./test_cuda_kernels; echo "exit status $?") 2>&1 |
    tail -40 | tee "$out/tests.txt"
fi

if [[ -x "$build/tests/offload/test_offload_cuda" ]] && time_for 60; then
  note "test_offload_cuda"
  (cd "$build/tests/offload" && timeout --signal=KILL 120 ./test_offload_cuda; echo "exit status $?") 2>&1 |
    tail -40 | tee -a "$out/tests.txt"
fi

# The sanitizers instrument every access: the exact-arithmetic case of the 16-byte kernels only
# (every form, shape class and token count of them), each tool bounded.
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
: > "$out/sanitize.txt"
for tool in memcheck synccheck racecheck; do
  time_for 45 || { note "deadline: skipping compute-sanitizer $tool"; continue; }
  note "compute-sanitizer --tool $tool test_cuda_kernels -tc='*16-byte kernels —*'"
  (cd "$build/tests/cuda" && timeout --signal=KILL $(( $(left) > 100 ? 90 : $(left) - 10 )) "$san" --tool "$tool" \
     --error-exitcode 3 ./test_cuda_kernels '-tc=*16-byte kernels —*'; echo "$tool exit status $?") 2>&1 | tail -8 |
    tee -a "$out/sanitize.txt"
done

if [[ -x "$build/tests/offload/test_offload_cuda" ]] && time_for 150; then
  note "compute-sanitizer --tool memcheck test_offload_cuda"
  (cd "$build/tests/offload" && timeout --signal=KILL 90 "$san" --tool memcheck --error-exitcode 3 ./test_offload_cuda;
   echo "offload memcheck exit status $?") 2>&1 | tail -8 | tee -a "$out/sanitize.txt"
fi

note "bench_fused16 (its deadline: $(( $(left) > 110 ? $(left) - 90 : 20 )) s)"
timeout --signal=KILL $(( $(left) > 60 ? $(left) - 20 : 40 )) "$build/bench/bench_fused16" --json "$out/kernels.jsonl" \
  --deadline $(( $(left) > 110 ? $(left) - 90 : 20 )) | tee "$out/kernels.txt"

note "summary.json"
if [[ -s "$out/kernels.jsonl" ]]; then
  python3 "$root/bench/gpu/summary.py" "$out/kernels.jsonl" "$root/bench/gpu/predicted.json" "$out/summary.json"
else
  note "no kernel records (bench_fused16 did not run): no summary.json"
fi
note "done"
