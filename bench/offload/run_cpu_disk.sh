#!/usr/bin/env bash
# Disk-tier decode on the CPU, side by side in one run (issue 16): a Llama-2-7B-shaped f16
# checkpoint with random weights (by default 8 of its 32 decoder blocks: per-token figures per block
# scale linearly), every decoder block on the disk tier (--cpu-mem 0: O_DIRECT reads straight into
# the host slots), Endor dense f16 / f16 50 % / int8 50 % / int4 50 % (magnitude) against Hugging
# Face Accelerate's disk offload on the CPU (hf_offload.py --device cpu: f32 weights in an
# offload_folder, page cache dropped before each timed step); then throughput mode (--prompts, 8
# prompts at --batch 1 and --batch 8) with blocks from disk; --plan's prediction beside every
# measurement. Endor rows run in interleaved rounds (the machine may be shared).
#
# Usage: bench/offload/run_cpu_disk.sh OUT_DIR
# Environment (defaults): ENDOR_BENCH_WORK (/tmp/endor-offload-cpu: checkpoint and containers, ~12 GB
# at 8 blocks), ENDOR_BENCH_BUILD (build), ENDOR_BENCH_LAYERS (8), ENDOR_BENCH_ROUNDS (2),
# ENDOR_BENCH_STEPS (4 decode steps per run), ENDOR_BENCH_PARTS ("decode tput hf": which parts run;
# results.jsonl is started afresh only when decode runs), ENDOR_BENCH_TPUT_CONFIG (f16-50).
# Prints the table; OUT_DIR gets run.log, results.jsonl and table.md.
set -uo pipefail
out=${1:-}
[[ -n "$out" ]] || { sed -n '2,16p' "$0" >&2; exit 2; }
root=$(cd "$(dirname "$0")/../.." && pwd)
here="$root/bench/offload"
work=${ENDOR_BENCH_WORK:-/tmp/endor-offload-cpu}
build=${ENDOR_BENCH_BUILD:-$root/build}
layers=${ENDOR_BENCH_LAYERS:-8}
rounds=${ENDOR_BENCH_ROUNDS:-2}
steps=${ENDOR_BENCH_STEPS:-4}
mkdir -p "$out" "$work"
out=$(cd "$out" && pwd)
exec > >(tee -a "$out/run.log") 2>&1
export OMP_WAIT_POLICY=passive PYTHONUNBUFFERED=1
infer="$build/runtime/endor-infer"
pack="$build/packer/endor-pack"
results="$out/results.jsonl"
parts=" ${ENDOR_BENCH_PARTS:-decode tput hf} "
has() { [[ "$parts" == *" $1 "* ]]; }
has decode && : >"$results"
note() { echo "== [$(date +%T)] $*"; }
drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true; }

note "free disk: $(df -h "$work" | tail -1)"
ckpt="$work/ckpt"
if [[ ! -f "$ckpt/model.safetensors.index.json" && ! -f "$ckpt/model.safetensors" ]]; then
  note "checkpoint: 7b shape, $layers blocks"
  nice python3 "$here/make_checkpoint.py" "$ckpt" --shape 7b --layers "$layers" || exit 1
fi
declare -A args=([dense]="convert --dtype f16" [f16-50]="prune --sparsity 0.5 --method magnitude"
                 [int8-50]="prune --sparsity 0.5 --method magnitude --quant int8 --quant-head none"
                 [int4-50]="prune --sparsity 0.5 --method magnitude --quant int4 --quant-head none")
configs=(dense f16-50 int8-50 int4-50)
for c in "${configs[@]}"; do
  [[ -f "$work/$c.endor" ]] && continue
  note "pack $c: endor-pack ${args[$c]}"
  nice "$pack" ${args[$c]} "$ckpt" -o "$work/$c.endor" || exit 1
done

prompt="1 100 200 300 400 500 600 700"
# One Endor run: KEY=VALUE of its plan-summary, offload-summary and plan-vs-measured lines as JSON.
record() {  # record CONFIG KIND LOGFILE
  python3 - "$1" "$2" "$3" <<'EOF' >>"$results"
import json, sys
cfg, kind, log = sys.argv[1:4]
r = {"config": cfg, "kind": kind}
for line in open(log, errors="replace"):
    for key in ("plan-summary:", "offload-summary:", "plan-vs-measured:"):
        if line.startswith(key):
            for kv in line[len(key):].split():
                k, _, v = kv.partition("=")
                try:
                    r[k] = float(v)
                except ValueError:
                    r[k] = v
print(json.dumps(r))
EOF
}

for round in $(seq 1 "$rounds"); do
  has decode || break
  for c in "${configs[@]}"; do
    drop_caches
    note "round $round: $c, every block from disk"
    log="$work/$c-r$round.log"
    "$infer" "$work/$c.endor" --device cpu --cpu-mem 0 --ids "$prompt" -n $((steps + 1)) --temperature 0 \
      --ignore-eos --plan --stats >"$log.out" 2>"$log" || { tail -3 "$log"; continue; }
    grep -E "^(plan|offload-summary|plan-vs)" "$log"
    record "$c" decode "$log"
  done
done

# Throughput: 8 prompts of 1 to 8 tokens with blocks from disk, batch 1 then batch 8.
prompts="$work/prompts.txt"
python3 - "$prompts" <<'EOF'
import sys
with open(sys.argv[1], "w") as f:
    for i in range(8):
        f.write(" ".join(str(1 + (97 * i + 31 * j) % 31999) for j in range(1 + i)) + "\n")
