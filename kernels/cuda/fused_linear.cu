// Fused decode + multiply for decode-time token counts: y[t, r] = Σ_c W[r, c]·x[t, c] straight
// from the compressed weight, each weight byte read once per launch (up to 8 tokens). Not the
// default since 2026-11-27: the runtime runs fused_linear16.cu's kernels; these are
// cuda::FusedKernel::WarpPerRow, kept as the comparison baseline (bench/gpu/bench_fused16.cpp).
//
// One warp per output row, 8 rows per block. The block walks the columns in tiles of 1024: it
// stages x[:, tile] for every token in shared memory, then each warp consumes its row's part of
// the tile. Bitmap rows: lanes 0..15 load the tile's 16 words and count their bits, a warp scan
// gives each word's first value number (counted on from the row's index entry), and for word j
// lane l takes columns 64j + l and 64j + 32 + l — its value number is the word's first plus the
// popcount of the bits below it, so the lanes of a warp read consecutive values (coalesced) and
// consecutive x entries (no bank conflicts). Dense rows: lane l takes columns l, l+32, ...
//
// Rounding: each lane accumulates its ≤ ceil(cols/32) products with fused multiply-adds into one
// f32 accumulator per token, then a 5-step butterfly sums the lanes (tests/cuda derive their
// error bound from this). Every decoded weight is bit-identical to the reference decoder's
// (int8g: q·S with the group's f16 scale; groups of a multiple of 32 columns: lane h loads the
// scale of the tile's run h once and the warp shuffles it, other sizes load it per value).
#include "cuda_check.h"
#include "device_common.cuh"

