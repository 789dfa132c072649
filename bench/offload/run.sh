#!/usr/bin/env bash
# The offloading benchmark of issue 5, one command per phase, for the H100/H200 machine (and, with
# ENDOR_BENCH_DEVICE=cpu ENDOR_BENCH_SHAPE=tiny, the same flow on the CPU to test the script).
#
# Usage: bench/offload/run.sh PHASE OUT_DIR
#   prepare  build Endor (Release, sm_90 only, the targets used here) or reuse $ENDOR_BENCH_BUILD;
#            write the random-weight Llama checkpoint (make_checkpoint.py); pack it dense, f16 50 %
#            and int4 50 % (magnitude); probe host-to-device and disk bandwidth
#   hostram  per-token decode latency with the offloaded blocks in host RAM: (a) Hugging Face
#            Accelerate (hf_offload.py), (b) Endor dense, (c) Endor f16 50 %, (d) Endor int4 50 %
#   disk     the same with every offloaded block on disk (Endor --cpu-mem 0: O_DIRECT reads;
#            Accelerate max_memory cpu 0 + offload_folder, page cache dropped before each step)
#   tests    the CUDA test binaries (test_cuda_kernels, test_offload_cuda) on this GPU, then
#            bench_cuda_kernels --quick (decode GB/s vs device copy)
#   sanitize compute-sanitizer (memcheck, racecheck, synccheck) over the CUDA test binaries
#   kernels  tests, then sanitize
#   table    the table of everything measured so far
#   timing   prepare, hostram and disk (all without the tests and sanitizers)
#   all      build, tests, prepare, hostram, disk, sanitize, in that order (the cheapest evidence
#            first: a short lease still checks the kernels), stopping when the deadline nears
# A phase first runs what it depends on when its outputs are missing (a fresh machine). Everything
# big lives in $ENDOR_BENCH_WORK; OUT_DIR gets at most 6 files: <phase>.log, table.md,
# results.jsonl (every record), probe.txt, tests.txt, kernels.txt.
#
# Environment (defaults): ENDOR_BENCH_WORK (/tmp/endor-offload-bench), ENDOR_BENCH_BUILD (empty:
# build in $WORK/build), ENDOR_BENCH_SHAPE (7b), ENDOR_BENCH_DEVICE (cuda), ENDOR_BENCH_GPU_MEM (3G),
# ENDOR_BENCH_STEPS (6 decode steps; disk: ENDOR_BENCH_DISK_STEPS, 3), ENDOR_BENCH_DEADLINE (540 s
# for the whole call).
# On the GPU machine, first: source .device-deps/unpack.sh (the Debian build dependencies).
set -uo pipefail

phase=${1:-}
out=${2:-}
if [[ -z "$phase" || -z "$out" ]]; then
  sed -n '2,24p' "$0" >&2
  exit 2
fi
case "$phase" in prepare|hostram|disk|tests|sanitize|kernels|table|timing|all) ;; *) echo "error: unknown phase '$phase'" >&2; exit 2 ;; esac

root=$(cd "$(dirname "$0")/../.." && pwd)
here="$root/bench/offload"
work=${ENDOR_BENCH_WORK:-/tmp/endor-offload-bench}
shape=${ENDOR_BENCH_SHAPE:-7b}
device=${ENDOR_BENCH_DEVICE:-cuda}
gpu_mem=${ENDOR_BENCH_GPU_MEM:-3G}
steps=${ENDOR_BENCH_STEPS:-6}
disk_steps=${ENDOR_BENCH_DISK_STEPS:-3}
deadline=${ENDOR_BENCH_DEADLINE:-540}
build=${ENDOR_BENCH_BUILD:-$work/build}
results="$work/results"
ckpt="$work/ckpt"
start=$(date +%s)
mkdir -p "$out" "$work" "$results"
log="$out/$phase.log"
exec > >(tee -a "$log") 2>&1
export PYTHONUNBUFFERED=1 OMP_WAIT_POLICY=passive

elapsed() { echo $(( $(date +%s) - start )); }
# time_for SECONDS: true when that much time is left before the deadline.
time_for() { (( $(elapsed) + $1 <= deadline )); }
note() { echo "== [$(elapsed)s] $*"; }
run_timed() {  # run_timed LIMIT_S CMD...: the command's exit status, 124 on timeout
  local limit=$1
  shift
  timeout --signal=KILL "$limit" "$@"
}

