#!/usr/bin/env bash
# The MoE benchmark of issue 39 on the CPU device: a random-weight checkpoint of the Qwen3-30B-A3B or
# Mixtral-8x7B shape (tools/make_moe_checkpoint.py), packed by this build's endor-pack, decoded by
# endor-infer and by llama.cpp on the same weights. One phase per call, so every lock hold stays short.
#
# Usage: bench/moe/run.sh PHASE OUT_DIR
#   gen       write the checkpoint (skipped when present)
#   pack V    pack one variant: dense (convert --dtype f16), int4k (--sparsity 0 --quant int4k
#             --quant-head int4k), int4-50 (magnitude 50 % --quant int4 --quant-head int4),
#             f16-50 (magnitude 50 %, f16)
#   gguf      export the dense file to F16 GGUF (endor-pack export --to gguf), llama-quantize it
#             to Q4_K_M and Q4_0
#   ram       in RAM: decode tokens/s of int4k, int4-50, f16-50 (endor-infer --plan) and Q4_K_M, Q4_0, F16
#             (llama-bench -p 0 -n N), ROUNDS interleaved rounds
#   probe     the disk rate (bench_offload_probe, O_DIRECT sequential reads of the int4-50 file)
#   disk      from disk, --cpu-mem = a quarter of the int4-50 file's expert bytes for int4-50 and for
#             dense (the same budget), expert cache on (default size; int4-50 also with
#             --expert-prefetch on) and off (--expert-cache 0), each with --plan; ROUNDS interleaved rounds
#   batch     from disk under the same budget: --prompts at each of ENDOR_MOE_BATCHES (--batch 8 and 1), --plan
#   measure   ram, probe, disk and batch in one lock hold (when other jobs queue on the lock)
#   table     bench/moe/table.py over OUT_DIR
# Every timed command runs under /tmp/endor-build.lock at normal priority (packing: nice 19), one
# flock per phase and round (each well under 10 minutes); the load average is logged beside it.
# OUT_DIR gets small text files only: one log per run, budget.txt, probe.txt, env.txt.
#
# Environment (defaults): ENDOR_MOE_SHAPE (qwen3-30b-a3b; or mixtral-8x7b), ENDOR_MOE_LAYERS (4; mixtral 1),
# ENDOR_MOE_WORK ($HOME/.cache/endor/moe: checkpoints and packed files, never in the repository),
# ENDOR_BUILD (build), LLAMA_BIN ($HOME/.cache/endor/peers/llama-build/bin), ENDOR_MOE_ROUNDS (2),
# ENDOR_MOE_TOKENS (32 decode tokens), ENDOR_MOE_THREADS (2), ENDOR_MOE_BATCHES ("8 1": the batch phase's
# --batch sizes, run in that order each round; e.g. "128 64 8 1").
set -uo pipefail

phase=${1:-}
[[ -z "$phase" ]] && { sed -n '2,27p' "$0" >&2; exit 2; }
shift
variant=""
[[ "$phase" == pack ]] && { variant=${1:-}; shift; }
out=${1:-}
[[ -z "$out" ]] && { echo "error: no OUT_DIR" >&2; exit 2; }

root=$(cd "$(dirname "$0")/../.." && pwd)
shape=${ENDOR_MOE_SHAPE:-qwen3-30b-a3b}
case "$shape" in qwen3-30b-a3b) def_layers=4 ;; mixtral-8x7b) def_layers=1 ;; *) echo "error: unknown shape $shape" >&2; exit 2 ;; esac
layers=${ENDOR_MOE_LAYERS:-$def_layers}
work=${ENDOR_MOE_WORK:-$HOME/.cache/endor/moe}/$shape-$layers
build=${ENDOR_BUILD:-$root/build}
llama=${LLAMA_BIN:-$HOME/.cache/endor/peers/llama-build/bin}
rounds=${ENDOR_MOE_ROUNDS:-2}
tokens=${ENDOR_MOE_TOKENS:-32}
threads=${ENDOR_MOE_THREADS:-2}
batches=${ENDOR_MOE_BATCHES:-8 1}
lock=/tmp/endor-build.lock
pack=$build/packer/endor-pack
infer=$build/runtime/endor-infer
ckpt=$work/ckpt
mkdir -p "$out" "$work"
prompt_ids="1 100 200 300 400 500 600 700"
# Greedy: with make_moe_checkpoint.py's scales each token routes on its own embedding and the greedy
# ids wander over the vocabulary (routing about uniform, as with llama-bench's random tokens). Not
# sampled: sampling 151936 logits without top-k cost endor-infer ~28 ms a token here before 8ba7cc9 (about 4 since).

declare -A pack_args=([dense]="convert --dtype f16"
                      [int4k]="prune --sparsity 0 --quant int4k --quant-head int4k"
                      [int4-50]="prune --sparsity 0.5 --method magnitude --quant int4 --quant-head int4"
                      [f16-50]="prune --sparsity 0.5 --method magnitude --dtype f16")