namespace endor::cuda::detail {
namespace {

constexpr int kFusedWarps = 8;                     // output rows per block
constexpr uint32_t kTileCols = 1024;               // x columns staged per step
constexpr uint32_t kTileWords = kTileCols / 64;    // 16 bitmap words per row per tile
static_assert(kTileWords <= 32, "lanes 0..15 each load one bitmap word of the tile");
static_assert(kTileCols / 32 == 32, "one 32-column run of a tile per lane (int4 group table)");

template <Values VT, bool kBitmap, int kMaxT>
__global__ void __launch_bounds__(kFusedWarps * 32)
    fused_linear_kernel(DeviceWeight w, const float* __restrict__ x, uint32_t n_tokens,
                        const float* __restrict__ bias, float* __restrict__ y) {
  __shared__ float xs[kMaxT][kTileCols];  // x[t, c0 + c]; 0 for t ≥ n_tokens or past the row end

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const uint32_t row = blockIdx.x * kFusedWarps + warp;
  const bool active = row < w.rows;     // the last block may have idle warps; they still sync
  const uint32_t r = active ? row : 0;  // idle warps read row 0's parameters (valid memory)
  const RowParams p = row_params<VT>(w, r);
  bool uniform_groups = false;
  if constexpr (grouped(VT)) uniform_groups = w.group_size % 32 == 0;

  float acc[kMaxT];
#pragma unroll
  for (int t = 0; t < kMaxT; ++t) acc[t] = 0.0f;

  // Bitmap: number of the first stored value of the row not consumed yet.
  uint64_t next_value = 0;
  const uint64_t* row_words = nullptr;
  if constexpr (kBitmap) {
    next_value = w.index[uint64_t(r) * w.blocks_per_row];
    row_words = w.bitmap_words + uint64_t(r) * w.words_per_row;
  }

  for (uint32_t c0 = 0; c0 < w.cols; c0 += kTileCols) {
    const uint32_t tile_cols = min(kTileCols, w.cols - c0);
    __syncthreads();  // every warp is done with the previous tile
    for (uint32_t i = tid; i < kMaxT * kTileCols; i += kFusedWarps * 32) {
      const uint32_t t = i / kTileCols, c = i % kTileCols;
      xs[t][c] = (t < n_tokens && c < tile_cols) ? x[uint64_t(t) * w.cols + c0 + c] : 0.0f;
    }
    __syncthreads();
    if (!active) continue;

    // int4/int8g with groups a multiple of 32 columns: lane h holds the group of the tile's
    // 32-column run h (one division per lane per tile); otherwise each column divides for itself.
    // int8g: lane h also loads that group's scale, once a tile (runs past the row end: none).
    uint32_t run_group = 0;
    float run_scale = 1.0f;
    if constexpr (grouped(VT)) {
      if (uniform_groups) run_group = (c0 + 32u * lane) / w.group_size;
      if constexpr (VT == Values::I8G)
        if (uniform_groups && c0 + 32u * lane < w.cols) run_scale = int8g_scale(w, p.p0 + run_group);
    }
    auto group_of = [&](uint32_t run, uint32_t c) -> uint32_t {  // all lanes call (shuffle)
      if constexpr (grouped(VT)) {
        const uint32_t g = __shfl_sync(kFullMask, run_group, run);
        return uniform_groups ? g : (c0 + c) / w.group_size;
      }
      return 0;
    };
    auto scale_of = [&](uint32_t run) -> float {  // int8g: run's scale; all lanes call (shuffle)
      if constexpr (VT == Values::I8G) return __shfl_sync(kFullMask, run_scale, run);
      return 1.0f;
    };
    // Decoded value v of a column in group g (int8g with uniform groups: q·S with the run's S).
    auto weight = [&](uint64_t v, uint32_t g, float run_s) -> float {
      if constexpr (VT == Values::I8G) {
        if (uniform_groups) return __fmul_rn(float(__ldg(reinterpret_cast<const signed char*>(w.values) + v)), run_s);
      }
      return stored_value<VT>(w, p, v, g);
    };

    if constexpr (kBitmap) {
      const uint32_t n_words = (tile_cols + 63) / 64;
      const uint32_t word0 = c0 / 64;
      uint64_t my_word = 0;
      if (uint32_t(lane) < n_words) {
        my_word = row_words[word0 + lane];
        if (word0 + lane + 1 == w.words_per_row) my_word &= last_word_mask(w.cols);
      }
      const uint32_t count = __popcll(my_word);
      const uint32_t inclusive = warp_inclusive_scan(count, lane);
      const uint32_t exclusive = inclusive - count;
      const uint32_t below = (1u << lane) - 1u;
      for (uint32_t j = 0; j < n_words; ++j) {
        const uint64_t word = __shfl_sync(kFullMask, my_word, j);
        const uint64_t first = next_value + __shfl_sync(kFullMask, exclusive, j);
        const uint32_t lo = uint32_t(word), hi = uint32_t(word >> 32);
        const uint32_t c_lo = 64 * j + lane, c_hi = c_lo + 32;  // columns within the tile
        const uint32_t g_lo = group_of(2 * j, c_lo), g_hi = group_of(2 * j + 1, c_hi);
        const float s_lo = scale_of(2 * j), s_hi = scale_of(2 * j + 1);
        if ((lo >> lane) & 1u) {
          const uint64_t v = first + __popc(lo & below);
          if (v < w.nnz) {  // holds for a validated index; keeps a corrupt one inside the buffer
            const float wv = weight(v, g_lo, s_lo);
#pragma unroll
            for (int t = 0; t < kMaxT; ++t) acc[t] = __fmaf_rn(wv, xs[t][c_lo], acc[t]);
          }
        }
        if ((hi >> lane) & 1u) {
          const uint64_t v = first + __popc(lo) + __popc(hi & below);
          if (v < w.nnz) {
            const float wv = weight(v, g_hi, s_hi);
#pragma unroll
            for (int t = 0; t < kMaxT; ++t) acc[t] = __fmaf_rn(wv, xs[t][c_hi], acc[t]);
          }
        }
      }
      next_value += __shfl_sync(kFullMask, inclusive, 31);
    } else {
      const uint64_t first = uint64_t(r) * w.cols + c0;  // dense: value number = element number
      const uint32_t n_runs = (tile_cols + 31) / 32;
      for (uint32_t run = 0; run < n_runs; ++run) {
        const uint32_t c = 32 * run + lane;
        const uint32_t g = group_of(run, c);
        const float s = scale_of(run);
        if (c < tile_cols) {
          const float wv = weight(first + c, g, s);
#pragma unroll
          for (int t = 0; t < kMaxT; ++t) acc[t] = __fmaf_rn(wv, xs[t][c], acc[t]);
        }
      }
    }
  }

#pragma unroll
  for (int t = 0; t < kMaxT; ++t) acc[t] = warp_sum(acc[t]);
  if (active && lane == 0) {
    const float b = bias ? bias[row] : 0.0f;
#pragma unroll
    for (int t = 0; t < kMaxT; ++t)
      if (uint32_t(t) < n_tokens) y[uint64_t(t) * w.rows + row] = bias ? __fadd_rn(acc[t], b) : acc[t];
  }
}

template <Values VT, bool kBitmap, int kMaxT>
void launch_fused_typed(const DeviceWeight& w, const float* x, uint32_t n_tokens, const float* bias, float* y,
                        cudaStream_t stream) {
  const unsigned n_blocks = (w.rows + kFusedWarps - 1) / kFusedWarps;
  fused_linear_kernel<VT, kBitmap, kMaxT><<<n_blocks, kFusedWarps * 32, 0, stream>>>(w, x, n_tokens, bias, y);
  CUDA_CHECK_LAUNCH();
}

// Token counts round up to 1, 2, 4 or 8 accumulators per lane (fewer template instances).
template <Values VT, bool kBitmap>
void launch_fused_tokens(const DeviceWeight& w, const float* x, uint32_t n_tokens, const float* bias, float* y,
                         cudaStream_t stream) {
  if (n_tokens <= 1)
    launch_fused_typed<VT, kBitmap, 1>(w, x, n_tokens, bias, y, stream);
  else if (n_tokens <= 2)
    launch_fused_typed<VT, kBitmap, 2>(w, x, n_tokens, bias, y, stream);
  else if (n_tokens <= 4)
    launch_fused_typed<VT, kBitmap, 4>(w, x, n_tokens, bias, y, stream);
  else
    launch_fused_typed<VT, kBitmap, 8>(w, x, n_tokens, bias, y, stream);
}

template <Values VT>
void launch_fused_values(const DeviceWeight& w, const float* x, uint32_t n_tokens, const float* bias, float* y,
                         cudaStream_t stream) {
  if (w.bitmap)
    launch_fused_tokens<VT, true>(w, x, n_tokens, bias, y, stream);
  else
    launch_fused_tokens<VT, false>(w, x, n_tokens, bias, y, stream);
}

}  // namespace

void launch_fused_linear(const DeviceWeight& w, const float* x, uint32_t n_tokens, const float* bias, float* y,
                         cudaStream_t stream) {
  if (n_tokens == 0 || w.rows == 0) return;
  switch (w.values_type) {
    case Values::F16: launch_fused_values<Values::F16>(w, x, n_tokens, bias, y, stream); break;
    case Values::BF16: launch_fused_values<Values::BF16>(w, x, n_tokens, bias, y, stream); break;
    case Values::F32: launch_fused_values<Values::F32>(w, x, n_tokens, bias, y, stream); break;
    case Values::I8: launch_fused_values<Values::I8>(w, x, n_tokens, bias, y, stream); break;
    case Values::I4: launch_fused_values<Values::I4>(w, x, n_tokens, bias, y, stream); break;
    case Values::I8G: launch_fused_values<Values::I8G>(w, x, n_tokens, bias, y, stream); break;
  }
}

}  // namespace endor::cuda::detail
