#!/usr/bin/env bash
# endor-serve under load beside llama.cpp's llama-server (issue 27): aggregate generated tokens/s,
# time to first token and inter-token latency p50/p99 at concurrency 1, 4, 8, 16 (bench/serve/loadgen.py),
# loopback only, levels interleaved between the servers in one run (round r runs every level on every
# server, the servers' order reversed every other round).
#
#   smollm2: SmolLM2-135M-Instruct from its Q4_1 GGUF (scripts/fetch_smollm2.sh); endor-serve on
#            int8 @ 50 % magnitude (endor-pack prune GGUF), read in place from RAM; llama-server -np 8
#            (continuous batching) on the Q8_0 llama-quantize makes from the same Q4_1 file.
#   1b:      the 1 B Llama shape with random f16 weights (tools/make_big_checkpoint.py, as bench/peers),
#            int4 @ 50 %, every block streamed from disk each step (--cpu-mem 0); endor-serve only.
#
# Usage: bench/serve/run.sh [--models smollm2,1b] [--rounds N] [--threads N] [--parallel N] [--levels 1,4,8,16]
#                           [--busy] OUT_DIR
# --levels: the concurrency levels (default 1,4,8,16). --busy: a competing CPU load during the timed
# rounds (issue 37): a shell loop at nice 10 pinned to core 1 (taskset -c 1), bounded by `timeout`
# and ended with the rounds, so one of the servers' cores is shared as on a machine that does other things.
# Environment: ENDOR_BUILD (default build), ENDOR_SERVE_CACHE (default ~/.cache/endor/serve) for the
# made files, ENDOR_PEERS_CACHE (default ~/.cache/endor/peers) for llama.cpp (bench/peers/build_llama.sh
# builds it; without llama-server the llama rows are left out, saying so).
# OUT_DIR gets run.log, results.jsonl and table.md.
set -uo pipefail
models=smollm2,1b rounds=3 threads=2 parallel=8 levels=1,4,8,16 busy=0 out=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --models) models=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --parallel) parallel=$2; shift 2 ;;
    --levels) levels=$2; shift 2 ;;
    --busy) busy=1; shift ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    -*) echo "bench/serve/run.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) out=$1; shift ;;
  esac
