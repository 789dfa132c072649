#!/usr/bin/env bash
# Builds llama.cpp from the source vendored in PyPI's llama-cpp-python sdist, outside the repository
# (sdist and build live in $ENDOR_PEERS_CACHE, default ~/.cache/endor/peers), and prints the build's
# bin folder. Used by bench/peers/run.sh and scripts/llama_quants.sh; reuses a finished build.
#
# Targets: llama-bench, llama-quantize, llama-perplexity, llama-cli, llama-server.
#
# AMX is off, always. Intel Sapphire Rapids VMs list amx_tile/amx_int8/amx_bf16 in /proc/cpuinfo but
# trap on the instructions; a GGML_NATIVE build compiles with -march=native, which turns on
# __AMX_INT8__ and ggml's AMX matmul path, and then dies with SIGILL (ldtilecfg) on Q8_0/Q4_0 files.
# ggml's GGML_AMX_* options only act when GGML_NATIVE is OFF, so this build sets GGML_NATIVE=OFF and
# names every x86 extension the CPU lists itself (SSE4.2, AVX, AVX2, FMA, F16C, BMI2, AVX-VNNI, the
# AVX-512 family with VBMI/VNNI/BF16), with GGML_AMX_TILE/INT8/BF16=OFF: the same kernels as a native
# build on a CPU without AMX, and no AMX on one with it. A build configured otherwise (an older
# native one) is reconfigured.
#
# Usage: bench/peers/build_llama.sh [--jobs N]      (default: nproc)
set -uo pipefail
jobs=$(nproc)
while [[ $# -gt 0 ]]; do
  case "$1" in
    --jobs|-j) jobs=$2; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "bench/peers/build_llama.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
die() { echo "bench/peers/build_llama.sh: $*" >&2; exit 1; }
note() { echo "== [$(date +%T)] $*" >&2; }
cache=${ENDOR_PEERS_CACHE:-$HOME/.cache/endor/peers}
sdist_version=0.3.36
src="$cache/llama_cpp_python-$sdist_version/vendor/llama.cpp"
lbuild="$cache/llama-build"
targets=(llama-bench llama-quantize llama-perplexity llama-cli llama-server)
mkdir -p "$cache" || die "cannot create $cache"
for tool in cmake python3; do command -v "$tool" >/dev/null || die "$tool not found"; done

# -D options for the x86 extensions this CPU lists, AMX off (see the header).
cpu_flags() {
  local have opts=()
  have=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
  on() { [[ "$have" == *" $1 "* ]] && echo ON || echo OFF; }
  local avx512=OFF
  [[ "$(on avx512f)$(on avx512cd)$(on avx512vl)$(on avx512dq)$(on avx512bw)" == ONONONONON ]] && avx512=ON
  opts+=(-DGGML_NATIVE=OFF -DGGML_SSE42="$(on sse4_2)" -DGGML_AVX="$(on avx)" -DGGML_AVX2="$(on avx2)"
         -DGGML_FMA="$(on fma)" -DGGML_F16C="$(on f16c)" -DGGML_BMI2="$(on bmi2)" -DGGML_AVX_VNNI="$(on avx_vnni)"
         -DGGML_AVX512="$avx512" -DGGML_AVX512_VBMI="$([[ $avx512 == ON ]] && on avx512vbmi || echo OFF)"
         -DGGML_AVX512_VNNI="$([[ $avx512 == ON ]] && on avx512_vnni || echo OFF)"
         -DGGML_AVX512_BF16="$([[ $avx512 == ON ]] && on avx512_bf16 || echo OFF)"
         -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
  echo "${opts[@]}"
}

built=1
for t in "${targets[@]}"; do [[ -x "$lbuild/bin/$t" ]] || built=0; done
grep -q '^GGML_NATIVE:BOOL=OFF' "$lbuild/CMakeCache.txt" 2>/dev/null || built=0
grep -q '^GGML_AMX_INT8:BOOL=OFF' "$lbuild/CMakeCache.txt" 2>/dev/null || built=0
if ((!built)); then
  tarball="$cache/llama_cpp_python-$sdist_version.tar.gz"
  if [[ ! -f "$tarball" ]]; then
    note "download llama-cpp-python==$sdist_version sdist"
    python3 -m pip download --no-deps --no-binary :all: -d "$cache" "llama-cpp-python==$sdist_version" >&2 || die "pip download failed"
  fi
  [[ -d "$src" ]] || tar xzf "$tarball" -C "$cache" || die "cannot unpack $tarball"
  read -r -a arch <<<"$(cpu_flags)"
  note "build llama.cpp (Release, AMX off: ${arch[*]}): ${targets[*]}"
  # No web UI (LLAMA_BUILD_UI/LLAMA_USE_PREBUILT_UI off: the prebuilt one is fetched from the network),
  # no HTTPS client: the tools read local files only.
  nice -n 10 cmake -S "$src" -B "$lbuild" -DCMAKE_BUILD_TYPE=Release "${arch[@]}" -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF >"$cache/llama-cmake.log" 2>&1 \
    || die "llama.cpp cmake failed (see $cache/llama-cmake.log)"
  nice -n 10 cmake --build "$lbuild" -j"$jobs" --target "${targets[@]}" >"$cache/llama-build.log" 2>&1 \
    || die "llama.cpp build failed (see $cache/llama-build.log)"
  for t in "${targets[@]}"; do [[ -x "$lbuild/bin/$t" ]] || die "llama.cpp build made no $lbuild/bin/$t"; done
fi
echo "$lbuild/bin"
