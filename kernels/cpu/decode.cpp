// Whole-tensor multithreaded decoders (cpu::decode_f32, cpu::decode_u16): rows split across
// OpenMP threads, each row decodable alone thanks to the bitmap index.
#include <omp.h>

#include <algorithm>

#include "context.h"

namespace endor::cpu {
namespace {

int thread_count(int n_threads) { return n_threads > 0 ? n_threads : omp_get_max_threads(); }

}  // namespace

void decode_f32(const TensorView& w, float* out, int n_threads, Isa isa) {
  const detail::WeightKernels& k = detail::select_kernels(isa);
  const int nt = thread_count(n_threads);
  const uint64_t rows = w.layout.rows, cols = w.layout.cols;
  const size_t chunk = detail::rows_per_task(rows, nt, 1);
  const int64_t n_chunks = int64_t((rows + chunk - 1) / chunk);
#pragma omp parallel for num_threads(detail::threads_for(rows * cols, nt)) schedule(dynamic, 1)
  for (int64_t b = 0; b < n_chunks; ++b) {
    const uint64_t r0 = uint64_t(b) * chunk, r1 = std::min<uint64_t>(rows, r0 + chunk);
    k.decode_rows(w, r0, r1, out + r0 * cols);
  }
}

void decode_u16(const TensorView& w, uint16_t* out, int n_threads, Isa isa) {
  const detail::WeightKernels& k = detail::select_kernels(isa);
  if (w.layout.value_type != ValueType::F16 && w.layout.value_type != ValueType::BF16)
    throw Error(std::string("decode_u16: value type ") + to_string(w.layout.value_type) + " is not f16/bf16");
  const int nt = thread_count(n_threads);
  const uint64_t rows = w.layout.rows, cols = w.layout.cols;
  const size_t chunk = detail::rows_per_task(rows, nt, 1);
  const int64_t n_chunks = int64_t((rows + chunk - 1) / chunk);
#pragma omp parallel for num_threads(detail::threads_for(rows * cols, nt)) schedule(dynamic, 1)
  for (int64_t b = 0; b < n_chunks; ++b) {
    const uint64_t r0 = uint64_t(b) * chunk, r1 = std::min<uint64_t>(rows, r0 + chunk);
    k.decode_rows_u16(w, r0, r1, out + r0 * cols);
  }
}

}  // namespace endor::cpu
