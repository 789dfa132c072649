#!/usr/bin/env bash
# Prefill tokens/s of endor-infer builds side by side, in interleaved rounds: round r runs every
# file x prompt length x build once (the builds' order reversed every other round), so a change in
# this machine's load or memory speed hits every build alike. Prints each run as a TSV line, then per
# file and length the median tokens/s of each build and the median of the per-round ratios to the
# first build. A measurement only (never pass/fail).
#
# Usage: bench/prefill/run.sh [--rounds R] [--tokens "15 16 32 64 128"] [--threads N]
#                             --bin NAME=PATH [--bin NAME=PATH ...] FILE.endor [FILE.endor ...]
# e.g.   bench/prefill/run.sh --rounds 5 --bin before=/tmp/endor-infer.old --bin after=build/runtime/endor-infer \
#          smollm2-int4_50.endor smollm2-int8_50.endor
# The prompt is T token ids (100, 101, ...), -n 1, greedy; tokens/s is the "prefill:" line of --stats.
set -euo pipefail
rounds=3 tokens="15 16 24 32 48 64 96 128" threads=2
bins=() files=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --tokens) tokens="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --bin) bins+=("$2"); shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) files+=("$1"); shift ;;
  esac
done
if [[ ${#bins[@]} -eq 0 || ${#files[@]} -eq 0 ]]; then
  echo "bench/prefill/run.sh: give at least one --bin NAME=PATH and one .endor file (--help)" >&2
  exit 2
fi
for b in "${bins[@]}"; do
  [[ -x "${b#*=}" ]] || { echo "bench/prefill/run.sh: ${b#*=}: not an executable" >&2; exit 2; }
done
for f in "${files[@]}"; do
  [[ -r "$f" ]] || { echo "bench/prefill/run.sh: $f: not readable" >&2; exit 2; }
done
echo "# cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //') | threads: $threads | rounds: $rounds | load at start: $(cut -d' ' -f1-3 /proc/loadavg) | $(date -u '+%Y-%m-%d %H:%M UTC')"
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
printf 'round\tfile\tT\tbuild\tprefill_tok_s\n'
for ((r = 0; r < rounds; r++)); do
  order=("${bins[@]}")
  if ((r % 2 == 1)); then
    order=(); for ((i = ${#bins[@]} - 1; i >= 0; i--)); do order+=("${bins[$i]}"); done
  fi
  for f in "${files[@]}"; do
    for T in $tokens; do
      ids=$(seq -s ' ' 100 $((100 + T - 1)))
      for b in "${order[@]}"; do
        line=$(OMP_WAIT_POLICY=passive "${b#*=}" "$f" --ids "$ids" -n 1 --temperature 0 --threads "$threads" --stats 2>&1 | grep -m1 '^prefill:' || true)
        tps=$(sed -n 's/.*(\([0-9.]*\) tokens\/s).*/\1/p' <<<"$line")
        [[ -n "$tps" ]] || { echo "bench/prefill/run.sh: no prefill line from ${b#*=} on $f at T=$T" >&2; exit 1; }
        printf '%d\t%s\t%d\t%s\t%s\n' "$r" "$(basename "$f")" "$T" "${b%%=*}" "$tps" | tee -a "$raw"
      done
    done
  done
done
echo "# load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
first="${bins[0]%%=*}"
python3 - "$raw" "$first" <<'PY'
import sys, statistics, collections
raw, first = sys.argv[1], sys.argv[2]
rows = [l.rstrip("\n").split("\t") for l in open(raw)]
v = collections.defaultdict(dict)  # (file, T) -> build -> {round: tps}
builds = []
for r, f, T, b, tps in rows:
    v[(f, int(T))].setdefault(b, {})[r] = float(tps)
    if b not in builds: builds.append(b)
others = [b for b in builds if b != first]
print("| file | T | " + " | ".join(f"{b} tok/s" for b in builds) + " | " + " | ".join(f"{b} / {first}" for b in others) + " |")
print("|---|---:|" + "---:|" * (len(builds) + len(others)))
for (f, T) in sorted(v, key=lambda k: (k[0], k[1])):
    d = v[(f, T)]
    meds = [f"{statistics.median(d[b].values()):.1f}" for b in builds]
    ratios = [f"{statistics.median(d[b][r] / d[first][r] for r in d[b] if r in d[first]):.2f}x" for b in others]
    print(f"| {f} | {T} | " + " | ".join(meds) + " | " + " | ".join(ratios) + " |")
PY
