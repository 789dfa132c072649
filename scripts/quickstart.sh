#!/usr/bin/env bash
# The README's first command: set up, build, pack the bundled sample model at 50 % sparsity,
# show what was gained, and generate text from the packed file. Works offline.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# Only the two programs it runs: the tests are scripts/test.sh's job (building them all first took
# minutes on 2 cores before the first output).
scripts/build.sh --target endor-pack endor-infer
sample=${ENDOR_SAMPLE:-samples/kjv-llama}
out=build/sample-50.endor
echo
echo "== endor-pack prune $sample --sparsity 0.5 =="
build/packer/endor-pack prune "$sample" -o "$out" --sparsity 0.5
echo
echo "== endor-pack inspect $out =="
build/packer/endor-pack inspect "$out" --verify
echo
echo "== endor-infer $out =="
build/runtime/endor-infer "$out" -p "${ENDOR_PROMPT:-And God said}" -n "${ENDOR_TOKENS:-64}" --temperature 0.8 --top-p 0.95 --seed 1
