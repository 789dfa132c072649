#!/usr/bin/env bash
# llama.cpp's own quantized files for the size–perplexity frontier (issue 30), with two perplexities
# each: llama.cpp's (llama-perplexity) and Endor's evaluator reading the GGUF.
#
# For each model: the Hugging Face folder -> convert_hf_to_gguf.py --outtype f16 (from the
# llama-cpp-python sdist bench/peers/build_llama.sh builds, AMX off) -> llama-quantize to each type.
# Then per file (F16 included): its bytes, llama-perplexity's "Final estimate" and
# `endor-pack convert FILE.gguf -o X.endor` + `endor-infer X.endor --perplexity TEXT --ctx L`.
#
#   smollm2  SmolLM2-135M-Instruct: ~/.cache/endor/smollm2-135m-instruct-hf (made here by
#            tools/make_smollm2_fixture.py --skip-reference when absent, from the Q4_1 GGUF that
#            scripts/fetch_smollm2.sh unpacks); text /usr/share/common-licenses/GPL-3, L = 512.
#   kjv      samples/kjv-llama; text samples/kjv-llama/heldout.txt, L = 256 (its
#            max_position_embeddings, as scripts/accuracy.sh measures it). Its tokenizer is a
#            byte-level BPE trained here, which convert_hf_to_gguf.py does not recognize by hash
#            (get_vocab_base_pre raises "BPE pre-tokenizer was not recognized"); its
#            pre-tokenization is GPT-2's (ByteLevel, use_regex, no prefix space), so the conversion
#            runs with get_vocab_base_pre answering "gpt-2" (tokenizer.ggml.pre = gpt-2).
#
# The two perplexities are different conventions, not a disagreement: llama-perplexity scores the
# second half of each window of L tokens (and adds BOS when the vocabulary asks for it), Endor's
# evaluator every token of non-overlapping windows (docs/algorithms.md, "Perplexity").
#
# Usage: scripts/llama_quants.sh [--models smollm2,kjv] [--types "Q8_0 Q6_K ..."] [--threads N]
#                                [--no-endor] [--fresh] [--collect] [--copy-to DIR]
#   --copy-to DIR   also write DIR/llama-YYYY-MM-DD.tsv (e.g. bench/frontier)
#   --fresh         measure every figure again (by default a log newer than its GGUF and the
#                   programs is reused, so an interrupted run resumes)
#   --collect       measure nothing: the TSV from the logs already there (missing figures stay missing)
#   --threads N     llama-perplexity's threads, default 1: on a loaded machine llama.cpp's spinning
#                   threads collapse (SmolLM2, 2 cores at load ~20: 258 s per 4-window pass with -t 2,
#                   118 s with -t 1). endor-infer runs with --threads 2 (its waits degrade under load).
# Environment: ENDOR_BUILD (default build: endor-pack, endor-infer), ENDOR_CACHE (~/.cache/endor),
#   PYTHON (default python3; convert_hf_to_gguf.py and make_smollm2_fixture.py need torch, numpy,
#   safetensors, transformers).
# Output: ~/.cache/endor/frontier/{smollm2,kjv}/*.gguf, logs beside them, and
#   ~/.cache/endor/frontier/llama.tsv: model, type, file bytes, llama-perplexity, Endor perplexity.
# Exit status 1 when any figure is missing (the TSV then says "missing" in its place).
set -uo pipefail
models=smollm2,kjv threads=1 endor_threads=2 endor=1 copy_to="" fresh=0 collect=0
types="Q8_0 Q6_K Q5_K_M Q5_0 Q4_K_M Q4_K_S Q3_K_M IQ4_NL Q4_0 Q2_K"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --models) models=$2; shift 2 ;;
    --types) types=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --no-endor) endor=0; shift ;;
    --fresh) fresh=1; shift ;;
    --collect) collect=1; shift ;;
    --copy-to) copy_to=$2; shift 2 ;;
    -h|--help) sed -n '2,37p' "$0"; exit 0 ;;
    *) echo "scripts/llama_quants.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${ENDOR_CACHE:-$HOME/.cache/endor}
