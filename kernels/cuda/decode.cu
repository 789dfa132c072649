// Decode kernels: encoded weight rows -> dense row-major f32/f16/bf16 (whole tensors, embedding
// rows, the DecodeGemm panels), and the f32 -> f16/bf16 conversion of activations for cuBLAS.
// Every value type (int8g: q·S with the column's group scale, exact in f32) is bit-exact against
// decode_rows_f32.
//
// One block per (row, 4096-column block): the row's index entry for the block gives the number
// of its first stored value, so blocks decode independently. Bitmap: threads 0..63 load the
// block's 64 words and count their bits, a scan turns counts into each word's first value; then
// warp j handles words j, j+8, ...: lane l writes columns 64·word + l and 64·word + 32 + l, whose
// value numbers are first + popcount of the bits below them. Writes and value reads coalesce.
#include <algorithm>
#include <type_traits>

#include "cuda_check.h"
#include "device_common.cuh"

namespace endor::cuda::detail {
namespace {

constexpr int kDecodeThreads = 256;
constexpr uint32_t kWordsPerBlock = kBlockCols / 64;      // 64
constexpr uint32_t kHalfWordsPerBlock = kBlockCols / 32;  // 128 runs of 32 columns

template <typename OutT>
__device__ __forceinline__ OutT from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// Stored value v as OutT; a 16-bit value decoded to its own type keeps its bits (NaN payloads too).
template <Values VT, typename OutT>
__device__ __forceinline__ OutT decoded(const DeviceWeight& w, const RowParams& p, uint64_t v, uint32_t g) {
  if constexpr (VT == Values::F16 && std::is_same_v<OutT, __half>) {
    return __ushort_as_half(__ldg(reinterpret_cast<const unsigned short*>(w.values) + v));
  } else if constexpr (VT == Values::BF16 && std::is_same_v<OutT, __nv_bfloat16>) {
    return __ushort_as_bfloat16(__ldg(reinterpret_cast<const unsigned short*>(w.values) + v));
  } else {
    return from_f32<OutT>(stored_value<VT>(w, p, v, g));
  }
}

// Grid: n_rows · col_blocks blocks; block b decodes column block b % col_blocks of output row
// b / col_blocks. out: [n_rows, cols].
template <Values VT, bool kBitmap, typename OutT>
__global__ void __launch_bounds__(kDecodeThreads)
    decode_rows_kernel(DeviceWeight w, uint32_t col_blocks, uint32_t row_begin, const int32_t* __restrict__ row_ids,
                       OutT* __restrict__ out) {
  __shared__ uint64_t words_s[kWordsPerBlock];
  __shared__ uint32_t first_s[kWordsPerBlock];      // values before word j, within its warp's 32 words
  __shared__ uint32_t warp0_total_s;                // values in words 0..31
  __shared__ uint32_t group_s[kHalfWordsPerBlock];  // int4/int8g, group_size % 32 == 0: group of each 32-run

  const uint32_t out_row = blockIdx.x / col_blocks, k = blockIdx.x % col_blocks;
  const uint32_t r = row_ids ? uint32_t(row_ids[out_row]) : row_begin + out_row;
  const uint32_t cb = k * kBlockCols;  // first column of this block
  const uint32_t block_cols = min(kBlockCols, w.cols - cb);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const RowParams p = row_params<VT>(w, r);
  OutT* dst = out + uint64_t(out_row) * w.cols + cb;

  // int4/int8g group of column cb + c. When groups are a multiple of 32 columns, every aligned run
  // of 32 columns lies in one group: one division per run instead of one per element.
  bool uniform_groups = false;
  if constexpr (grouped(VT)) {
    uniform_groups = w.group_size % 32 == 0;
    if (uniform_groups && tid < int(kHalfWordsPerBlock)) group_s[tid] = (cb + 32u * tid) / w.group_size;
  }
  auto group_of = [&](uint32_t c) -> uint32_t {
    if constexpr (grouped(VT)) return uniform_groups ? group_s[c / 32] : (cb + c) / w.group_size;
    return 0;
  };

  if constexpr (kBitmap) {
    const uint32_t n_words = (block_cols + 63) / 64;
    if (tid < int(kWordsPerBlock)) {  // warps 0 and 1, whole
      uint64_t word = 0;
      const uint32_t word_in_row = k * kWordsPerBlock + tid;
      if (uint32_t(tid) < n_words) {
        word = w.bitmap_words[uint64_t(r) * w.words_per_row + word_in_row];
        if (word_in_row + 1 == w.words_per_row) word &= last_word_mask(w.cols);  // padding bits are 0 anyway
      }
      const uint32_t count = __popcll(word);
      const uint32_t inclusive = warp_inclusive_scan(count, lane);
      words_s[tid] = word;
      first_s[tid] = inclusive - count;
      if (tid == 31) warp0_total_s = inclusive;
    }
    __syncthreads();
    const uint64_t block_first = w.index[uint64_t(r) * w.blocks_per_row + k];
    const uint32_t below = (1u << lane) - 1u;  // this lane's bit and all above it excluded
    for (uint32_t j = warp; j < n_words; j += kDecodeThreads / 32) {
      const uint64_t word = words_s[j];
      const uint64_t first = block_first + first_s[j] + (j >= 32 ? warp0_total_s : 0u);
      const uint32_t lo = uint32_t(word), hi = uint32_t(word >> 32);
      const uint32_t c_lo = 64 * j + lane, c_hi = c_lo + 32;
      if (c_lo < block_cols) {
        const uint64_t v = first + __popc(lo & below);
        // v < nnz holds for a validated index; the guard keeps a corrupt one inside the buffer.
        dst[c_lo] = ((lo >> lane) & 1u) && v < w.nnz ? decoded<VT, OutT>(w, p, v, group_of(c_lo)) : from_f32<OutT>(0.0f);
      }
      if (c_hi < block_cols) {
        const uint64_t v = first + __popc(lo) + __popc(hi & below);
        dst[c_hi] = ((hi >> lane) & 1u) && v < w.nnz ? decoded<VT, OutT>(w, p, v, group_of(c_hi)) : from_f32<OutT>(0.0f);
      }
    }
  } else {
    __syncthreads();  // group_s
    const uint64_t first = uint64_t(r) * w.cols + cb;  // dense: value number = element number
    for (uint32_t c = tid; c < block_cols; c += kDecodeThreads) dst[c] = decoded<VT, OutT>(w, p, first + c, group_of(c));
  }
}

template <Values VT, bool kBitmap>
void launch_decode_typed(const DeviceWeight& w, uint32_t row_begin, uint32_t n_rows, const int32_t* row_ids,
                         Dense dense, void* out, cudaStream_t stream) {
  const uint32_t col_blocks = (w.cols + kBlockCols - 1) / kBlockCols;
  // prepare_weight checked rows · col_blocks < 2^31, and n_rows ≤ rows for every caller.
  const unsigned n_blocks = unsigned(uint64_t(n_rows) * col_blocks);
  switch (dense) {
    case Dense::F32:
      decode_rows_kernel<VT, kBitmap, float>
          <<<n_blocks, kDecodeThreads, 0, stream>>>(w, col_blocks, row_begin, row_ids, static_cast<float*>(out));
      break;
    case Dense::F16:
      decode_rows_kernel<VT, kBitmap, __half>
          <<<n_blocks, kDecodeThreads, 0, stream>>>(w, col_blocks, row_begin, row_ids, static_cast<__half*>(out));
      break;
    case Dense::BF16:
      decode_rows_kernel<VT, kBitmap, __nv_bfloat16><<<n_blocks, kDecodeThreads, 0, stream>>>(
          w, col_blocks, row_begin, row_ids, static_cast<__nv_bfloat16*>(out));
      break;
  }
  CUDA_CHECK_LAUNCH();
}

template <Values VT>
void launch_decode_values(const DeviceWeight& w, uint32_t row_begin, uint32_t n_rows, const int32_t* row_ids,
                          Dense dense, void* out, cudaStream_t stream) {
  if (w.bitmap)
    launch_decode_typed<VT, true>(w, row_begin, n_rows, row_ids, dense, out, stream);
  else
    launch_decode_typed<VT, false>(w, row_begin, n_rows, row_ids, dense, out, stream);
}

template <typename OutT>
__global__ void convert_kernel(const float* __restrict__ x, size_t n, OutT* __restrict__ out) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    out[i] = from_f32<OutT>(x[i]);
}

}  // namespace

