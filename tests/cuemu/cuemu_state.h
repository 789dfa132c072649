// Internal to cuemu's runtime (cuemu_runtime.cpp: the execution engine; cuemu_api.cpp: the CUDA
// runtime API): the state and checks both halves use. The cuBLAS shim sees only cuemu_internal.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "cuemu_internal.h"

struct CUstream_st {
  unsigned flags = 0;
};
// Vector clock: for each stream, the number of its operations known to have completed.
using VClock = std::map<const void*, uint64_t>;
struct CUevent_st {
  unsigned flags = 0;
  bool recorded = false;
  uint64_t t_ns = 0;
  VClock clock;  // the recording stream's clock at the record
};

namespace cuemu {

extern std::recursive_mutex g_mutex;  // registries, streams, events, coverage
extern thread_local cudaError_t t_last_error;
// Records e as the calling thread's last error (cudaGetLastError) and returns it.
cudaError_t fail(cudaError_t e);
// Prints "cuemu: msg" with the kernel, block and thread being run (if any) and aborts.
[[noreturn]] void die(const std::string& msg);

// One guarded device allocation: kFrontCanary canary bytes before the user pointer, the tail
// canary after the requested bytes, then a PROT_NONE guard page (cuemu_api.cpp, cudaMalloc).
struct Alloc {
  size_t bytes = 0;    // requested
  size_t rounded = 0;  // to 256: [bytes, rounded) is tail canary, then the guard page
  char* map = nullptr;
  size_t map_len = 0;
};
// Live device allocations by user pointer. Callers hold g_mutex (the fault handler aside).
std::map<uintptr_t, Alloc>& allocs();
// The allocation holding [p, p+n), or null. Callers hold g_mutex.
const std::pair<const uintptr_t, Alloc>* find_alloc(const void* p, size_t n);
// Aborts naming `after` when any allocation's canaries are damaged.
void check_canaries(const char* after);
// The default streams, or a stream cudaStreamCreateWithFlags made and not yet destroyed.
bool valid_stream(cudaStream_t s);
// Installs the SIGSEGV/SIGBUS handler (once) that names a guard-page hit: a device access past an
// allocation or a fiber stack overflow, with the kernel, block and thread.
void install_fault_handler();

}  // namespace cuemu