done
[[ -n "$out" ]] || { echo "bench/serve/run.sh: give an output folder (see --help)" >&2; exit 2; }
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${ENDOR_BUILD:-$root/build}
[[ "$build" = /* ]] || build="$root/$build"
cache=${ENDOR_SERVE_CACHE:-$HOME/.cache/endor/serve}
lbin=${ENDOR_PEERS_CACHE:-$HOME/.cache/endor/peers}/llama-build/bin
pack="$build/packer/endor-pack" serve="$build/runtime/server/endor-serve"
mkdir -p "$out" "$cache" || exit 1
out=$(cd "$out" && pwd)
exec > >(tee -a "$out/run.log") 2>&1
note() { echo "== [$(date +%T)] $*"; }
die() { echo "bench/serve/run.sh: $*" >&2; exit 1; }
for b in "$pack" "$serve"; do [[ -x "$b" ]] || die "$b not built (cmake --build build --target endor-pack endor-serve)"; done
note "$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) cores; commit $(git -C "$root" rev-parse --short HEAD)"
note "command: bench/serve/run.sh --models $models --rounds $rounds --threads $threads --parallel $parallel --levels $levels$( ((busy)) && echo ' --busy')"
note "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"

# ---- files ------------------------------------------------------------------------------------
IFS=, read -r -a model_list <<<"$models"
gguf=$HOME/.cache/endor/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
have_llama=0
for m in "${model_list[@]}"; do
  case "$m" in
    smollm2)
      [[ -f "$gguf" ]] || "$root/scripts/fetch_smollm2.sh" >/dev/null || die "scripts/fetch_smollm2.sh failed"
      if [[ ! -f "$cache/smollm2-int8_50.endor" ]]; then
        note "smollm2: endor-pack prune (magnitude, 50 %, int8) from the Q4_1 GGUF"
        nice "$pack" prune "$gguf" --sparsity 0.5 --method magnitude --quant int8 --quant-head none -o "$cache/smollm2-int8_50.endor" \
          >"$cache/smollm2-pack.log" 2>&1 || die "endor-pack failed (see $cache/smollm2-pack.log)"
      fi
      if [[ -x "$lbin/llama-server" && -x "$lbin/llama-quantize" ]]; then
        have_llama=1
        if [[ ! -f "$cache/smollm2-Q8_0.gguf" ]]; then
          note "smollm2: llama-quantize --allow-requantize Q8_0 from the same Q4_1 GGUF"
          nice "$lbin/llama-quantize" --allow-requantize "$gguf" "$cache/smollm2-Q8_0.gguf.part" Q8_0 \
            >"$cache/smollm2-quantize.log" 2>&1 && mv "$cache/smollm2-Q8_0.gguf.part" "$cache/smollm2-Q8_0.gguf" \
            || die "llama-quantize failed (see $cache/smollm2-quantize.log)"
        fi
      else
        note "no llama-server in $lbin (bench/peers/build_llama.sh builds it): llama.cpp rows left out"
      fi ;;
    1b)
      hf="$cache/llama-1b-random-hf"
      if [[ ! -f "$hf/config.json" ]]; then
        note "1b: tools/make_big_checkpoint.py (random f16, hidden 2048, 16 layers, MLP 5632, 32 heads, vocab 32000)"
        nice python3 "$root/tools/make_big_checkpoint.py" "$hf" --layers 16 --hidden 2048 --intermediate 5632 \
          --heads 32 --kv-heads 32 --vocab 32000 --shards 1 || die "make_big_checkpoint.py failed (needs numpy)"
        cp "$root/../shared/tokenizers/llama2/tokenizer.json" "$root/../shared/tokenizers/llama2/tokenizer_config.json" "$hf/" \
          || die "no Llama-2 tokenizer in ../shared/tokenizers/llama2"
      fi
      if [[ ! -f "$cache/1b-int4_50.endor" ]]; then
        note "1b: endor-pack prune (magnitude, 50 %, int4)"
        nice "$pack" prune "$hf" --sparsity 0.5 --method magnitude --quant int4 --quant-head none -o "$cache/1b-int4_50.endor" \
          >"$cache/1b-pack.log" 2>&1 || die "endor-pack failed (see $cache/1b-pack.log)"
      fi ;;
    *) die "unknown model $m (smollm2, 1b)" ;;
  esac
done

# ---- servers ----------------------------------------------------------------------------------
pids=()
# Only the servers are waited for (a bare `wait` would also wait for the log's tee, which waits for us).
# The servers' logs stay in OUT_DIR (committed with a run): the home directory is written as ~ there.
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  for f in "$out"/*.log; do [[ -f "$f" && "$f" != "$out/run.log" ]] && sed -i "s#$HOME/#~/#g" "$f"; done
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_ready() {  # port name
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  die "$2 did not become ready on port $1 (see $out/$2.log)"
}
declare -A port
start_endor() {  # label model extra-args
  local p; p=$(free_port)
  "$serve" "$2" --port "$p" --threads "$threads" --parallel "$parallel" --ctx 512 $3 >"$out/$1.log" 2>&1 &
  pids+=($!)
  port[$1]=$p
  wait_ready "$p" "$1"
  note "$1: endor-serve $(basename "$2") --parallel $parallel --threads $threads $3 on port $p"
}
labels=()
for m in "${model_list[@]}"; do
  case "$m" in
    smollm2)
      start_endor endor-smollm2-int8_50 "$cache/smollm2-int8_50.endor" ""
      labels+=(endor-smollm2-int8_50)
      if ((have_llama)); then
        p=$(free_port)
        "$lbin/llama-server" -m "$cache/smollm2-Q8_0.gguf" --host 127.0.0.1 --port "$p" -t "$threads" -np "$parallel" \
          -c $((512 * parallel)) -cb >"$out/llama-smollm2-Q8_0.log" 2>&1 &
        pids+=($!)
        port[llama-smollm2-Q8_0]=$p
        wait_ready "$p" llama-smollm2-Q8_0
        note "llama-smollm2-Q8_0: llama-server -np $parallel -t $threads -c $((512 * parallel)) -cb on port $p"
        labels+=(llama-smollm2-Q8_0)
      fi ;;
    1b)
      start_endor endor-1b-int4_50-disk "$cache/1b-int4_50.endor" "--cpu-mem 0"
      labels+=(endor-1b-int4_50-disk) ;;
  esac
done

# ---- timed rounds -------------------------------------------------------------------------------
# Load per level: SmolLM2 2 requests a client of 64 tokens; the 1 B from disk 1 request of 24.
results="$out/results.jsonl"
: >"$results"
if ((busy)); then
  command -v taskset >/dev/null || die "--busy needs taskset (util-linux)"
  timeout 3600 nice -n 10 taskset -c 1 sh -c 'while :; do :; done' &
  pids+=($!)
  note "busy: a shell loop at nice 10 on core 1 (pid $!) for the timed rounds"
fi
IFS=, read -r -a level_list <<<"$levels"
for r in $(seq "$rounds"); do
  order=("${labels[@]}")
  if ((r % 2 == 0)); then order=(); for ((i=${#labels[@]}-1; i>=0; i--)); do order+=("${labels[$i]}"); done; fi
  for c in "${level_list[@]}"; do
    for l in "${order[@]}"; do
      if [[ "$l" == *1b* ]]; then per=1 n=24; else per=2 n=64; fi
      line=$(python3 "$root/bench/serve/loadgen.py" --port "${port[$l]}" --concurrency "$c" --requests-per-client "$per" \
             --max-tokens "$n" --time-limit 600 --label "$l") || die "loadgen failed against $l"
      echo "$line" | python3 -c "import json,sys; d=json.loads(sys.stdin.read()); d['round']=$r; print(json.dumps(d))" >>"$results"
      note "round $r c=$c $l: $(echo "$line" | python3 -c "import json,sys; d=json.loads(sys.stdin.read()); print(f\"{d['tokens_per_s']} tok/s, ttft p50 {d['ttft_p50_ms']} ms, itl p50 {d['itl_p50_ms']} ms, failed {d['failed']}\")")"
    done
  done
done
note "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 "$root/bench/serve/table.py" "$results" | tee "$out/table.md"