prompt="1 100 200 300 400 500 600 700"
declare -A pack_args=([b]="convert --dtype f16" [c]="prune --sparsity 0.5 --method magnitude"
                      [d]="prune --sparsity 0.5 --method magnitude --quant int4 --quant-head none")
declare -A container=([b]="$work/dense.endor" [c]="$work/f16-50.endor" [d]="$work/int4-50.endor")

write_env() {
  local name="cpu"
  [[ "$device" == cuda ]] && name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  python3 - "$results/env.json" "$shape" "$device" "$gpu_mem" "$name" <<'EOF'
import json, sys
path, shape, device, budget, name = sys.argv[1:6]
json.dump({"shape": shape, "device": device, "budget": ("--gpu-mem " + budget) if device == "cuda" else "CPU device",
           "device_name": name}, open(path, "w"))
EOF
}

do_build() {
  if [[ -x "$build/runtime/endor-infer" && -x "$build/packer/endor-pack" && -x "$build/bench/bench_offload_probe" ]] &&
     [[ "$device" != cuda || -x "$build/bench/bench_cuda_kernels" ]]; then
    # A build carried from another machine may miss a shared library here: then build afresh.
    if "$build/runtime/endor-infer" --help >/dev/null 2>&1; then
      note "build: reusing $build"
      return 0
    fi
    note "build: $build does not run here ($(ldd "$build/runtime/endor-infer" 2>&1 | grep -m1 'not found')); building in $work/build"
    build="$work/build"
  fi
  note "build: $build (Release, $device)"
  local gen=() cuda_args=(-DENDOR_CUDA=OFF) targets=(endor-pack endor-infer bench_offload_probe)
  command -v ninja >/dev/null && gen=(-G Ninja)
  # The image may lack pkg-config (CMake needs it for zstd and xxhash): the carried pkgconf debs have one.
  if ! command -v pkg-config >/dev/null && [[ -x /opt/endor-deps/usr/bin/pkg-config ]]; then
    export PATH="/opt/endor-deps/usr/bin:$PATH"
  fi
  if [[ "$device" == cuda ]]; then
    cuda_args=(-DENDOR_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90)
    # GPUDirect Storage headers from the nvidia-cufile wheel, when the toolkit has none: the run then
    # reports whether the machine could use cuFile (the staged path is used either way).
    export ENDOR_CUFILE_ROOT=${ENDOR_CUFILE_ROOT:-$(python3 -c "import glob, site; h = [p for d in site.getsitepackages() for p in glob.glob(d + '/nvidia/*/include/cufile.h')]; print(h[0].rsplit('/include/', 1)[0] if h else '')" 2>/dev/null)}
    note "cuFile headers: ${ENDOR_CUFILE_ROOT:-none}; nvidia-fs driver: $([[ -e /proc/driver/nvidia-fs ]] && echo present || echo absent)"
    targets+=(bench_cuda_kernels test_cuda_kernels test_offload_cuda)
  fi
  # oneDNN only speeds up CPU prefill; its carried CMake config is the likeliest thing to break.
  # CMAKE_POLICY_VERSION_MINIMUM: CMake 4 (pip's) refuses package files written for CMake < 3.5.
  cmake -S "$root" -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release "${cuda_args[@]}" -DCMAKE_DISABLE_FIND_PACKAGE_dnnl=ON \
        -DCMAKE_POLICY_VERSION_MINIMUM=3.5 \
        "-DENDOR_TEST_AREAS=cuda;offload" -DENDOR_TESTS=ON -DENDOR_BENCH=ON >"$work/cmake.log" 2>&1 ||
    { tail -30 "$work/cmake.log"; echo "error: cmake configure failed (log: $work/cmake.log)"; exit 1; }
  cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" >"$work/build.log" 2>&1 ||
    { grep -E "error|Error" "$work/build.log" | head -30; echo "error: build failed (log: $work/build.log)"; exit 1; }
  note "build: done"
}

