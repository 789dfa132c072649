// Internal to endor_kernels_cuda: error checks that turn a failed CUDA or cuBLAS call into an
// endor::Error naming the statement, file and line (one line). Usable from .cu files, which do
// not see format.h: the throwing function is defined in cuda_backend.cpp.
#pragma once

#include <cuda_runtime_api.h>

namespace endor::cuda::detail {

[[noreturn]] void throw_cuda_error(const char* library, const char* message, int code, const char* statement,
                                   const char* file, int line);

}  // namespace endor::cuda::detail

#define CUDA_CHECK(statement)                                                                               \
  do {                                                                                                      \
    const cudaError_t endor_cuda_status_ = (statement);                                                     \
    if (endor_cuda_status_ != cudaSuccess)                                                                  \
      ::endor::cuda::detail::throw_cuda_error("CUDA", cudaGetErrorString(endor_cuda_status_),               \
                                              int(endor_cuda_status_), #statement, __FILE__, __LINE__);     \
  } while (0)

// Needs <cublas_v2.h> where it is used.
#define CUBLAS_CHECK(statement)                                                                             \
  do {                                                                                                      \
    const cublasStatus_t endor_cublas_status_ = (statement);                                                \
    if (endor_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                                      \
      ::endor::cuda::detail::throw_cuda_error("cuBLAS", cublasGetStatusString(endor_cublas_status_),        \
                                              int(endor_cublas_status_), #statement, __FILE__, __LINE__);   \
  } while (0)

// After a kernel launch: configuration errors surface here, execution errors at the next sync.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