EOF
tput_cfg=${ENDOR_BENCH_TPUT_CONFIG:-f16-50}
for b in 1 8; do
  has tput || break
  drop_caches
  note "throughput: $tput_cfg, 8 prompts, --batch $b, every block from disk"
  log="$work/tput-b$b.log"
  "$infer" "$work/$tput_cfg.endor" --device cpu --cpu-mem 0 --prompts "$prompts" --batch "$b" -n 8 --temperature 0 \
    --ignore-eos --plan --stats >"$log.out" 2>"$log" || { tail -3 "$log"; continue; }
  grep -E "^(plan|offload-summary|plan-vs|batch:)" "$log"
  record "$tput_cfg" "batch$b" "$log"
done
if ! has tput; then :
elif cmp -s "$work/tput-b1.log.out" "$work/tput-b8.log.out"; then note "throughput: batch 8 ids equal batch 1 ids"
else note "throughput: batch 8 ids DIFFER from batch 1"; fi

if has hf; then
  rm -rf "$work/hf-offload"
  drop_caches
  note "Accelerate: hf_offload.py --device cpu --cpu-mem 0GiB --offload-folder (f32, disk)"
  if nice -n 0 python3 "$here/hf_offload.py" "$ckpt" --device cpu --cpu-mem 0GiB --offload-folder "$work/hf-offload" \
       --prompt-ids "$prompt" --steps 3 >"$work/hf.out" 2>"$work/hf.log"; then
    tail -1 "$work/hf.out" | python3 -c "import json,sys; r=json.load(sys.stdin); r.update(config='hf-accelerate', kind='decode'); print(json.dumps(r))" >>"$results"
    tail -1 "$work/hf.out"
  else
    tail -5 "$work/hf.log"
  fi
  rm -rf "$work/hf-offload"
fi

python3 - "$results" "$layers" <<'EOF' | tee "$out/table.md"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
layers = int(sys.argv[2])
dec = [r for r in rows if r["kind"] == "decode" and r["config"] != "hf-accelerate"]
print(f"Llama-2-7B shape, {layers} of 32 decoder blocks, all from disk (--cpu-mem 0); median over rounds\n")
best = max(r.get("probe_disk_gbps", 0) for r in dec)
print(f"floor: bytes / the disk read bandwidth measured in this run; 'own' = --plan's probe in that row's run (whole-block"
      f" O_DIRECT reads of that container), 'best' = the best probe of the run ({best:.2f} GB/s)\n")
print("| config | ms/token | disk bytes/token | probe GB/s (own) | floor ms (own) | x floor (own) | floor ms (best) | x floor (best) | stall share | plan ms | measured/plan |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
med = {}
for cfg in ["dense", "f16-50", "int8-50", "int4-50"]:
    rs = [r for r in dec if r["config"] == cfg]
    if not rs:
        continue
    ms = statistics.median(r["decode_ms_per_token"] for r in rs)
    by = statistics.median(r["moved_disk_bytes"] for r in rs)
    probe = statistics.median(r.get("probe_disk_gbps", 0) for r in rs)  # --plan's probe, same run
    stall = statistics.median(r["stall_ms"] / r["decode_ms_per_token"] for r in rs)
    plan = statistics.median(r["predicted_ms_per_token"] for r in rs)
    floor = by / (probe * 1e6) if probe else 0
    med[cfg] = ms
    fb = by / (best * 1e6)
    print(f"| {cfg} | {ms:.0f} | {by/1e9:.3f} GB | {probe:.2f} | {floor:.0f} | {ms/floor if floor else 0:.2f} | "
          f"{fb:.0f} | {ms/fb:.2f} | {stall:.0%} | {plan:.0f} | {ms/plan:.2f} |")
hf = [r for r in rows if r["config"] == "hf-accelerate"]
if hf:
    h = hf[0]
    fb = h['moved_disk_bytes'] / (best * 1e6)
    print(f"| HF Accelerate (f32, disk) | {h['latency_ms']:.0f} | {h['moved_disk_bytes']/1e9:.3f} GB | | | | {fb:.0f} | {h['latency_ms']/fb:.2f} | | | |")
print()
if "dense" in med:
    for cfg in ["f16-50", "int8-50", "int4-50"]:
        if cfg in med:
            print(f"- {cfg}: {med['dense']/med[cfg]:.2f}x dense f16 per token")
    if hf and "f16-50" in med:
        print(f"- f16-50: {hf[0]['latency_ms']/med['f16-50']:.2f}x Accelerate per token")
tp = {r["kind"]: r for r in rows if r["kind"].startswith("batch")}
if "batch1" in tp and "batch8" in tp:
    b1, b8 = tp["batch1"], tp["batch8"]
    print(f"- throughput ({b1['config']}, 8 prompts of 1-8 tokens, 8 new tokens each, from disk): batch 1 {b1['generated_tokens_per_s']:.3f} tok/s, "
          f"batch 8 {b8['generated_tokens_per_s']:.3f} tok/s = {b8['generated_tokens_per_s']/b1['generated_tokens_per_s']:.2f}x; "
          f"plan step {b1['predicted_step_ms']:.0f} / {b8['predicted_step_ms']:.0f} ms vs measured "
          f"{b1['measured_step_ms']:.0f} / {b8['measured_step_ms']:.0f} ms")
EOF