file_of() { echo "$work/$1.endor"; }
# locked CMD...: CMD under the lock, unless this run holds it already (phase measure, ENDOR_MOE_LOCKED=1).
locked() { if [[ -n "${ENDOR_MOE_LOCKED:-}" ]]; then "$@"; else flock "$lock" "$@"; fi; }
load() { cut -d' ' -f1-3 /proc/loadavg; }
note() { echo "== $(date -u +%H:%M:%S) [load $(load)] $*"; }
# warm FILE: its pages into the page cache (in-RAM runs read it from there).
warm() { cat "$1" >/dev/null; }

write_env() {
  { echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
    echo "cores: $(nproc); memory: $(free -g | awk '/Mem:/{print $2}') GiB"
    echo "shape: $shape, $layers blocks; threads: $threads; decode tokens: $tokens; rounds: $rounds"
    echo "commit: $(git -C "$root" rev-parse --short HEAD)"
    [[ -x "$llama/llama-bench" ]] && echo "llama.cpp: $("$llama/llama-bench" --version 2>&1 | head -1)"
  } >"$out/env.txt"
}

do_gen() {
  [[ -f "$ckpt/config.json" ]] && { note "checkpoint: $ckpt present"; return 0; }
  note "checkpoint: $shape, $layers blocks -> $ckpt"
  flock "$lock" nice -n 19 python3 "$root/tools/make_moe_checkpoint.py" "$ckpt" --shape "$shape" --layers "$layers" ||
    { echo "error: make_moe_checkpoint.py failed"; exit 1; }
}

do_pack() {
  [[ -n "${pack_args[$variant]:-}" ]] || { echo "error: unknown variant '$variant' (dense, int4k, int4-50, f16-50)"; exit 2; }
  local f; f=$(file_of "$variant")
  [[ -f "$f" ]] && { note "pack $variant: $f present"; return 0; }
  note "pack $variant: endor-pack ${pack_args[$variant]}"
  # shellcheck disable=SC2086
  flock "$lock" nice -n 19 /usr/bin/time -f "pack $variant: %e s, peak RSS %M KB" \
    "$pack" ${pack_args[$variant]} "$ckpt" -o "$f.tmp" 2>&1 | grep -v '^pack: ' | tee "$out/pack-$variant.log"
  [[ ${PIPESTATUS[0]} == 0 ]] || { rm -f "$f.tmp"; echo "error: packing $variant failed"; exit 1; }
  mv "$f.tmp" "$f"
}

