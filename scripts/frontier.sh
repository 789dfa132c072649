#!/usr/bin/env bash
# The size-perplexity frontier (issue 30): Endor's configurations against llama.cpp's quantized files
# of the same weights, every perplexity by Endor's evaluator, on SmolLM2-135M-Instruct (real weights,
# a Q4_1 GGUF) and on the bundled KJV sample (trained here in floating point).
#
# For each configuration: pack (skipped when WORK already holds the file), file bytes, bits per
# weight of the decoder Linears (their stored bytes, parameters included, over their weights), and
# held-out perplexity (SmolLM2: GPL-3, --ctx 512; KJV: samples/kjv-llama/heldout.txt, --ctx 256).
# llama.cpp's rows come from scripts/llama_quants.sh's TSV (its files converted by endor-pack and
# evaluated the same way; llama-perplexity's own figure beside). Prints and writes WORK/frontier.tsv;
# scripts/frontier_report.py turns it into the ACCURACY.md table and the SVG.
#
# Usage: scripts/frontier.sh [--models smollm2,kjv] [--only REGEX] [BUILD_DIR] [WORK]
#   defaults: build, $ENDOR_CACHE/frontier-endor (ENDOR_CACHE: ~/.cache/endor)
# Needs: endor-pack, endor-infer in BUILD_DIR; the SmolLM2 GGUF (scripts/fetch_smollm2.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
models=smollm2,kjv only=.
while [[ $# -gt 0 && $1 == --* ]]; do
  case $1 in
    --models) models=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    *) echo "scripts/frontier.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
build=$(cd "${1:-$root/build}" && pwd)
cache=${ENDOR_CACHE:-$HOME/.cache/endor}
work=${2:-$cache/frontier-endor}
pack=$build/packer/endor-pack infer=$build/runtime/endor-infer
for b in "$pack" "$infer"; do [[ -x $b ]] || { echo "scripts/frontier.sh: $b not built" >&2; exit 1; }; done
mkdir -p "$work"
calib_smol=$work/calib-apache2-gpl2.txt
cat /usr/share/common-licenses/Apache-2.0 /usr/share/common-licenses/GPL-2 >"$calib_smol"
out=$work/frontier.tsv
[[ -s $out ]] || printf 'model\tengine\tconfig\tfile_bytes\tdecoder_bpw\tppl\n' >"$out"

# decoder-Linear bits per weight of a file (inspect --json: bytes and elements of layers.N.*.weight matrices)
bpw() {
  "$pack" inspect "$1" --json | python3 -c '
import json, re, sys
j = json.load(sys.stdin)
b = n = 0
for t in j["tensors"]:
    if re.search(r"layers\.\d+\..*(proj|fc\d|dense|query_key_value)\.weight$", t["name"]) and len(t["shape"]) == 2:
        b += t["bytes"]; n += t["numel"]
print(f"{8 * b / n:.3f}" if n else "nan")'
}

# row MODEL NAME PACK-ARGS...: packs WORK/MODEL/NAME.endor unless present, measures, appends a TSV row
row() {
  local model=$1 name=$2; shift 2
  [[ $name =~ $only ]] || return 0
  local dir=$work/$model file=$work/$model/$name.endor
  mkdir -p "$dir"
  if grep -q "^$model	endor	$name	" "$out"; then grep "^$model	endor	$name	" "$out"; return 0; fi
  if [[ ! -s $file ]]; then
    nice -n 5 "$pack" "$@" -o "$file" >"$dir/$name.pack.log" 2>&1 || { tail -3 "$dir/$name.pack.log" >&2; return 1; }
  fi
  local ppl
  ppl=$(nice -n 5 "$infer" "$file" --perplexity "$heldout" --ctx "$ctx" 2>"$dir/$name.ppl.err" | awk '/^perplexity:/ {print $2}')
  [[ -n $ppl ]] || { tail -3 "$dir/$name.ppl.err" >&2; return 1; }
  printf '%s\tendor\t%s\t%s\t%s\t%s\n' "$model" "$name" "$(stat -c %s "$file")" "$(bpw "$file")" "$ppl" | tee -a "$out"
}