void launch_decode_rows(const DeviceWeight& w, uint32_t row_begin, uint32_t n_rows, const int32_t* row_ids,
                        Dense dense, void* out, cudaStream_t stream) {
  if (n_rows == 0) return;
  switch (w.values_type) {
    case Values::F16: launch_decode_values<Values::F16>(w, row_begin, n_rows, row_ids, dense, out, stream); break;
    case Values::BF16: launch_decode_values<Values::BF16>(w, row_begin, n_rows, row_ids, dense, out, stream); break;
    case Values::F32: launch_decode_values<Values::F32>(w, row_begin, n_rows, row_ids, dense, out, stream); break;
    case Values::I8: launch_decode_values<Values::I8>(w, row_begin, n_rows, row_ids, dense, out, stream); break;
    case Values::I4: launch_decode_values<Values::I4>(w, row_begin, n_rows, row_ids, dense, out, stream); break;
    case Values::I8G: launch_decode_values<Values::I8G>(w, row_begin, n_rows, row_ids, dense, out, stream); break;
  }
}

void launch_convert_f32(const float* x, size_t n, Dense dense, void* out, cudaStream_t stream) {
  if (n == 0) return;
  const unsigned blocks = unsigned(std::min<size_t>((n + 255) / 256, 8192));
  switch (dense) {
    case Dense::F32: CUDA_CHECK(cudaMemcpyAsync(out, x, n * sizeof(float), cudaMemcpyDeviceToDevice, stream)); return;
    case Dense::F16: convert_kernel<__half><<<blocks, 256, 0, stream>>>(x, n, static_cast<__half*>(out)); break;
    case Dense::BF16:
      convert_kernel<__nv_bfloat16><<<blocks, 256, 0, stream>>>(x, n, static_cast<__nv_bfloat16*>(out));
      break;
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace endor::cuda::detail
