// cuBLAS for cuemu: exactly the calls endor_kernels_cuda makes — handle create/destroy, stream and
// math mode, and cublasGemmEx with A, B of one type (f32, f16, bf16), C f32, compute type
// CUBLAS_COMPUTE_32F or CUBLAS_COMPUTE_32F_PEDANTIC, any transposes — on a plain CPU GEMM in f32:
// 16-bit operands widen exactly, products round once in f32, sums in f32 (8 interleaved partial
// sums). Anything else returns CUBLAS_STATUS_NOT_SUPPORTED, so a new call shows up as a failure.
#include <cublas_v2.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cuemu_internal.h"

struct cublasContext {
  cudaStream_t stream = nullptr;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
};

namespace {

bool element_bytes(cudaDataType t, size_t* bytes) {
  switch (t) {
    case CUDA_R_32F: *bytes = 4; return true;
    case CUDA_R_16F:
    case CUDA_R_16BF: *bytes = 2; return true;
    default: return false;
  }
}

const char* type_name(cudaDataType t) {
  switch (t) {
    case CUDA_R_32F: return "f32";
    case CUDA_R_16F: return "f16";
    case CUDA_R_16BF: return "bf16";
    default: return "other";
  }
}

float load(const void* base, cudaDataType t, size_t i) {
  switch (t) {
    case CUDA_R_16F: {
      __half h;
      std::memcpy(&h, static_cast<const char*>(base) + 2 * i, 2);
      return __half2float(h);
    }
    case CUDA_R_16BF: {
      uint16_t b;
      std::memcpy(&b, static_cast<const char*>(base) + 2 * i, 2);
      const uint32_t u = uint32_t(b) << 16;
      float f;
      std::memcpy(&f, &u, 4);
      return f;
    }
    default: {
      float f;
      std::memcpy(&f, static_cast<const char*>(base) + 4 * i, 4);
      return f;
    }
  }
}

// op(X) of a column-major matrix with leading dimension ld, as a dense row-major rows × depth
// float matrix (row i = row i of op(X) for A, column j of op(B) for B): the GEMM then takes dot
// products of contiguous rows.
std::vector<float> gather(const void* x, cudaDataType t, int ld, bool transposed, int rows, int depth,
                          bool rows_are_columns) {
  // rows_are_columns: B — output row j is column j of op(B); A — output row i is row i of op(A).
  std::vector<float> out(size_t(rows) * size_t(depth));
  for (int i = 0; i < rows; ++i)
    for (int p = 0; p < depth; ++p) {
      // Element (r, c) of the stored matrix: op = N: op(X)(r, c) = X(r, c); op = T: X(c, r).
      int r, c;
      if (!rows_are_columns) {  // op(A)(i, p)
        r = transposed ? p : i;
        c = transposed ? i : p;
      } else {  // op(B)(p, j=i)
        r = transposed ? i : p;
        c = transposed ? p : i;
      }
      out[size_t(i) * size_t(depth) + size_t(p)] = load(x, t, size_t(c) * size_t(ld) + size_t(r));
    }
  return out;
}

// Elements a column-major matrix of `rows` × `cols` with leading dimension ld spans.
size_t span(int rows, int cols, int ld) { return cols == 0 || rows == 0 ? 0 : size_t(cols - 1) * size_t(ld) + size_t(rows); }

}  // namespace

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new cublasContext();
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->math = mode;
  return CUBLAS_STATUS_SUCCESS;
}
const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS (other, cuemu)";
  }
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  size_t a_bytes = 0, b_bytes = 0;
  if (Atype != Btype || Ctype != CUDA_R_32F || !element_bytes(Atype, &a_bytes) || !element_bytes(Btype, &b_bytes) ||
      (computeType != CUBLAS_COMPUTE_32F && computeType != CUBLAS_COMPUTE_32F_PEDANTIC) ||
      (transa != CUBLAS_OP_N && transa != CUBLAS_OP_T) || (transb != CUBLAS_OP_N && transb != CUBLAS_OP_T))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  const bool ta = transa == CUBLAS_OP_T, tb = transb == CUBLAS_OP_T;
  // cuBLAS's argument checks: sizes ≥ 0, leading dimensions ≥ the stored matrices' row counts.
  if (m < 0 || n < 0 || k < 0 || !alpha || !beta || lda < std::max(1, ta ? k : m) || ldb < std::max(1, tb ? n : k) ||
      ldc < std::max(1, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  const int a_rows = ta ? k : m, a_cols = ta ? m : k, b_rows = tb ? n : k, b_cols = tb ? k : n;
  if ((k > 0 && (!::cuemu::device_range(A, span(a_rows, a_cols, lda) * a_bytes) ||
                 !::cuemu::device_range(B, span(b_rows, b_cols, ldb) * b_bytes))) ||
      !::cuemu::device_range(C, span(m, n, ldc) * 4)) {
    std::fprintf(stderr, "cuemu: cublasGemmEx: an operand is not inside one device allocation\n");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  ::cuemu::record_coverage(std::string("cublasGemmEx\t") + (ta ? "T" : "N") + (tb ? "T" : "N") + " " +
                           type_name(Atype) + " -> f32");
  ::cuemu::stream_access(handle->stream, "cublasGemmEx", A, 1, C, 1);
  ::cuemu::stream_access(handle->stream, "cublasGemmEx", B, 1, nullptr, 0);
  const auto t0 = std::chrono::steady_clock::now();
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  const std::vector<float> a = gather(A, Atype, lda, ta, m, k, false);  // [m][k]
  const std::vector<float> b = gather(B, Btype, ldb, tb, n, k, true);   // [n][k]
  float* c = static_cast<float*>(C);
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      const float* ar = a.data() + size_t(i) * size_t(k);
      const float* br = b.data() + size_t(j) * size_t(k);
      float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      int p = 0;
      for (; p + 8 <= k; p += 8)
        for (int q = 0; q < 8; ++q) part[q] += ar[p + q] * br[p + q];
      for (; p < k; ++p) part[p % 8] += ar[p] * br[p];
      const float dot = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
      float& out = c[size_t(j) * size_t(ldc) + size_t(i)];
      out = be == 0.0f ? al * dot : al * dot + be * out;  // beta = 0: C is not read (may be NaN)
    }
  if (::cuemu::profiling())
    ::cuemu::add_profile(std::string("cublasGemmEx ") + type_name(Atype),
                         std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  ::cuemu::after_device_work("cublasGemmEx");
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
