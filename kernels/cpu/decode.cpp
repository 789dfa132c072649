// Whole-tensor multithreaded decoders (cpu::decode_f32, cpu::decode_u16): rows split across
// OpenMP threads, each row decodable alone thanks to the bitmap index.
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "context.h"

namespace endor::cpu {
namespace {

int thread_count(int n_threads) { return n_threads > 0 ? n_threads : omp_get_max_threads(); }

// 16-bit stored values of row r scattered into dst[0, cols) (absent elements +0 bits).
void decode_row_u16(const TensorView& w, uint64_t r, uint16_t* dst) {
  const TensorLayout& L = w.layout;
  const uint8_t* values = w.values();
  if (L.encoding == Encoding::Dense) {
    std::memcpy(dst, values + 2 * r * L.cols, 2 * L.cols);
    return;
  }
  std::fill(dst, dst + L.cols, uint16_t(0));
  uint64_t v = detail::bitmap_row_start(w, r);
  const uint8_t* words = w.data + L.bitmap_offset + 8 * r * L.words_per_row;
  for (uint64_t i = 0; i < L.words_per_row; ++i) {
    uint64_t word = detail::load_u64(words + 8 * i);
    if (i + 1 == L.words_per_row) word &= detail::last_word_mask(L.cols);
    while (word) {
      dst[64 * i + uint64_t(__builtin_ctzll(word))] = detail::load_u16(values + 2 * v++);
      word &= word - 1;
    }
  }
}

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
  (void)detail::select_kernels(isa);  // validates the request; the 16-bit scatter is portable
  if (w.layout.value_type != ValueType::F16 && w.layout.value_type != ValueType::BF16)
    throw Error(std::string("decode_u16: value type ") + to_string(w.layout.value_type) + " is not f16/bf16");
  const int nt = thread_count(n_threads);
  const uint64_t rows = w.layout.rows, cols = w.layout.cols;
  const size_t chunk = detail::rows_per_task(rows, nt, 1);
  const int64_t n_chunks = int64_t((rows + chunk - 1) / chunk);
#pragma omp parallel for num_threads(detail::threads_for(rows * cols, nt)) schedule(dynamic, 1)
  for (int64_t b = 0; b < n_chunks; ++b) {
    const uint64_t r0 = uint64_t(b) * chunk, r1 = std::min<uint64_t>(rows, r0 + chunk);
    for (uint64_t r = r0; r < r1; ++r) decode_row_u16(w, r, out + r * cols);
  }
}

}  // namespace endor::cpu
