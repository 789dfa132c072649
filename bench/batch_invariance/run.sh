#!/usr/bin/env bash
# What batch invariance costs (issue 37): endor-infer with its default (each sequence computed as it is
# alone) against --no-batch-invariance (the fast path), in interleaved rounds, on one model:
#   decode tok/s at batch 1 (-p, --stats' decode line), decode tok/s at batch 8 (--prompts --batch 8:
#   8 / the decode-only step time), prefill tok/s of a ~100- and a ~400-token prompt (-n 1).
# Usage: bench/batch_invariance/run.sh MODEL.endor [ROUNDS (default 5)] [THREADS (default 2)]
# Prints every round's figures, then the median of each and the ratio invariant / fast.
set -euo pipefail
cd "$(dirname "$0")/../.."
model=$1
rounds=${2:-5}
threads=${3:-2}
infer=build/runtime/endor-infer
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
text="In the beginning God created the heaven and the earth. And the earth was without form, and void; and darkness was upon the face of the deep."
for i in 1 2 3 4 5 6 7 8; do echo "$i. $text" | cut -c1-$((40 + 9 * i)); done >"$work/prompts.txt"
p100=$(for i in 1 2 3; do printf '%s ' "$text"; done)
p400=$(for i in $(seq 12); do printf '%s ' "$text"; done)
common=(--temperature 0 --ignore-eos --threads "$threads" --stats)

measure() {  # $1: mode (invariant|fast); prints "mode decode1 decode8 prefill100 prefill400"
  local flag=()
  [ "$1" = fast ] && flag=(--no-batch-invariance)
  local d1 d8 p1 p4
  d1=$("$infer" "$model" -p "The capital of France is" -n 64 "${common[@]}" "${flag[@]}" 2>&1 >/dev/null |
       sed -n 's/^decode: .*(\([0-9.]*\) tokens\/s)/\1/p')
  d8=$("$infer" "$model" --prompts "$work/prompts.txt" --batch 8 -n 48 "${common[@]}" "${flag[@]}" 2>&1 >/dev/null |
       sed -n 's/^batch: .*decode-only steps, \([0-9.]*\) ms each/\1/p' | awk '{printf "%.2f", 8000 / $1}')
  p1=$("$infer" "$model" -p "$p100" -n 1 "${common[@]}" "${flag[@]}" 2>&1 >/dev/null |
       sed -n 's/^prefill: \([0-9]*\) tokens.*(\([0-9.]*\) tokens\/s)/\2/p')
  p4=$("$infer" "$model" -p "$p400" -n 1 "${common[@]}" "${flag[@]}" 2>&1 >/dev/null |
       sed -n 's/^prefill: \([0-9]*\) tokens.*(\([0-9.]*\) tokens\/s)/\2/p')
  echo "$1 $d1 $d8 $p1 $p4"
}

echo "model: $model, $threads threads, $rounds interleaved rounds; $("$infer" "$model" -p x -n 1 --threads "$threads" --stats 2>&1 >/dev/null | sed -n 's/^backend: //p')"
echo "mode decode-b1-tok/s decode-b8-tok/s prefill-tok/s(94-token prompt) prefill-tok/s(373-token prompt)"
for r in $(seq "$rounds"); do
  if [ $((r % 2)) = 1 ]; then measure invariant; measure fast; else measure fast; measure invariant; fi
done | tee "$work/rounds.txt"
python3 - "$work/rounds.txt" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    f = line.split()
    vals = [float(v) for v in f[1:5]]
    rows.setdefault(f[0], []).append(vals)
names = ["decode batch 1", "decode batch 8", "prefill short", "prefill long"]
med = {m: [statistics.median(v[i] for v in rows[m]) for i in range(4)] for m in rows}
print("median tok/s      invariant     fast   invariant/fast")
for i, n in enumerate(names):
    print(f"{n:16s} {med['invariant'][i]:10.2f} {med['fast'][i]:8.2f}   {med['invariant'][i] / med['fast'][i]:.3f}")
PY