build=${ENDOR_BUILD:-$root/build}
[[ "$build" = /* ]] || build="$root/$build"
python=${PYTHON:-python3}
pack="$build/packer/endor-pack" infer="$build/runtime/endor-infer"
front="$cache/frontier"
die() { echo "scripts/llama_quants.sh: $*" >&2; exit 1; }
note() { echo "== [$(date +%T)] $*" >&2; }
if ((endor)); then
  for b in "$pack" "$infer"; do [[ -x "$b" ]] || die "$b not built (cmake --build build --target endor-pack endor-infer)"; done
fi
if ((collect)); then
  bin="${ENDOR_PEERS_CACHE:-$cache/peers}/llama-build/bin"
else
  bin=$("$root/bench/peers/build_llama.sh" --jobs "$(nproc)") || die "llama.cpp build failed"
fi
src="${ENDOR_PEERS_CACHE:-$cache/peers}/llama_cpp_python-0.3.36/vendor/llama.cpp"
llama_commit=$(sed -n 's/.*LLAMA_COMMIT *= *"\([0-9a-f]*\)".*/\1/p' "$bin/../common/build-info.cpp" 2>/dev/null | head -1)

hf_dir() { case "$1" in smollm2) echo "$cache/smollm2-135m-instruct-hf" ;; kjv) echo "$root/samples/kjv-llama" ;; esac; }
text_of() { case "$1" in smollm2) echo /usr/share/common-licenses/GPL-3 ;; kjv) echo "$root/samples/kjv-llama/heldout.txt" ;; esac; }
ctx_of() { case "$1" in smollm2) echo 512 ;; kjv) echo 256 ;; esac; }

# convert MODEL OUT: the F16 GGUF (see the header for KJV's pre-tokenizer).
convert() {
  local m=$1 out=$2 hf; hf=$(hf_dir "$m")
  if [[ "$m" == kjv ]]; then
    PYTHONPATH="$src/gguf-py:$src" nice "$python" - "$hf" --outtype f16 --outfile "$out" <<'PY'
import sys
import conversion.base as base
base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "gpt-2"  # GPT-2's pre-tokenization
sys.argv = ["convert_hf_to_gguf.py"] + sys.argv[1:]
import convert_hf_to_gguf
convert_hf_to_gguf.main()
PY
  else
    PYTHONPATH="$src/gguf-py" nice "$python" "$src/convert_hf_to_gguf.py" "$hf" --outtype f16 --outfile "$out"
  fi
}

# fresh_log LOG INPUTS...: LOG exists and is newer than every input (a figure measured earlier on
# the same file with the same programs is reused; --fresh measures again).
fresh_log() {
  local log=$1 x; shift
  [[ -s "$log" ]] || return 1
  for x in "$@"; do [[ "$log" -nt "$x" ]] || return 1; done
}

# The figures in the logs (empty when a run printed none).
llama_ppl() { sed -n 's/.*Final estimate: PPL = \([0-9.]*\).*/\1/p' "$1" 2>/dev/null | tail -1; }
endor_ppl() { sed -n 's/^perplexity: \([0-9][0-9.]*\)$/\1/p' "$1" 2>/dev/null | tail -1; }