if [[ ,$models, == *,smollm2,* ]]; then
  src=$(ls "$cache"/smollm2/*.gguf 2>/dev/null | head -1)
  [[ -n $src ]] || { echo "scripts/frontier.sh: no SmolLM2 GGUF in $cache/smollm2 (scripts/fetch_smollm2.sh)" >&2; exit 1; }
  heldout=/usr/share/common-licenses/GPL-3 ctx=512
  cal=(--calib "$calib_smol" --calib-samples 32 --calib-seqlen 512 --seed 0)
  m=smollm2
  row $m dense convert "$src"
  row $m int4k-g32+h8 prune "$src" --sparsity 0 --quant int4k --quant-head int8
  row $m int4k-g32+h4k prune "$src" --sparsity 0 --quant int4k --quant-head int4k
  row $m gptq-int4k-g32+h8 prune "$src" --method gptq --quant int4k --quant-head int8 "${cal[@]}"
  row $m int4k-g64+h8 prune "$src" --sparsity 0 --quant int4k --group-size 64 --quant-head int8
  row $m int8+h8 prune "$src" --sparsity 0 --quant int8 --quant-head int8
  row $m gptq-int8+h8 prune "$src" --method gptq --quant int8 --quant-head int8 "${cal[@]}"
  row $m int8g-g32+h8g prune "$src" --sparsity 0 --quant int8g --quant-head int8g
  row $m gptq-int8g-g32+h8g prune "$src" --method gptq --quant int8g --quant-head int8g "${cal[@]}"
  row $m int8g-g128+h8 prune "$src" --sparsity 0 --quant int8g --group-size 128 --quant-head int8
  # From the Hugging Face folder (bf16) that llama.cpp's files were made from (scripts/llama_quants.sh),
  # not the Q4_1 GGUF the other rows start from: Q8_0's grid on Q8_0's own input.
  hf=$cache/smollm2-135m-instruct-hf
  [[ -s $hf/model.safetensors ]] && row $m hf-int8g-g32+h8g prune "$hf" --sparsity 0 --quant int8g --quant-head int8g
  row $m int4k-g32-v8d8+h8 prune "$src" --sparsity 0 --quant int4k --int8 'v_proj|down_proj' --quant-head int8
  row $m sparsegpt50 prune "$src" --method sparsegpt --sparsity 0.5 "${cal[@]}"
  row $m sparsegpt50-int4k-g32+h8 prune "$src" --method sparsegpt --sparsity 0.5 --quant int4k --quant-head int8 "${cal[@]}"
  row $m sparsegpt50-int4-g64+h8 prune "$src" --method sparsegpt --sparsity 0.5 --quant int4 --group-size 64 --quant-head int8 "${cal[@]}"
  row $m int4-g128+h8 prune "$src" --sparsity 0 --quant int4 --quant-head int8
  # groups of 32 with f16 parameters: the source's own Q4_1 grid, kept exactly (gguf_exact_int4)
  row $m int4-g32+h8 prune "$src" --sparsity 0 --quant int4 --group-size 32 --quant-head int8
fi

if [[ ,$models, == *,kjv,* ]]; then
  src=$root/samples/kjv-llama heldout=$root/samples/kjv-llama/heldout.txt ctx=256
  cal=(--calib "$src/calib.txt" --calib-samples 128 --calib-seqlen 256 --seed 0)
  m=kjv
  row $m dense convert "$src"
  row $m int4k-g32+h4k prune "$src" --sparsity 0 --quant int4k --quant-head int4k
  row $m gptq-int4k-g32+h4k prune "$src" --method gptq --quant int4k --quant-head int4k "${cal[@]}"
  row $m int4k-g128+h4k prune "$src" --sparsity 0 --quant int4k --group-size 128 --quant-head int4k
  row $m int8+h8 prune "$src" --sparsity 0 --quant int8 --quant-head int8
  row $m int4k-g32+h8 prune "$src" --sparsity 0 --quant int4k --quant-head int8
  row $m sparsegpt50 prune "$src" --method sparsegpt --sparsity 0.5 "${cal[@]}"
  row $m sparsegpt50-int4k-g32+h4k prune "$src" --method sparsegpt --sparsity 0.5 --quant int4k --quant-head int4k "${cal[@]}"
  row $m int8 prune "$src" --sparsity 0 --quant int8 --quant-head none
  row $m gptq-int8 prune "$src" --method gptq --quant int8 --quant-head none "${cal[@]}"
  row $m gptq-int8+h8 prune "$src" --method gptq --quant int8 --quant-head int8 "${cal[@]}"
  row $m int4-g32 prune "$src" --sparsity 0 --quant int4 --quant-head none --group-size 32
  row $m int8g-g32 prune "$src" --sparsity 0 --quant int8g --quant-head none
  row $m int8g-g32+h8g prune "$src" --sparsity 0 --quant int8g --quant-head int8g
  row $m gptq-int8g-g32+h8g prune "$src" --method gptq --quant int8g --quant-head int8g "${cal[@]}"
fi
echo "wrote $out"
