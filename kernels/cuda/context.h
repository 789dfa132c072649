// Internal to endor_kernels_cuda: the state one CUDA backend owns — its device, a compute stream
// and a copy stream, the cuBLAS handle, and grow-only device scratch buffers — plus linear().
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "endor/cuda_backend.h"
#include "launch.h"

namespace endor::cuda::detail {

// Device memory that only grows, so steady-state calls allocate nothing.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // At least `bytes` bytes (contents unspecified). Growing first waits for `stream`, so work
  // queued there that still reads the old buffer finishes before it is freed.
  void* ensure(size_t bytes, cudaStream_t stream);
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Host inputs of a call (token ids, positions, inv_freq) reach the device through pinned host
// slots used round-robin, each rewritten only after the copy that last read it has executed: the
// caller's memory is free on return, and the host may run kSlots calls ahead of the GPU.
class ParamStaging {
 public:
  ParamStaging() = default;
  ~ParamStaging();
  ParamStaging(const ParamStaging&) = delete;
  ParamStaging& operator=(const ParamStaging&) = delete;

  // Queues a copy of host[0, bytes) to device scratch on `stream` and returns the device copy,
  // valid for work queued on `stream` until the next upload.
  void* upload(const void* host, size_t bytes, cudaStream_t stream);

 private:
  static constexpr int kSlots = 8;
  struct Slot {
    void* pinned = nullptr;
    size_t bytes = 0;
    cudaEvent_t copied = nullptr;  // recorded after the copy out of `pinned`
  };
  Slot slots_[kSlots];
  int next_ = 0;
  DeviceBuffer device_;  // one device copy suffices: the stream orders its reuse
};

struct Context {
  explicit Context(const Options& options);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // Makes this backend's device current on the calling thread (every public entry calls it).
  void activate() const;

  Options options;
  cudaDeviceProp props{};
  cudaStream_t compute = nullptr;  // every kernel, in call order
  cudaStream_t copy = nullptr;     // weight uploads (prepare_weight)
  cublasHandle_t cublas = nullptr; // bound to `compute`

  DeviceBuffer panel;        // DecodeGemm: decoded rows of a weight [panel_rows, in], 16-bit or f32
  DeviceBuffer activations;  // DecodeGemm: x converted to the GEMM's 16-bit type [T, in]
  ParamStaging params;       // per-call copies of host inputs (token ids, positions, inv_freq)
  DeviceBuffer bounce;       // copy() between overlapping ranges
  DeviceBuffer sampled;      // sample(): the chosen id (int32)
  DeviceBuffer l2_flush;     // time_device_ms(flush_l2)

 private:
  void release() noexcept;
};

// y[T, out] = x[T, in]·Wᵀ (+ bias[out]); the path per Options::linear_path (see cuda_backend.h).
void linear(Context& ctx, const DeviceWeight& w, const float* x, size_t n_tokens, const float* bias, float* y);

}  // namespace endor::cuda::detail
