// How Endor's programs make OpenMP wait: one call at the top of main() (endor-pack, endor-infer,
// endor-serve).
#pragma once

#include <unistd.h>

#include <cstdlib>

namespace endor {

// OpenMP (oneDNN's prefill GEMMs, the calibrated methods' loops) spins at its barriers by default:
// on a machine busy with other programs the spinning takes the cores the late threads need (at load
// ~22-23 on a 2-vCPU AMD EPYC VM, 2026-11-27: a KJV perplexity run 17-19 s spinning, 2.6-3.1 s
// passive; a KJV Wanda pack 54-57 s and 4.6-6.3 s). libgomp reads OMP_WAIT_POLICY once, when it
// loads, before main(); so when the user has not chosen a policy, this sets PASSIVE and executes
// the program again, once (ENDOR_REEXEC marks the second run). A failed exec carries on as before.
inline void prefer_passive_openmp(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("ENDOR_REEXEC")) return;
  ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
  ::setenv("ENDOR_REEXEC", "1", 1);
  ::execv("/proc/self/exe", argv);
}

}  // namespace endor
