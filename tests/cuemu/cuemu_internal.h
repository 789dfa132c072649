// Internal to cuemu: what the runtime (cuemu_runtime.cpp, cuemu_api.cpp) offers the cuBLAS shim.
#pragma once

#include <string>

#include "cuemu.h"

namespace cuemu {

// True when [p, p+n) lies inside one live device allocation.
bool device_range(const void* p, size_t n);
// Checks every allocation's canaries after device work `what` (aborts naming it on damage).
void after_device_work(const char* what);
// Stream-order check of one device operation on `stream`: reads [r, r+rn) / writes [w, w+wn)
// (null: none). Aborts when it is unordered with an earlier access of another stream.
void stream_access(cudaStream_t stream, const char* what, const void* r, size_t rn, const void* w, size_t wn);
// Adds one line ("name<TAB>detail") to this process's coverage record (CUEMU_COVERAGE).
void record_coverage(const std::string& line);
// CUEMU_PROFILE set: time per kernel / cuBLAS call, printed at exit.
bool profiling();
void add_profile(const std::string& name, double seconds);

}  // namespace cuemu
