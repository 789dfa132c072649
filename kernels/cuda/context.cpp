// The CUDA backend's owned state: device selection, streams, cuBLAS handle, scratch buffers.
#include "context.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "cuda_check.h"
#include "endor/format.h"

namespace endor::cuda::detail {

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cudaFree(ptr_);  // no throw from a destructor; a failure here leaks at worst
}

void* DeviceBuffer::ensure(size_t bytes, cudaStream_t stream) {
  if (bytes <= bytes_ && ptr_) return ptr_;
  if (ptr_) {
    CUDA_CHECK(cudaStreamSynchronize(stream));
    CUDA_CHECK(cudaFree(ptr_));
    ptr_ = nullptr;
    bytes_ = 0;
  }
  const size_t rounded = (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
  CUDA_CHECK(cudaMalloc(&ptr_, rounded));
  bytes_ = rounded;
  return ptr_;
}

ParamStaging::~ParamStaging() {
  for (Slot& s : slots_) {
    if (s.copied) {
      cudaEventSynchronize(s.copied);
      cudaEventDestroy(s.copied);
    }
    if (s.pinned) cudaFreeHost(s.pinned);
  }
}

void* ParamStaging::upload(const void* host, size_t bytes, cudaStream_t stream) {
  Slot& slot = slots_[next_];
  next_ = (next_ + 1) % kSlots;
  if (slot.copied)
    CUDA_CHECK(cudaEventSynchronize(slot.copied));  // the copy that last read this slot is done
  else
    CUDA_CHECK(cudaEventCreateWithFlags(&slot.copied, cudaEventDisableTiming));
  if (slot.bytes < bytes) {
    if (slot.pinned) CUDA_CHECK(cudaFreeHost(slot.pinned));
    slot.pinned = nullptr;
    slot.bytes = 0;
    const size_t rounded = (bytes + 4095) / 4096 * 4096;
    CUDA_CHECK(cudaMallocHost(&slot.pinned, rounded));
    slot.bytes = rounded;
  }
  std::memcpy(slot.pinned, host, bytes);
  void* dev = device_.ensure(bytes, stream);
  CUDA_CHECK(cudaMemcpyAsync(dev, slot.pinned, bytes, cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaEventRecord(slot.copied, stream));
  return dev;
}

Context::Context(const Options& opts) : options(opts) {
  int n_devices = 0;
  CUDA_CHECK(cudaGetDeviceCount(&n_devices));
  if (options.device < 0 || options.device >= n_devices)
    throw Error("cuda backend: device " + std::to_string(options.device) + " does not exist (" +
                std::to_string(n_devices) + " CUDA devices)");
  if (options.fused_max_tokens == 0)
    throw Error("cuda backend: fused_max_tokens must be >= 1");
  try {
    CUDA_CHECK(cudaSetDevice(options.device));
    CUDA_CHECK(cudaGetDeviceProperties(&props, options.device));
    CUDA_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking));
    CUBLAS_CHECK(cublasCreate(&cublas));
    CUBLAS_CHECK(cublasSetStream(cublas, compute));
    // No TF32 or other reduced-precision shortcuts for f32 GEMMs (linear.cpp also asks for the
    // pedantic f32 compute type there).
    CUBLAS_CHECK(cublasSetMathMode(cublas, CUBLAS_DEFAULT_MATH));
  } catch (...) {
    release();
    throw;
  }
}

Context::~Context() { release(); }

void Context::release() noexcept {
  cudaSetDevice(options.device);
  if (compute) cudaStreamSynchronize(compute);
  if (cublas) cublasDestroy(cublas);
  if (copy) cudaStreamDestroy(copy);
  if (compute) cudaStreamDestroy(compute);
  cublas = nullptr;
  copy = compute = nullptr;
}

void Context::activate() const {
  int current = -1;
  CUDA_CHECK(cudaGetDevice(&current));
  if (current != options.device) CUDA_CHECK(cudaSetDevice(options.device));
}

}  // namespace endor::cuda::detail
