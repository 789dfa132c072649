// How Endor's programs make OpenMP wait: one call at the top of main() (endor-pack, endor-infer,
// endor-serve).
#pragma once

#include <unistd.h>

#include <cstdlib>

namespace endor {

// The CPU kernels OpenBLAS should run (endor-pack: the calibrated methods' Hessians, sweeps and
// Cholesky factors), or null to leave its own choice. OpenBLAS picks its kernels when it loads, from
// a table of CPU models; Debian 12's 0.3.21 does not know recent ones and falls back to its SSE3
// "Prescott" kernels (an Intel Xeon Sapphire Rapids VM, 2 threads, 2026-11-28: ssyrk of a 512 x 1536
// batch 108 ms, 18.5 ms with SkylakeX). Named from the features themselves: SkylakeX with AVX-512
// (F, BW, DQ, VL), else Haswell with AVX2 and FMA.
inline const char* openblas_core_for_this_cpu() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
  return nullptr;
}

// OpenMP (oneDNN's prefill GEMMs, the calibrated methods' loops) spins at its barriers by default:
// on a machine busy with other programs the spinning takes the cores the late threads need (at load
// ~22-23 on a 2-vCPU AMD EPYC VM, 2026-11-27: a KJV perplexity run 17-19 s spinning, 2.6-3.1 s
// passive; a KJV Wanda pack 54-57 s and 4.6-6.3 s). libgomp reads OMP_WAIT_POLICY once, when it
// loads, before main(), as OpenBLAS reads OPENBLAS_CORETYPE; so when the user has not chosen a
// policy (or, with `openblas`, a core: openblas_core_for_this_cpu), this sets them and executes the
// program again, once (ENDOR_REEXEC marks the second run). A failed exec carries on as before.
inline void prefer_passive_openmp(char** argv, bool openblas = false) {
  if (std::getenv("ENDOR_REEXEC")) return;
  bool changed = false;
  if (!std::getenv("OMP_WAIT_POLICY")) {
    ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    changed = true;
  }
  if (openblas && !std::getenv("OPENBLAS_CORETYPE")) {
    if (const char* core = openblas_core_for_this_cpu()) {
      ::setenv("OPENBLAS_CORETYPE", core, 1);
      changed = true;
    }
  }
  if (!changed) return;
  ::setenv("ENDOR_REEXEC", "1", 1);
  ::execv("/proc/self/exe", argv);
}

}  // namespace endor
