#!/usr/bin/env bash
# Regenerates the samples/kjv-llama and 1.1B sections of bench/ACCURACY.md (between its kjv markers):
#  1. samples/kjv-llama packed dense, and with magnitude / Wanda / SparseGPT at 50 % unstructured
#     and 2:4, each without quantization, int8 and int4 (group 128): held-out perplexity
#     (endor-infer --perplexity heldout.txt --ctx 256), file size, ratio to dense, packing time and
#     peak RSS (/usr/bin/time -v). Calibration: calib.txt, 128 windows × 256 tokens, seed 0.
#     Cross-check: tools/wanda_reference_ppl.py (torch re-implementation of the Wanda reference).
#  2. Calibration memory on a ~1.1B Llama-shaped random checkpoint (TinyLlama shapes, written by
#     tools/make_big_checkpoint.py into a temporary folder, 2.2 GB): peak RSS of Wanda and
#     SparseGPT at several calibration sizes, the fitted formula and the value at 128 × 2048.
#     Takes about an hour on 2 cores; ACCURACY_1B=0 skips it (the section then says so).
# Usage: scripts/accuracy.sh [BUILD_DIR (default build)] [OUT (default bench/ACCURACY.md)]
# Needs: endor-pack and endor-infer built in BUILD_DIR, GNU time (/usr/bin/time), python3 with
# numpy, torch, transformers, tokenizers; zstd; about 8 GB free in $TMPDIR (or /tmp) for part 2.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
out=${2:-$root/bench/ACCURACY.md}
pack=$build/packer/endor-pack
infer=$build/runtime/endor-infer
sample=$root/samples/kjv-llama
for b in "$pack" "$infer"; do [ -x "$b" ] || { echo "error: $b not built" >&2; exit 1; }; done
[ -x /usr/bin/time ] || { echo "error: /usr/bin/time (GNU time) is needed" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/endor-accuracy-XXXXXX")
trap 'rm -rf "$work"' EXIT

# A shared 2-core machine: OpenMP threads must not spin while waiting, and no AVX-512 anywhere
# (CI machines may lack it): our kernels, OpenBLAS and oneDNN are capped at AVX2.
export OMP_WAIT_POLICY=passive ENDOR_ISA=avx2 OPENBLAS_CORETYPE=Haswell DNNL_MAX_CPU_ISA=AVX2
echo "$(date -u +%Y-%m-%d) $(nproc) $(cut -d' ' -f1-3 /proc/loadavg)" >"$work/conditions"

# timed LOG CMD...: runs CMD under /usr/bin/time -v; sets secs (wall), cpu_secs (user + system)
# and rss_mib (peak RSS).
timed() {
  local log=$1; shift
  /usr/bin/time -v "$@" >"$log.out" 2>"$log.time" || { cat "$log.out" "$log.time" >&2; exit 1; }
  secs=$(awk -F': ' '/Elapsed \(wall clock\)/ {n=split($2,a,":"); s=0; for(i=1;i<=n;i++) s=s*60+a[i]; print s}' "$log.time")
  cpu_secs=$(awk -F': ' '/(User|System) time \(seconds\)/ {s += $2} END {printf "%.1f", s}' "$log.time")
  rss_mib=$(awk -F': ' '/Maximum resident set size/ {printf "%.0f", $2/1024}' "$log.time")
}

# ---- 1. the sample model: one TSV line per row -------------------------------------------------
calib=(--calib "$sample/calib.txt" --calib-samples 128 --calib-seqlen 256 --seed 0)
# row METHOD PATTERN QUANT PACK-ARGS...
row() {
  local method=$1 pattern=$2 quant=$3; shift 3
  local file=$work/model.endor
  timed "$work/pack" "$pack" "$@" -o "$file"
  local ppl
  ppl=$("$infer" "$file" --perplexity "$sample/heldout.txt" --ctx 256 2>/dev/null | awk '/^perplexity:/ {print $2}')
  [ -n "$ppl" ] || { echo "error: no perplexity for $method $pattern $quant" >&2; exit 1; }
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$method" "$pattern" "$quant" "$ppl" "$(stat -c %s "$file")" "$secs" \
    "$rss_mib" >>"$work/sample.tsv"
  echo "$method $pattern $quant: ppl $ppl, ${secs} s, ${rss_mib} MiB" >&2
  rm -f "$file"
}
row dense - f16 convert "$sample"
for pattern in 50% 2:4; do
  if [ "$pattern" = 50% ]; then sp=(--sparsity 0.5); else sp=(--pattern 2:4); fi
  for method in magnitude wanda sparsegpt; do
    for quant in none int8 int4; do
      args=(prune "$sample" --method "$method" "${sp[@]}" --quant "$quant")
      [ "$method" = magnitude ] || args+=("${calib[@]}")
      row "$method" "$pattern" "$quant" "${args[@]}"
    done
  done
done
python3 "$root/tools/wanda_reference_ppl.py" --model "$sample" >"$work/reference.txt" 2>/dev/null

# ---- 2. calibration memory on a ~1.1B model ----------------------------------------------------
: >"$work/big.tsv"
if [ "${ACCURACY_1B:-1}" != 0 ]; then
  big=$work/tinyllama-shaped
  python3 "$root/tools/make_big_checkpoint.py" "$big" --layers 22 --hidden 2048 --intermediate 5632 \
    --heads 32 --kv-heads 4 --vocab 32000 --shards 2 >&2
  zstd -qdc "$root/tests/fixtures/tokenizers/llama2.tokenizer.json.zst" >"$big/tokenizer.json"
  python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['metadata']['total_size'] // 2)" \
    "$big/model.safetensors.index.json" >"$work/big.params"
  for method in wanda sparsegpt; do
    for size in 4x128 16x128 4x512 1x2048; do
      s=${size%x*}; l=${size#*x}
      timed "$work/big" "$pack" prune "$big" -o "$work/big.endor" --method "$method" --sparsity 0.5 \
        --calib "$sample/calib.txt" --calib-samples "$s" --calib-seqlen "$l" --seed 0
      rm -f "$work/big.endor"
      printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$method" "$s" "$l" "$secs" "$rss_mib" "$cpu_secs" >>"$work/big.tsv"
      echo "1.1B $method $size: ${secs} s (${cpu_secs} s CPU), ${rss_mib} MiB" >&2
    done
  done
fi

# ---- the report -------------------------------------------------------------------------------
# Only this script's part of the file (between its kjv markers) is replaced: the SmolLM2 section
# (scripts/accuracy_smollm2.sh) and the hand-written sections stay; without the markers it is appended.
python3 "$root/scripts/accuracy_report.py" "$work" >"$work/kjv.md"
python3 - "$work/kjv.md" "$out" <<'PY'
import os, sys
block = open(sys.argv[1]).read().rstrip("\n")
md = open(sys.argv[2]).read() if os.path.exists(sys.argv[2]) else "# Accuracy and cost of the pruning methods\n"
begin, end = "<!-- kjv:begin -->", "<!-- kjv:end -->"
if begin in md and end in md:
    md = md[:md.index(begin)] + block + md[md.index(end) + len(end):]
else:
    md = md.rstrip("\n") + "\n\n" + block + "\n"
open(sys.argv[2], "w").write(md)
PY
echo "updated $out (its kjv section)" >&2
