// Run-time choice of the weight kernels' instruction set (AVX-512 VBMI2, AVX2+FMA+F16C or
// portable): each x86 kernel file is compiled for its own ISA, and nothing calls into one unless
// the CPU reports every feature it was compiled with.
#include <cstdlib>
#include <string>

#include "endor/kernels.h"
#include "weight_kernels.h"

namespace endor::cpu {

bool cpu_has_avx2() {
#if defined(ENDOR_KERNELS_AVX2) && (defined(__x86_64__) || defined(__i386__))
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c") &&
         __builtin_cpu_supports("popcnt");
#else
  return false;
#endif
}

bool cpu_has_avx512() {
#if defined(ENDOR_KERNELS_AVX512) && (defined(__x86_64__) || defined(__i386__))
  __builtin_cpu_init();
  return cpu_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vbmi") &&
         __builtin_cpu_supports("avx512vbmi2");
#else
  return false;
#endif
}

Isa parse_isa(const std::string& name, const std::string& what) {
  if (name == "auto") return Isa::Auto;
  if (name == "portable") return Isa::Portable;
  if (name == "avx2") return Isa::Avx2;
  if (name == "avx512") return Isa::Avx512;
  throw Error(what + ": unknown instruction set '" + name + "' (expected auto, portable, avx2 or avx512)");
}

namespace {

// What Auto resolves to: the widest ISA available, capped by ENDOR_ISA when set.
Isa auto_isa() {
  Isa cap = Isa::Avx512;
  if (const char* env = std::getenv("ENDOR_ISA"); env && *env) {
    cap = parse_isa(env, "ENDOR_ISA");
    if (cap == Isa::Auto) cap = Isa::Avx512;
  }
  if (cap == Isa::Avx512 && cpu_has_avx512()) return Isa::Avx512;
  if (cap != Isa::Portable && cpu_has_avx2()) return Isa::Avx2;
  return Isa::Portable;
}

}  // namespace

const char* simd_level() {
  switch (auto_isa()) {
    case Isa::Avx512: return "avx512-vbmi2";
    case Isa::Avx2: return "avx2+f16c+fma";
    default: return "portable";
  }
}

bool have_onednn() {
#ifdef ENDOR_HAVE_DNNL
  return true;
#else
  return false;
#endif
}

namespace detail {

Isa resolve_isa(Isa isa) { return isa == Isa::Auto ? auto_isa() : isa; }

const WeightKernels& select_kernels(Isa isa) {
  isa = resolve_isa(isa);
  switch (isa) {
    case Isa::Auto:
    case Isa::Portable:
      return portable_kernels();
    case Isa::Avx2:
      if (!cpu_has_avx2()) throw Error("cpu backend: AVX2+FMA+F16C kernels requested but this CPU or build lacks them");
#ifdef ENDOR_KERNELS_AVX2
      return avx2_kernels();
#else
      break;
#endif
    case Isa::Avx512:
      if (!cpu_has_avx512())
        throw Error("cpu backend: AVX-512 (F/BW/VL/DQ/VBMI2) kernels requested but this CPU or build lacks them");
#ifdef ENDOR_KERNELS_AVX512
      return avx512_kernels();
#else
      break;
#endif
  }
  return portable_kernels();
}

}  // namespace detail
}  // namespace endor::cpu
