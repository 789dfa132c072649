#!/usr/bin/env bash
# Static analysis of the one-token int4 kernels' hot loops (issue 40): llvm-mca on AMD Zen 4 and Intel
# Sapphire Rapids models, beside bench_word_costs (which measures on the CPU it runs on).
#
# Usage: bench/word_costs/mca.sh OUT_DIR
#   Compiles kernels/cpu/weight_kernels_avx512_vnni_int4.cpp to assembly with the project's flags
#   (those kernels/CMakeLists.txt gives the VNNI files, at CMake's Release -O3), extracts the innermost
#   loops below (extract_loops.py; it fails loudly when a kernel or compiler change moves them), and
#   runs llvm-mca (LLVM_MCA, default llvm-mca-19: the first Debian LLVM with -mcpu=znver4) on them
#   and on the hand-written blocks in snippets/. Writes OUT_DIR/<block>.s, OUT_DIR/<block>.<cpu>.txt
#   (the full llvm-mca report with bottleneck analysis) and OUT_DIR/summary.tsv (cycles an iteration).
#   Every block is 8 row-words an iteration (4 rows x 2 words of 64 columns, or 4 rows x 128 columns),
#   so its cycles / 8 are cycles a 64-column word of a row.
# Blocks from the compiled kernel:
#   bitmap_kernel  dot_rows_q8_i4_1<2, true>, 4 rows: the bitmap int4 loop (groups of 128 columns)
#   dense_words    dot_rows_q8_i4_1<2, false>, 4 rows: dense int4 word by word from unpacked codes
#   dense_packed   dot_rows_q8_i4_dense_1<1>, 4 rows: dense int4 from its packed bytes (groups of 128)
# Caveat (see NOTES.md, issue 40): LLVM 19's znver4 model prices vpdpbusd zmm and ymm at a reciprocal
# throughput of 2 cycles and a vpexpandb from memory at 0.5, so it predicts far less gap between the
# bitmap and dense loops than bench_word_costs measures on a Zen 4; read its figures as a floor.
set -euo pipefail
out=${1:?usage: bench/word_costs/mca.sh OUT_DIR}
root=$(cd "$(dirname "$0")/../.." && pwd)
here="$root/bench/word_costs"
mca=${LLVM_MCA:-llvm-mca-19}
cxx=${CXX:-g++}
command -v "$mca" >/dev/null || { echo "mca.sh: $mca not found (set LLVM_MCA to an llvm-mca with -mcpu=znver4)" >&2; exit 2; }
mkdir -p "$out"
flags=(-O3 -DNDEBUG -fPIC -ffp-contract=off -fopenmp -std=c++17 -DENDOR_KERNELS_AVX2=1 -DENDOR_KERNELS_AVX512=1
       -I"$root/kernels/include" -I"$root/format-spec/include"
       -mavx2 -mfma -mf16c -mpopcnt -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vbmi -mavx512vbmi2
       -Wno-maybe-uninitialized -w --param=large-unit-insns=1000000 -mavx512vnni)
asm="$out/weight_kernels_avx512_vnni_int4.s"
"$cxx" "${flags[@]}" -S -o "$asm" "$root/kernels/cpu/weight_kernels_avx512_vnni_int4.cpp"
{ "$cxx" --version | head -1; "$mca" --version | grep -i 'llvm version'; } > "$out/tools.txt"
python3 "$here/extract_loops.py" "$asm" "$out" \
  'bitmap_kernel=dot_rows_q8_i4_1<2, true>:8:8' \
  'dense_words=dot_rows_q8_i4_1<2, false>:0:8' \
  'dense_packed=dot_rows_q8_i4_dense_1<1>:0:8' > "$out/blocks.txt"
rm -f "$asm"  # 16k lines; the blocks are what the analysis reads
cp "$here"/snippets/*.s "$out/"
cpus=(znver4 sapphirerapids)
printf 'block\tinstructions' > "$out/summary.tsv"
for c in "${cpus[@]}"; do printf '\t%s cycles/iter\t%s cycles/word\t%s block rthroughput' "$c" "$c" "$c" >> "$out/summary.tsv"; done
echo >> "$out/summary.tsv"
for s in "$out"/*.s; do
  b=$(basename "$s" .s)
  n=$(grep -cvE '^\s*(#|$)' "$s")
  printf '%s\t%s' "$b" "$n" >> "$out/summary.tsv"
  for c in "${cpus[@]}"; do
    "$mca" -mcpu="$c" -iterations=400 -bottleneck-analysis "$s" > "$out/$b.$c.txt" 2>&1
    awk -v it=400 '/^Total Cycles:/{c=$3} /^Block RThroughput:/{r=$3} END{printf "\t%.1f\t%.2f\t%s", c/it, c/it/8, r}' \
      "$out/$b.$c.txt" >> "$out/summary.tsv"
  done
  echo >> "$out/summary.tsv"
done
column -t -s $'\t' "$out/summary.tsv"
