#!/usr/bin/env bash
# The frontier in one arithmetic (issue 30): every file of scripts/frontier.sh (Endor's) and of
# scripts/llama_quants.sh (llama.cpp's GGUFs, converted by endor-pack) measured again with
# `endor-infer --exact`, i.e. f32 activations for every weight.
#
# Why: endor-infer's default path multiplies int8/int4 weights by activations quantized to int8 per
# 32 values (as llama.cpp's CPU path does for its own quantized files), while a llama.cpp file that
# endor-pack converts becomes f16 weights, which take unquantized activations. The default-path table
# therefore charges the activation rounding to Endor's files only; this one compares the weights alone.
#
# Usage: scripts/frontier_exact.sh [--models smollm2,kjv] [BUILD_DIR] [ENDOR_WORK] [LLAMA_WORK]
#   defaults: build, $ENDOR_CACHE/frontier-endor, $ENDOR_CACHE/frontier (ENDOR_CACHE: ~/.cache/endor)
# Appends to ENDOR_WORK/frontier-exact.tsv (model, engine, config, ppl_exact), skipping rows present.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
models=smollm2,kjv
if [[ ${1:-} == --models ]]; then models=$2; shift 2; fi
build=$(cd "${1:-$root/build}" && pwd)
cache=${ENDOR_CACHE:-$HOME/.cache/endor}
ework=${2:-$cache/frontier-endor} lwork=${3:-$cache/frontier}
pack=$build/packer/endor-pack infer=$build/runtime/endor-infer
for b in "$pack" "$infer"; do [[ -x $b ]] || { echo "scripts/frontier_exact.sh: $b not built" >&2; exit 1; }; done
out=$ework/frontier-exact.tsv
[[ -s $out ]] || printf 'model\tengine\tconfig\tppl_exact\n' >"$out"

exact_ppl() {  # FILE TEXT CTX -> perplexity with f32 activations
  nice -n 5 "$infer" "$1" --perplexity "$2" --ctx "$3" --exact 2>/dev/null | awk '/^perplexity:/ {print $2}'
}
have() { grep -q "^$1	$2	$3	" "$out"; }

for m in ${models//,/ }; do
  case $m in
    smollm2) text=/usr/share/common-licenses/GPL-3 ctx=512 ;;
    kjv) text=$root/samples/kjv-llama/heldout.txt ctx=256 ;;
    *) echo "scripts/frontier_exact.sh: unknown model $m" >&2; exit 2 ;;
  esac
  for f in "$ework/$m"/*.endor; do
    [[ -e $f ]] || continue
    c=$(basename "$f" .endor)
    have "$m" endor "$c" && continue
    p=$(exact_ppl "$f" "$text" "$ctx")
    [[ -n $p ]] || { echo "scripts/frontier_exact.sh: no perplexity for $f" >&2; exit 1; }
    printf '%s\tendor\t%s\t%s\n' "$m" "$c" "$p" | tee -a "$out"
  done
  for g in "$lwork/$m/$m"-*.gguf; do
    [[ -e $g ]] || continue
    t=$(basename "$g" .gguf); t=${t#"$m"-}
    have "$m" llama.cpp "$t" && continue
    tmp=$lwork/$m/exact-$t.endor
    nice -n 5 "$pack" convert "$g" -o "$tmp" >/dev/null 2>&1 || { echo "scripts/frontier_exact.sh: cannot convert $g" >&2; exit 1; }
    p=$(exact_ppl "$tmp" "$text" "$ctx")
    rm -f "$tmp"
    [[ -n $p ]] || { echo "scripts/frontier_exact.sh: no perplexity for $g" >&2; exit 1; }
    printf '%s\tllama.cpp\t%s\t%s\n' "$m" "$t" "$p" | tee -a "$out"
  done
done
