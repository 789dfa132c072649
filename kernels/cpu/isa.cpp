// Run-time choice of the weight kernels' instruction set (AVX2+FMA+F16C or portable).
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

const char* simd_level() { return cpu_has_avx2() ? "avx2+f16c+fma" : "portable"; }

bool have_onednn() {
#ifdef ENDOR_HAVE_DNNL
  return true;
#else
  return false;
#endif
}

namespace detail {

const WeightKernels& select_kernels(Isa isa) {
  switch (isa) {
    case Isa::Portable:
      return portable_kernels();
    case Isa::Avx2:
      if (!cpu_has_avx2()) throw Error("cpu backend: AVX2+FMA+F16C kernels requested but this CPU or build lacks them");
      break;
    case Isa::Auto:
      if (!cpu_has_avx2()) return portable_kernels();
      break;
  }
#ifdef ENDOR_KERNELS_AVX2
  return avx2_kernels();
#else
  return portable_kernels();
#endif
}

}  // namespace detail
}  // namespace endor::cpu