do_prepare() {
  note "machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB RAM; $work: $(df -h "$work" | awk 'NR==2{print $4}') free"
  [[ "$device" == cuda ]] && nvidia-smi -L
  write_env
  do_build
  if [[ ! -f "$ckpt/config.json" ]]; then
    local need_gb=$([[ "$shape" == 7b ]] && echo 40 || echo 1)
    local free_gb=$(df -BG --output=avail "$work" | tail -1 | tr -dc 0-9)
    if (( free_gb < need_gb )); then
      echo "error: $work has ${free_gb} GB free; the checkpoint and the three containers need about ${need_gb} GB (set ENDOR_BENCH_WORK)"
      exit 1
    fi
    note "checkpoint: $shape -> $ckpt"
    python3 "$here/make_checkpoint.py" "$ckpt" --shape "$shape" || { echo "error: checkpoint failed"; exit 1; }
  fi
  # The three packs run side by side (each OpenMP-parallel over a share of the cores): their reads of
  # the checkpoint come from the page cache, their writes overlap.
  local todo=() pids=() threads
  for cfg in b c d; do [[ -f "${container[$cfg]}" ]] || todo+=("$cfg"); done
  if (( ${#todo[@]} > 0 )); then
    time_for 120 || { note "deadline: not packing ${todo[*]}"; return 1; }
    threads=$(( $(nproc) / ${#todo[@]} ))
    (( threads < 1 )) && threads=1
    for cfg in "${todo[@]}"; do
      note "pack ($cfg): endor-pack ${pack_args[$cfg]} ($threads threads)"
      OMP_NUM_THREADS=$threads /usr/bin/time -f "pack $cfg: %e s, peak RSS %M KB" "$build/packer/endor-pack" \
        ${pack_args[$cfg]} "$ckpt" -o "${container[$cfg]}" >"$work/pack-$cfg.log" 2>&1 &
      pids+=($!)
    done
    local failed=0
    for i in "${!pids[@]}"; do
      wait "${pids[$i]}" || { failed=1; tail -5 "$work/pack-${todo[$i]}.log"; }
      tail -1 "$work/pack-${todo[$i]}.log"
    done
    (( failed == 0 )) || { echo "error: packing failed"; exit 1; }
  fi
  ls -la "$work"/*.endor
  if [[ ! -f "$results/probe.txt" ]]; then
    note "probe: bandwidths"
    if "$build/bench/bench_offload_probe" --device "$device" --container "${container[b]}" --disk-bytes 4G \
         >"$work/probe.out"; then
      cp "$work/probe.out" "$results/probe.txt"
      cat "$results/probe.txt"
    else
      echo "error: bench_offload_probe failed"
      exit 1
    fi
  fi
  cp "$results/probe.txt" "$out/" 2>/dev/null
  return 0
}

prepared() {
  [[ -f "${container[b]}" && -f "${container[c]}" && -f "${container[d]}" && -f "$results/probe.txt" &&
     -x "$build/runtime/endor-infer" ]]
}

# endor_case CASE: (b), (c), (d) with the case's budgets.
endor_case() {
  local case=$1 budget=()
  if [[ "$device" == cuda ]]; then
    budget=(--gpu-mem "$gpu_mem")
    [[ "$case" == disk ]] && budget+=(--cpu-mem 0)
  else
    [[ "$case" == disk ]] && budget=(--cpu-mem 0)
  fi
  local n=$steps
  [[ "$case" == disk ]] && n=$disk_steps
  for cfg in b c d; do
    [[ -f "$results/$case-$cfg.json" ]] && { note "$case ($cfg): measured before"; continue; }
    time_for 90 || { note "deadline: skipping $case ($cfg)"; continue; }
    note "$case ($cfg): endor-infer ${budget[*]} on $(basename "${container[$cfg]}")"
    local l="$work/$case-$cfg.log"
    if run_timed 240 "$build/runtime/endor-infer" "${container[$cfg]}" --ids "$prompt" -n $((n + 1)) \
         --ignore-eos --temperature 0 --device "$device" "${budget[@]}" --stats >"$work/$case-$cfg.out" 2>"$l"; then
      grep -E "^(offload|placement|  (gpu|cpu|disk|slots|disk staging|device total|host total|moved|copies|disk reads|blocks)|decode|per decode)" "$l"
      python3 "$here/table.py" endor "$l" "$case" "$cfg" >"$results/$case-$cfg.json"
    else
      tail -5 "$l"
      echo "error: endor-infer ($case, $cfg) failed or timed out"
    fi
  done
}

hf_case() {
  local case=$1
  [[ -f "$results/$case-a.json" ]] && { note "$case (a): measured before"; return; }
  time_for 200 || { note "deadline: skipping $case (a)"; return; }
  local args=(--device "$device" --gpu-mem "${gpu_mem}iB" --prompt-ids "$prompt")
  if [[ "$case" == disk ]]; then
    rm -rf "$work/hf-offload"
    args+=(--steps "$disk_steps" --cpu-mem 0GiB --offload-folder "$work/hf-offload")
  else
    args+=(--steps "$steps")
  fi
  note "$case (a): hf_offload.py ${args[*]}"
  if run_timed $(( deadline - $(elapsed) - 10 )) python3 "$here/hf_offload.py" "$ckpt" "${args[@]}" \
       >"$work/$case-a.out" 2>"$work/$case-a.log"; then
    tail -1 "$work/$case-a.out" | python3 -c "import json,sys; r=json.load(sys.stdin); r.update(case='$case', config='a', tool='hf'); print(json.dumps(r))" \
      >"$results/$case-a.json"
    cat "$results/$case-a.json"
  else
    grep -v "Loading weights" "$work/$case-a.log" | tail -5
    echo "error: hf_offload.py ($case) failed or timed out"
  fi
}

do_case() {
  local case=$1
  prepared || do_prepare || return
  endor_case "$case"
  hf_case "$case"
}

# The CUDA test binaries, run directly (a carried build's ctest files name another machine's paths):
# every kernel against the CPU backend and the streaming executor against all-resident logits, on
# this GPU and unemulated; then the decode kernels' GB/s against the device-to-device copy.
do_tests() {
  [[ "$device" == cuda ]] || { note "tests: CUDA only"; return; }
  [[ -x "$build/bench/bench_cuda_kernels" ]] || do_build
  : >"$results/tests.txt"
  for t in tests/cuda/test_cuda_kernels tests/offload/test_offload_cuda; do
    time_for 60 || { note "deadline: skipping $t"; continue; }
    note "test: $t"
    (cd "$(dirname "$build/$t")" && run_timed 300 "$build/$t"; echo "$t: exit status $?") 2>&1 |
      tee -a "$results/tests.txt"
  done
  cp "$results/tests.txt" "$out/"
  time_for 60 || { note "deadline: skipping bench_cuda_kernels"; return; }
  note "kernels: bench_cuda_kernels --quick"
  run_timed 240 "$build/bench/bench_cuda_kernels" --quick --iters 10 | tee "$results/kernels.txt"
  cp "$results/kernels.txt" "$out/"
}

# compute-sanitizer over the CUDA tests: what the CPU emulation in CI (tests/cuemu) cannot see —
# the hardware's own memory errors, shared-memory races and barrier misuse. The 11008-column case
# is left out (its kernels run in the smaller cases; under the sanitizer it would take minutes).
do_sanitize() {
  [[ "$device" == cuda ]] || { note "sanitize: CUDA only"; return; }
  [[ -x "$build/tests/cuda/test_cuda_kernels" ]] || do_build
  local san
  san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  # racecheck last: on the H200 it ran past 230 s over this binary (2026-11-26), the others ~15 s.
  for tool in memcheck synccheck racecheck; do
    time_for 90 || { note "deadline: skipping compute-sanitizer $tool"; break; }
    note "compute-sanitizer --tool $tool test_cuda_kernels"
    (cd "$build/tests/cuda" && run_timed 240 "$san" --tool "$tool" --error-exitcode 3 \
       "$build/tests/cuda/test_cuda_kernels" "-tce=*11008*"; echo "exit status $?") 2>&1 | tail -8 |
      tee -a "$results/tests.txt"
  done
  if time_for 90; then
    note "compute-sanitizer --tool memcheck test_offload_cuda"
    (cd "$build/tests/offload" && run_timed 240 "$san" --tool memcheck --error-exitcode 3 \
       "$build/tests/offload/test_offload_cuda"; echo "exit status $?") 2>&1 | tail -8 | tee -a "$results/tests.txt"
  fi
  cp "$results/tests.txt" "$out/" 2>/dev/null
}

do_table() {
  python3 "$here/table.py" render "$results" | tee "$out/table.md"
  cat "$results"/hostram-?.json "$results"/disk-?.json 2>/dev/null >"$out/results.jsonl"
  cp "$results/probe.txt" "$out/" 2>/dev/null
  [[ -f "$results/kernels.txt" ]] && cp "$results/kernels.txt" "$out/"
  [[ -f "$results/tests.txt" ]] && cp "$results/tests.txt" "$out/"
  note "done"
}

case "$phase" in
  prepare) do_prepare ;;
  hostram) do_case hostram ;;
  disk) do_case disk ;;
  tests) do_tests ;;
  sanitize) do_sanitize ;;
  kernels) do_tests; do_sanitize ;;
  table) ;;
  timing) do_build; do_prepare && { do_case hostram; do_case disk; } ;;
  all) do_build; do_tests; do_prepare && { do_case hostram; do_case disk; }; do_sanitize ;;
esac
do_table