do_gguf() {
  [[ -x "$llama/llama-quantize" ]] || { echo "error: no $llama/llama-quantize (bench/peers/build_llama.sh)"; exit 1; }
  if [[ -z "${ENDOR_MOE_LOCKED:-}" ]]; then  # one hold at nice 19 for the export and both quantizations
    flock "$lock" env ENDOR_MOE_LOCKED=1 nice -n 19 "$0" gguf "$out"
    return
  fi
  local f16=$work/f16.gguf
  if [[ ! -f "$f16" ]]; then
    note "gguf: export --to gguf"
    "$pack" export "$(file_of dense)" --to gguf -o "$f16.tmp" >"$out/gguf-export.log" 2>&1 ||
      { tail -3 "$out/gguf-export.log"; rm -f "$f16.tmp"; exit 1; }
    mv "$f16.tmp" "$f16"
  fi
  for q in Q4_K_M Q4_0; do
    [[ -f "$work/$q.gguf" ]] && continue
    note "gguf: llama-quantize $q"
    "$llama/llama-quantize" "$f16" "$work/$q.gguf.tmp" "$q" 2 >"$out/quantize-$q.log" 2>&1 ||
      { tail -3 "$out/quantize-$q.log"; rm -f "$work/$q.gguf.tmp"; exit 1; }
    mv "$work/$q.gguf.tmp" "$work/$q.gguf"
    tail -2 "$out/quantize-$q.log"
  done
  ls -la "$work"/*.gguf
}

# endor_run LOG FILE ARGS...: one endor-infer decode with --stats (greedy, ids prompt).
endor_run() {
  local log=$1 f=$2
  shift 2
  { echo "# $(date -u +%FT%TZ) load $(load): endor-infer $(basename "$f") --threads $threads -n $((tokens + 1)) $*"
    timeout 540 "$infer" "$f" --ids "$prompt_ids" -n $((tokens + 1)) --ignore-eos --temperature 0 --threads "$threads" \
      --stats "$@" 2>&1 >/dev/null
    echo "# exit $?"; } >"$log"
  grep -E "^(decode:|plan-summary|plan-vs-measured|expert-summary)" "$log" | cut -c1-200
}

do_ram() {
  write_env
  for r in $(seq 1 "$rounds"); do
    note "ram: round $r"
    locked bash -c "$(declare -f endor_run warm load); $(declare -p infer threads tokens prompt_ids); set -uo pipefail
      for v in int4k int4-50 f16-50; do warm '$work'/\$v.endor; endor_run '$out'/ram-\$v-r$r.log '$work'/\$v.endor --plan; done
      for q in Q4_K_M Q4_0 F16; do
        g='$work'/\$q.gguf; [[ \$q == F16 ]] && g='$work'/f16.gguf
        warm \$g
        { echo \"# \$(date -u +%FT%TZ) load \$(load): llama-bench -m \$(basename \$g) -t $threads -p 0 -n $tokens -r 1\"
          timeout 540 '$llama'/llama-bench -m \$g -t $threads -p 0 -n $tokens -r 1 -o csv 2>&1; echo \"# exit \$?\"; } >'$out'/ram-llama-\$q-r$r.log
        grep -E 'tg$tokens|avg_ts|\"' '$out'/ram-llama-\$q-r$r.log | tail -1 | cut -c1-200
      done"
  done
}

# The budget: a quarter of the int4-50 file's expert bytes (endor-pack inspect --json: experts per block).
budget_bytes() {
  "$pack" inspect "$(file_of int4-50)" --json | python3 -c '
import json, sys
e = json.load(sys.stdin)["experts"]
print(sum(b["bytes"] for b in e) // 4)'
}

do_probe() {
  [[ -f "$out/probe.txt" ]] && return 0
  note "probe: disk rate"
  locked "$build/bench/bench_offload_probe" --container "$(file_of int4-50)" --disk-bytes 1G --device cpu \
    >"$out/probe.txt" 2>&1 || { cat "$out/probe.txt"; exit 1; }
  echo "load $(load)" >>"$out/probe.txt"
  cat "$out/probe.txt"
}

do_disk() {
  write_env
  do_probe
  local b; b=$(budget_bytes) || exit 1
  echo "cpu_mem_bytes=$b (a quarter of the int4-50 file's expert bytes)" >"$out/budget.txt"
  for r in $(seq 1 "$rounds"); do
    note "disk: round $r (--cpu-mem $b)"
    locked bash -c "$(declare -f endor_run load); $(declare -p infer threads tokens prompt_ids); set -uo pipefail
      for v in int4-50 dense; do
        endor_run '$out'/disk-\$v-cache-r$r.log '$work'/\$v.endor --cpu-mem $b --plan
        [[ \$v == int4-50 ]] && endor_run '$out'/disk-\$v-cache-pf-r$r.log '$work'/\$v.endor --cpu-mem $b --expert-prefetch on --plan
        endor_run '$out'/disk-\$v-nocache-r$r.log '$work'/\$v.endor --cpu-mem $b --expert-cache 0 --plan
      done"
  done
}

do_batch() {
  write_env
  local b; b=$(budget_bytes) || exit 1
  local prompts=$out/prompts.txt n_prompts=8
  for n in $batches; do ((n > n_prompts)) && n_prompts=$n; done
  # Eight prompts, repeated with a number for batches past 8 (every sequence its own prompt).
  for i in $(seq 0 $((n_prompts - 1))); do
    p=("In the beginning" "The capital of France is" "Once upon a time" "A mixture of experts"
       "The quick brown fox" "Compression of weights" "Reading from the disk" "Eight sequences at once")
    if ((i < 8)); then echo "${p[i]}"; else echo "${p[i % 8]} $((i / 8))"; fi
  done >"$prompts"
  for r in $(seq 1 "$rounds"); do
    note "batch: round $r (--cpu-mem $b)"
    locked bash -c "$(declare -f load); set -uo pipefail
      for n in $batches; do
        { echo \"# \$(date -u +%FT%TZ) load \$(load): endor-infer int4-50.endor --prompts prompts.txt --batch \$n -n $tokens --cpu-mem $b --plan --stats --threads $threads\"
          timeout 540 '$infer' '$work'/int4-50.endor --prompts '$prompts' --batch \$n -n $tokens --ignore-eos --temperature 0 \
            --threads $threads --cpu-mem $b --plan --stats 2>&1 >/dev/null; echo \"# exit \$?\"; } >'$out'/batch-\$n-r$r.log
        grep -E '^(batch|plan-vs-measured|expert-summary|offload-summary)' '$out'/batch-\$n-r$r.log | cut -c1-200
      done"
  done
}

# The logs are committed: no machine paths in them.
scrub() { sed -i -e "s#$HOME/#~/#g" -e "s#$root/#./#g" "$out"/* 2>/dev/null; }
trap scrub EXIT

case "$phase" in
  measure)  # ram, probe, disk and batch in one lock hold (a few minutes), at normal priority
    if [[ -z "${ENDOR_MOE_LOCKED:-}" ]]; then exec flock "$lock" env ENDOR_MOE_LOCKED=1 "$0" measure "$out"; fi
    do_ram; do_probe; do_disk; do_batch ;;
  gen) do_gen ;;
  pack) do_pack ;;
  gguf) do_gguf ;;
  ram) do_ram ;;
  probe) do_probe ;;
  disk) do_disk ;;
  batch) do_batch ;;
  table) python3 "$root/bench/moe/table.py" "$out" ;;
  *) echo "error: unknown phase '$phase'" >&2; exit 2 ;;
esac