tsv="$front/llama.tsv"
mkdir -p "$front" || die "cannot create $front"
rows=() missing=0
IFS=, read -r -a model_list <<<"$models"
for m in "${model_list[@]}"; do
  [[ "$m" == smollm2 || "$m" == kjv ]] || die "unknown model $m (smollm2, kjv)"
  dir="$front/$m" hf=$(hf_dir "$m") text=$(text_of "$m") ctx=$(ctx_of "$m")
  mkdir -p "$dir" || die "cannot create $dir"
  if ((!collect)) && [[ ! -f "$hf/config.json" ]]; then
    [[ "$m" == smollm2 ]] || die "no $hf/config.json"
    note "SmolLM2: Hugging Face folder from the Q4_1 GGUF (tools/make_smollm2_fixture.py --skip-reference)"
    "$root/scripts/fetch_smollm2.sh" >/dev/null || die "scripts/fetch_smollm2.sh failed"
    nice "$python" "$root/tools/make_smollm2_fixture.py" --skip-reference >"$dir/hf.log" 2>&1 \
      || die "tools/make_smollm2_fixture.py failed (needs torch, transformers; see $dir/hf.log)"
  fi
  if ((!collect)) && [[ ! -f "$dir/$m-F16.gguf" ]]; then
    note "$m: convert_hf_to_gguf.py --outtype f16"
    convert "$m" "$dir/$m-F16.gguf.part" >"$dir/convert.log" 2>&1 && mv "$dir/$m-F16.gguf.part" "$dir/$m-F16.gguf" \
      || die "convert_hf_to_gguf.py failed for $m (see $dir/convert.log)"
  fi
  for t in $types; do
    [[ -f "$dir/$m-$t.gguf" ]] || ((collect)) && continue
    note "$m: llama-quantize $t"
    nice "$bin/llama-quantize" "$dir/$m-F16.gguf" "$dir/$m-$t.gguf.part" "$t" >"$dir/quantize-$t.log" 2>&1 \
      && mv "$dir/$m-$t.gguf.part" "$dir/$m-$t.gguf" || die "llama-quantize $t failed for $m (see $dir/quantize-$t.log)"
  done
  for t in F16 $types; do
    f="$dir/$m-$t.gguf"
    bytes=$(stat -c %s "$f" 2>/dev/null || echo missing)
    if ((!collect)) && { ((fresh)) || ! fresh_log "$dir/ppl-$t.log" "$f" "$bin/llama-perplexity" || [[ -z "$(llama_ppl "$dir/ppl-$t.log")" ]]; }; then
      note "$m $t: llama-perplexity -c $ctx"
      # Up to 3 tries: llama.cpp's log goes through a worker thread, and on a loaded machine its last
      # lines (the last window and "Final estimate") were lost at exit in about half the runs of this
      # llama.cpp (exit status 0; line-buffered output did not help).
      for try in 1 2 3; do
        nice stdbuf -oL -eL "$bin/llama-perplexity" -m "$f" -f "$text" -c "$ctx" -t "$threads" >"$dir/ppl-$t.log" 2>&1
        [[ -n "$(llama_ppl "$dir/ppl-$t.log")" ]] && break
        echo "llama-perplexity printed no final figure for $m $t (try $try of 3)" >&2
      done
    fi
    lp=$(llama_ppl "$dir/ppl-$t.log")
    [[ -n "$lp" ]] || { echo "error: llama-perplexity printed no figure for $m $t (see $dir/ppl-$t.log)" >&2; lp=missing; missing=1; }
    ep=skipped
    if ((endor)); then
      if ((!collect)) && { ((fresh)) || ! fresh_log "$dir/endor-ppl-$t.log" "$f" "$pack" "$infer" || [[ -z "$(endor_ppl "$dir/endor-ppl-$t.log")" ]]; }; then
        note "$m $t: endor-pack convert, endor-infer --perplexity --ctx $ctx"
        rm -f "$dir/endor-ppl-$t.log"
        nice "$pack" convert "$f" -o "$dir/$m-$t.endor" >"$dir/endor-convert-$t.log" 2>&1 \
          && nice "$infer" "$dir/$m-$t.endor" --perplexity "$text" --ctx "$ctx" --threads "$endor_threads" >"$dir/endor-ppl-$t.log" 2>&1
        rm -f "$dir/$m-$t.endor"
      fi
      ep=$(endor_ppl "$dir/endor-ppl-$t.log")
      [[ -n "$ep" ]] || ep=missing
      [[ "$ep" != missing ]] || { echo "error: Endor gave no perplexity for $m $t (see $dir/endor-*-$t.log)" >&2; missing=1; }
    fi
    echo "$m	$t	$bytes	$lp	$ep" >&2
    rows+=("$m	$t	$bytes	$lp	$ep")
  done
done

{
  echo "# llama.cpp's quantized files against Endor's evaluator, $(date -u +%F), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
  echo "# llama.cpp ${llama_commit:-unknown} (llama-cpp-python 0.3.36 sdist, bench/peers/build_llama.sh, AMX off); Endor: ${build#$root/}/ binaries (checkout at $(git -C "$root" rev-parse --short HEAD 2>/dev/null) when the TSV was written)"
  echo "# made by: scripts/llama_quants.sh --models $models --types \"$types\" --threads $threads"
  echo "# per MODEL: convert_hf_to_gguf.py HF --outtype f16 --outfile MODEL-F16.gguf; llama-quantize MODEL-F16.gguf MODEL-TYPE.gguf TYPE"
  echo "# llama_ppl: llama-perplexity -m MODEL-TYPE.gguf -f TEXT -c L -t $threads   (Final estimate; scores the second half of each window)"
  echo "# endor_ppl: endor-pack convert MODEL-TYPE.gguf -o X.endor; endor-infer X.endor --perplexity TEXT --ctx L --threads $endor_threads"
  echo "# smollm2: HF ~/.cache/endor/smollm2-135m-instruct-hf, TEXT /usr/share/common-licenses/GPL-3, L 512; kjv: HF samples/kjv-llama (tokenizer.ggml.pre gpt-2), TEXT samples/kjv-llama/heldout.txt, L 256"
  printf 'model\ttype\tfile_bytes\tllama_ppl\tendor_ppl\n'
  for r in "${rows[@]}"; do echo "$r"; done
} >"$tsv.part" && mv "$tsv.part" "$tsv" || die "cannot write $tsv"
cat "$tsv"
if [[ -n "$copy_to" ]]; then
  mkdir -p "$copy_to" && cp "$tsv" "$copy_to/llama-$(date -u +%F).tsv" || die "cannot copy to $copy_to"
fi
((missing == 0)) || { echo "scripts/llama_quants.sh: some figures are missing (see the errors above)" >&2; exit 1; }
