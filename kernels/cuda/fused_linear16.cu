// Fused decode + multiply for decode-time token counts (1..8), built around 16-byte weight loads:
// y[t, r] = Σ_c W[r, c]·x[t, c] (+ bias[r]) straight from the compressed weight, each weight byte
// read once per launch with an L1-bypassing, L2-evict-first load (device_common.cuh). The previous
// kernels (fused_linear.cu: one warp a row, one value a lane a step) stay selectable
// (cuda::FusedKernel::WarpPerRow) for the comparison benchmark. bench/gpu/SOL.md derives each
// kernel's speed of light from its SASS.
//
// Dense (dense16_kernel): a block of up to 256 threads (fewer for rows of fewer 16-byte chunks) owns
// kRows consecutive rows (split-K inside the block). Thread i takes 16-byte chunks i, i+threads, ...
// of every row (8 f16/bf16, 4 f32, 16 int8/int8g or 32 int4 columns a chunk), two chunks of each row
// in flight before any arithmetic, decodes them in registers (int8/int8g/int4 codes through PRMT into
// 2^23 + q, no I2F; int8g's chunk times its group's f16 scale, loaded once a chunk) and multiplies
// with x read as float4 through L1 (the block's rows share each x load). The partial sums of a
// (row, token) are added by a warp butterfly and then the warps' sums in warp order. Rows whose byte
// length is not a multiple of 16 (or int4 groups not a multiple of 32 columns, int8g groups not a
// multiple of 16, or an unaligned x) take the same kernel's element-wise form (kVec = false).
//
// Bitmap (bitmap16_kernel): a block of kWarps warps owns kWarps rows, one a warp; the block walks the
// columns in steps of 1024, staging x[:, step] in shared memory. In a step, lane l owns the 32
// columns 32l..32l+31 (one bitmap half-word): a warp scan of the popcounts gives each lane the
// number of its first value. The step's stored values are contiguous: the warp loads the 16-byte
// chunks that hold them into registers one step ahead (software pipeline: while step s is
// multiplied, step s+1's chunks and step s+2's mask are in flight), then decodes them to f32 into
// its shared-memory slots (int4/int8g: the code q; the group's q·S + M or q·S is applied per column,
// the lane's group parameters loaded once a step when groups are a multiple of 32 columns), and each
// lane walks its 32 columns in order without branching, multiplying the present ones. Shared-memory
// layouts are padded (slots: one float a 32; x: four floats a lane's 32 columns) so that lanes
// reading "their next value" or "their next x" hit different banks. The stored layout needs no
// re-tiling: the chunks around a step's values are read whole (SOL.md has the overhead).
//
// Rounding: every decoded weight is bit-identical to the reference decoder's (SPEC §6.6); products
// are accumulated with FMAs in column order per thread/lane (dense: ≤ C·ceil(cols/(256·C)) of them,
// bitmap: ≤ 32·ceil(cols/1024)), then dense adds 5 butterfly and 7 cross-warp additions, bitmap 5
// butterfly additions (tests/cuda/test_cuda_linear.cpp derives its error bound from this).
#include <algorithm>

#include "cuda_check.h"
#include "device_common.cuh"

namespace endor::cuda::detail {
namespace {

constexpr int kDenseThreads = 256;
constexpr int kDenseWarps = kDenseThreads / 32;

// Columns (stored values) in one 16-byte chunk.
template <Values VT>
__host__ __device__ constexpr uint32_t chunk_values() {
  switch (VT) {
    case Values::F16:
    case Values::BF16: return 8;
    case Values::F32: return 4;
    case Values::I8:
    case Values::I8G: return 16;
    case Values::I4: return 32;
  }
  return 0;
}
template <Values VT>
__host__ __device__ constexpr uint32_t value_bits() {
  return 128 / chunk_values<VT>();
}

// Rows a dense block owns: enough that each float4 of x read through L1 serves ≥ 16 bytes of weights;
// int4 for one or two tokens: 8, so the block's fixed cost (reduction) spreads over more rows.
template <Values VT, int kMaxT>
__host__ __device__ constexpr int dense_rows() {
  return VT == Values::F32 ? 1 : (VT == Values::F16 || VT == Values::BF16) ? 2 : (VT == Values::I4 && kMaxT <= 2) ? 8 : 4;
}

// Values 4e..4e+3 of a 16-byte chunk, decoded (int4: after the group's q·S + M, or the code q itself
// when kCodes; int8: q·s; int8g: q·S with the group's S, or the code q itself when kCodes).
template <Values VT, bool kCodes = false>
__device__ __forceinline__ void decode_quad(const uint4& raw, int e, float s, float m, float out[4]) {
  const uint32_t word[4] = {raw.x, raw.y, raw.z, raw.w};
  if constexpr (VT == Values::F32) {
#pragma unroll
    for (int i = 0; i < 4; ++i) out[i] = __uint_as_float(word[i]);
  } else if constexpr (VT == Values::F16 || VT == Values::BF16) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t wd = word[2 * e + i / 2];
      const uint16_t h = uint16_t(i % 2 ? wd >> 16 : wd & 0xFFFFu);
      out[i] = VT == Values::F16 ? f16_bits_to_f32(h) : bf16_bits_to_f32(h);
    }
  } else if constexpr (VT == Values::I8) {
    float q[4];
    int8s_to_f32(word[e], q);
#pragma unroll
    for (int i = 0; i < 4; ++i) out[i] = __fmul_rn(q[i], s);
  } else if constexpr (VT == Values::I8G) {
    float q[4];
    int8s_to_f32(word[e], q);
#pragma unroll
    for (int i = 0; i < 4; ++i) out[i] = kCodes ? q[i] : __fmul_rn(q[i], s);  // q·S: exact
  } else {
    float q[8];  // the compiler keeps the half of the word this quad does not use dead
    nibbles_to_f32(word[e / 2], q);
#pragma unroll
    for (int i = 0; i < 4; ++i) out[i] = kCodes ? q[4 * (e % 2) + i] : __fmaf_rn(q[4 * (e % 2) + i], s, m);
  }
}

// ---- dense ----
// kInt4Coded (int4 with kVec only): the weight's int4k parameters (w.int4_coded), a template
// parameter so the chunk loop has no branch on the parameter format.
template <Values VT, int kRows, int kMaxT, bool kVec, bool kInt4Coded = false>
__global__ void __launch_bounds__(kDenseThreads)
    dense16_kernel(DeviceWeight w, const float* __restrict__ x, uint32_t n_tokens, const float* __restrict__ bias,
                   float* __restrict__ y) {
  __shared__ float partial[kDenseWarps][kRows * kMaxT];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const uint32_t row0 = blockIdx.x * kRows;
  const uint32_t n_rows = min(uint32_t(kRows), w.rows - row0);  // the same for the whole block

  float acc[kRows][kMaxT];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int t = 0; t < kMaxT; ++t) acc[r][t] = 0.0f;

  if constexpr (kVec) {
    constexpr uint32_t C = chunk_values<VT>();
    const uint32_t n_chunks = w.cols / C;                        // cols % C == 0 (launch checked)
    const uint64_t row_bytes = uint64_t(w.cols) * value_bits<VT>() / 8;  // a multiple of 16
    const uint8_t* base = w.values + uint64_t(row0) * row_bytes;
    const uint64_t policy = evict_first_policy();
    const uint32_t stride = blockDim.x;  // ≤ 256: a row of fewer chunks gets fewer threads (launch)
    // int8g: each row's scales and the chunk → group division, set up once.
    [[maybe_unused]] const uint16_t* row_gs[kRows];
    [[maybe_unused]] DivBy group_of_col;
    if constexpr (VT == Values::I8G) {
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        row_gs[r] = w.group_scales + uint64_t(row0 + min(uint32_t(r), n_rows - 1)) * w.groups_per_row;
      group_of_col.set(w.group_size);
    }
    for (uint32_t k0 = tid; k0 < n_chunks; k0 += 2 * stride) {
      // Every load of the iteration is issued before any arithmetic (2·kRows·16 bytes in flight a
      // thread). Out-of-range chunks and rows load a valid chunk instead, unused (no branch that
      // would keep the compiler from hoisting the loads).
      uint4 raw[2][kRows];
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const uint32_t k = min(k0 + u * stride, n_chunks - 1);
#pragma unroll
        for (int r = 0; r < kRows; ++r)
          raw[u][r] = load_weight16(base + min(uint32_t(r), n_rows - 1) * row_bytes + uint64_t(k) * 16, policy);
      }
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const uint32_t k = k0 + u * stride;
        if (k >= n_chunks) break;
        const uint32_t c = k * C;  // first column of the chunk
        float s[kRows], m[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          s[r] = 1.0f;
          m[r] = 0.0f;
          const uint32_t rr = row0 + min(uint32_t(r), n_rows - 1);
          if constexpr (VT == Values::I8) s[r] = __ldg(w.row_scales + rr);
          // int8g: the chunk's 16 columns lie in one group (group_size % 16 == 0); the two threads of
          // a 32-column group ask for the same scale in the same load (one request).
          if constexpr (VT == Values::I8G) s[r] = f16_bits_to_f32(__ldg(row_gs[r] + group_of_col(c)));
          if constexpr (VT == Values::I4) {  // the chunk lies in one group (group_size % 32 == 0)
            const uint64_t g = uint64_t(rr) * w.groups_per_row + c / w.group_size;
            int4_group_params_as<kInt4Coded>(w, g, s[r], m[r]);
          }
        }
#pragma unroll
        for (int e = 0; e < int(C / 4); ++e) {
          float wv[kRows][4];
#pragma unroll
          for (int r = 0; r < kRows; ++r) decode_quad<VT>(raw[u][r], e, s[r], m[r], wv[r]);
#pragma unroll
          for (int t = 0; t < kMaxT; ++t) {
            if (t > 0 && uint32_t(t) >= n_tokens) break;  // n_tokens ≥ 1
            const float4 xv = __ldg(reinterpret_cast<const float4*>(x + uint64_t(t) * w.cols + c + 4 * e));
#pragma unroll
            for (int r = 0; r < kRows; ++r) {
              acc[r][t] = __fmaf_rn(wv[r][0], xv.x, acc[r][t]);
              acc[r][t] = __fmaf_rn(wv[r][1], xv.y, acc[r][t]);
              acc[r][t] = __fmaf_rn(wv[r][2], xv.z, acc[r][t]);
              acc[r][t] = __fmaf_rn(wv[r][3], xv.w, acc[r][t]);
            }
          }
        }
      }
    }
  } else {
    // Element-wise: thread i takes columns i, i+256, ... of each row.
    for (uint32_t c = tid; c < w.cols; c += blockDim.x) {
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        if (uint32_t(r) >= n_rows) break;
        const uint32_t rr = row0 + r;
        const RowParams p = row_params<VT>(w, rr);
        const uint32_t g = grouped(VT) ? c / w.group_size : 0;
        const float wv = stored_value<VT>(w, p, uint64_t(rr) * w.cols + c, g);
#pragma unroll
        for (int t = 0; t < kMaxT; ++t) {
          if (uint32_t(t) >= n_tokens) break;
          acc[r][t] = __fmaf_rn(wv, x[uint64_t(t) * w.cols + c], acc[r][t]);
        }
      }
    }
  }

  // Block sum of each (row, token): butterfly within the warp, then the warps in order.
  const int n_warps = int(blockDim.x) / 32;
#pragma unroll
  for (int r = 0; r < kRows; ++r)
#pragma unroll
    for (int t = 0; t < kMaxT; ++t) {
      const float v = warp_sum(acc[r][t]);
      if (lane == 0) partial[warp][r * kMaxT + t] = v;
    }
  __syncthreads();
  if (tid < kRows * kMaxT) {
    const uint32_t r = tid / kMaxT, t = tid % kMaxT;
    if (r < n_rows && t < n_tokens) {
      float sum = partial[0][tid];
#pragma unroll
      for (int i = 1; i < kDenseWarps; ++i)
        if (i < n_warps) sum = __fadd_rn(sum, partial[i][tid]);
      const uint32_t row = row0 + r;
      y[uint64_t(t) * w.rows + row] = bias ? __fadd_rn(sum, bias[row]) : sum;
    }
  }
}

// ---- bitmap ----
constexpr uint32_t kStepCols = 1024;  // columns per step: 32 a lane
// x tile row: column c at c + 4·(c/32), so lane l's 32 columns start 16-byte aligned at 36·l and
// the 8 lanes of a quarter-warp reading float4s at the same position hit 8 different bank quads.
constexpr uint32_t kXStride = kStepCols + kStepCols / 8;

// Warps (= rows) per bitmap block: the shared memory (x tile + value slots) stays under 48 KiB.
__host__ __device__ constexpr int bitmap_warps(int max_t) { return max_t <= 2 ? 8 : max_t <= 4 ? 4 : 2; }
constexpr int kBitmapMaxThreads = 8 * 32;  // bitmap_warps(1) warps (a plain name: check_coverage.py reads it)

// A warp's view of one step of its row: the lane's 32-column mask, the warp scan of the popcounts,
// and the 16-byte chunks [chunk_lo, chunk_hi) of the values section that hold the step's values.
// Value numbers fit 32 bits (SPEC §6.4: nnz ≤ 2^32 − 1).
struct StepPlan {
  uint32_t mask = 0, count = 0, inclusive = 0, total = 0;
  uint32_t first_value = 0, chunk_lo = 0, chunk_hi = 0;
};

template <uint32_t C>
__device__ __forceinline__ StepPlan plan_step(uint32_t nnz, uint32_t mask, uint32_t first_value, int lane) {
  StepPlan sp;
  sp.mask = mask;
  sp.count = __popc(mask);
  sp.inclusive = warp_inclusive_scan(sp.count, lane);
  sp.total = __shfl_sync(kFullMask, sp.inclusive, 31);
  sp.first_value = first_value;
  // Clamped to nnz: a bitmap with more bits than values (validate_bitmap rejects it) must not
  // read past the values section. (first_value ≤ nnz: index entries are checked on prepare.)
  const uint32_t v_end = first_value + min(sp.total, nnz - min(first_value, nnz));
  sp.chunk_lo = first_value / C;
  sp.chunk_hi = first_value < v_end ? uint32_t((uint64_t(v_end) + C - 1) / C) : sp.chunk_lo;
  return sp;
}

// The lane's 32-column mask of the step starting at column c0 (0 past the row end).
__device__ __forceinline__ uint32_t load_mask(const DeviceWeight& w, const uint32_t* row_half_words, uint32_t c0,
                                              int lane, uint64_t policy) {
  const uint32_t my_col = c0 + 32u * lane;
  if (c0 >= w.cols || my_col >= w.cols) return 0;
  uint32_t mask = load_weight4(row_half_words + my_col / 32, policy);
  const uint32_t left = w.cols - my_col;  // padding bits past the row end are 0 anyway
  if (left < 32) mask &= (1u << left) - 1u;
  return mask;
}

// vs[i] of a __shared__ float array vs whose shared-space address is `base` (a register the compiler
// cannot rematerialize: without it, nvcc recomputes the array's address before every load of the
// bitmap kernel's column walk, three instructions a column).
__device__ __forceinline__ float load_slot(const float* vs, uint32_t base, uint32_t i) {
#if defined(__CUDA_ARCH__)
  (void)vs;
  float v;
  asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(base + 4 * i) : "memory");
  return v;
#else
  (void)base;
  return vs[i];
#endif
}
__device__ __forceinline__ uint32_t opaque_shared_address(const void* p) {
#if defined(__CUDA_ARCH__)
  uint32_t a = uint32_t(__cvta_generic_to_shared(p));
  asm volatile("mov.b32 %0, %0;" : "+r"(a));
  return a;
#else
  (void)p;
  return 0;
#endif
}

template <Values VT, int kMaxT, bool kUniformGroups>
__global__ void __launch_bounds__(kBitmapMaxThreads)
    bitmap16_kernel(DeviceWeight w, const float* __restrict__ x, uint32_t n_tokens, const float* __restrict__ bias,
                    float* __restrict__ y) {
  constexpr int kWarps = bitmap_warps(kMaxT);
  constexpr uint32_t C = chunk_values<VT>();
  constexpr uint32_t kSlots = kStepCols + 2 * C;              // a step's ≤ 1024 values and the chunk ends
  // Warp w's slot j is vs[g + g/32] with g = w·kWarpSlots + j (kWarpSlots a multiple of 32): the
  // padding float every 32 spreads the lanes' reads over the banks; one flat array lets the loads
  // use an immediate base.
  constexpr uint32_t kWarpSlots = (kSlots + 31) / 32 * 32;
  constexpr int kLaneChunks = int((kSlots / C + 31) / 32);    // chunks a lane holds for the next step
  __shared__ float4 xs4[kMaxT * kXStride / 4];  // float4: 16-byte aligned also under the emulation
  float* const xs = reinterpret_cast<float*>(xs4);
  __shared__ float vs[kWarps * kWarpSlots / 32 * 33];

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const uint32_t row = blockIdx.x * kWarps + warp;
  const bool active = row < w.rows;     // idle warps of the last block still reach the barriers
  const uint32_t r = active ? row : 0;  // and read row 0 (valid memory)
  const uint64_t policy = evict_first_policy();
  const uint32_t* row_half_words = reinterpret_cast<const uint32_t*>(w.bitmap_words) + uint64_t(r) * w.words_per_row * 2;
  const uint32_t slot0 = warp * kWarpSlots;
  const uint32_t vs_base = opaque_shared_address(vs);
  float i8_scale = 1.0f;
  if constexpr (VT == Values::I8) i8_scale = __ldg(w.row_scales + r);
  // x rows 16-byte aligned: the tile is staged with float4 loads.
  const bool x_aligned = reinterpret_cast<uintptr_t>(x) % 16 == 0 && w.cols % 4 == 0;

  float acc[kMaxT];
#pragma unroll
  for (int t = 0; t < kMaxT; ++t) acc[t] = 0.0f;

  // Software pipeline: while step s is multiplied, the value chunks of step s+1 are in flight to
  // registers and the mask of step s+2 is being loaded.
  const uint32_t nnz = uint32_t(min(w.nnz, uint64_t(UINT32_MAX)));
  StepPlan cur = plan_step<C>(nnz, load_mask(w, row_half_words, 0, lane, policy), w.index[uint64_t(r) * w.blocks_per_row], lane);
  uint32_t next_mask = load_mask(w, row_half_words, kStepCols, lane, policy);
  uint4 raw[kLaneChunks];
  auto load_chunks = [&](const StepPlan& sp) {
#pragma unroll
    for (int i = 0; i < kLaneChunks; ++i) {
      const uint32_t ch = sp.chunk_lo + lane + 32u * i;
      if (active && ch < sp.chunk_hi) raw[i] = load_weight16(w.values + uint64_t(ch) * 16, policy);
    }
  };
  load_chunks(cur);

  for (uint32_t c0 = 0; c0 < w.cols; c0 += kStepCols) {
    const uint32_t step_cols = min(kStepCols, w.cols - c0);
    __syncthreads();  // every warp is done with the previous step's x tile and slots
    if (x_aligned && step_cols == kStepCols) {  // the common case: whole float4s
      for (uint32_t i = tid; i < kMaxT * kStepCols / 4; i += kWarps * 32) {
        const uint32_t t = i / (kStepCols / 4), c = 4 * (i % (kStepCols / 4));
        const float4 v = t < n_tokens ? __ldg(reinterpret_cast<const float4*>(x + uint64_t(t) * w.cols + c0 + c))
                                      : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        *reinterpret_cast<float4*>(xs + t * kXStride + c + 4 * (c / 32)) = v;
      }
    } else {
      for (uint32_t i = tid; i < kMaxT * kStepCols; i += kWarps * 32) {
        const uint32_t t = i / kStepCols, c = i % kStepCols;
        xs[t * kXStride + c + 4 * (c / 32)] = (t < n_tokens && c < step_cols) ? x[uint64_t(t) * w.cols + c0 + c] : 0.0f;
      }
    }
    // This step's chunks (in registers since the previous step) -> decoded f32 slots.
    if (active) {
#pragma unroll
      for (int i = 0; i < kLaneChunks; ++i) {
        const uint32_t ch = cur.chunk_lo + lane + 32u * i;
        if (ch < cur.chunk_hi) {
          const uint32_t j0 = (ch - cur.chunk_lo) * C;
#pragma unroll
          for (int e = 0; e < int(C / 4); ++e) {
            float q[4];
            decode_quad<VT, true>(raw[i], e, i8_scale, 0.0f, q);  // int4, int8g: the code q
#pragma unroll
            for (int k = 0; k < 4; ++k) {
              const uint32_t g = slot0 + j0 + 4 * e + k;
              vs[g + g / 32] = q[k];
            }
          }
        }
      }
    }
    // Issue the next step's loads before multiplying this one.
    const StepPlan nxt = plan_step<C>(nnz, next_mask, cur.first_value + cur.total, lane);
    load_chunks(nxt);
    next_mask = load_mask(w, row_half_words, c0 + 2 * kStepCols, lane, policy);
    // int4/int8g with groups a multiple of 32 columns: the lane's 32 columns lie in one group, whose
    // parameters it loads once a step.
    const uint32_t my_col = c0 + 32u * lane;
    float s = 1.0f, m = 0.0f;
    if constexpr (grouped(VT) && kUniformGroups) {
      if (active && cur.mask) {
        const uint64_t g = uint64_t(r) * w.groups_per_row + my_col / w.group_size;
        if constexpr (VT == Values::I8G)
          s = int8g_scale(w, g);
        else
          int4_group_params(w, g, s, m);
      }
    }
    __syncthreads();

    if (active) {
      // Branch-free walk of the lane's 32 columns: slot j holds the next present column's value
      // (j stays inside the warp's slots: it ends at the lane's last value + 1 < kSlots); an
      // absent column adds nothing (predicated) and does not advance j.
      uint32_t j = slot0 + (cur.first_value - cur.chunk_lo * C) + (cur.inclusive - cur.count);
      const float* xl = xs + 36 * lane;  // tile column 32·lane
      const uint32_t mask = cur.mask;
#pragma unroll
      for (int p4 = 0; p4 < 32; p4 += 4) {
        float4 xv[kMaxT];
#pragma unroll
        for (int t = 0; t < kMaxT; ++t) xv[t] = *reinterpret_cast<const float4*>(xl + t * kXStride + p4);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int p = p4 + k;
          const uint32_t bit = (mask >> p) & 1u;
          const bool present = bit != 0;
          float wv = load_slot(vs, vs_base, j + j / 32);
          j += bit;
          if constexpr (VT == Values::I4) {
            if constexpr (kUniformGroups) {
              wv = __fmaf_rn(wv, s, m);
            } else if (present) {
              const uint64_t g = uint64_t(r) * w.groups_per_row + (my_col + p) / w.group_size;
              float gs, gm;
              int4_group_params(w, g, gs, gm);
              wv = __fmaf_rn(wv, gs, gm);
            }
          } else if constexpr (VT == Values::I8G) {  // q·S, exact: the reference's decoded value
            if constexpr (kUniformGroups) {
              wv = __fmul_rn(wv, s);
            } else if (present) {
              wv = __fmul_rn(wv, int8g_scale(w, uint64_t(r) * w.groups_per_row + (my_col + p) / w.group_size));
            }
          }
#pragma unroll
          for (int t = 0; t < kMaxT; ++t) {
            const float xk = k == 0 ? xv[t].x : k == 1 ? xv[t].y : k == 2 ? xv[t].z : xv[t].w;
            if (present) acc[t] = __fmaf_rn(wv, xk, acc[t]);
          }
        }
      }
    }
    cur = nxt;
  }

#pragma unroll
  for (int t = 0; t < kMaxT; ++t) acc[t] = warp_sum(acc[t]);
  if (active && lane == 0) {
#pragma unroll
    for (int t = 0; t < kMaxT; ++t)
      if (uint32_t(t) < n_tokens) y[uint64_t(t) * w.rows + row] = bias ? __fadd_rn(acc[t], bias[row]) : acc[t];
  }
}

// ---- launches ----
template <Values VT, int kMaxT>
void launch_typed(const DeviceWeight& w, const float* x, uint32_t n_tokens, const float* bias, float* y,
                  cudaStream_t stream) {
  if (w.bitmap) {
    constexpr int kWarps = bitmap_warps(kMaxT);
    const unsigned n_blocks = (w.rows + kWarps - 1) / kWarps;
    if (grouped(VT) && w.group_size % 32 != 0)
      bitmap16_kernel<VT, kMaxT, false><<<n_blocks, kWarps * 32, 0, stream>>>(w, x, n_tokens, bias, y);
    else
      bitmap16_kernel<VT, kMaxT, true><<<n_blocks, kWarps * 32, 0, stream>>>(w, x, n_tokens, bias, y);
  } else {
    constexpr int kRows = dense_rows<VT, kMaxT>();
    const unsigned n_blocks = (w.rows + kRows - 1) / kRows;
    // A chunk must lie in one group: int4 (32 columns a chunk) needs groups of a multiple of 32 columns,
    // int8g (16) of 16.
    const bool vec = (uint64_t(w.cols) * value_bits<VT>()) % 128 == 0 &&
                     (VT != Values::I4 || w.group_size % 32 == 0) &&
                     (VT != Values::I8G || w.group_size % 16 == 0) && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                     reinterpret_cast<uintptr_t>(w.values) % 16 == 0;
    // 16-byte form: one thread a chunk of the row, up to 256 (a 4096-column int4 row has 128 chunks).
    const uint32_t n_chunks = w.cols / chunk_values<VT>();
    const unsigned threads = std::min<unsigned>(kDenseThreads, std::max<unsigned>(32, (n_chunks + 31) / 32 * 32));
    constexpr bool kInt4 = VT == Values::I4;
    if (vec && kInt4 && w.int4_coded)
      dense16_kernel<VT, kRows, kMaxT, true, kInt4><<<n_blocks, threads, 0, stream>>>(w, x, n_tokens, bias, y);
    else if (vec)
      dense16_kernel<VT, kRows, kMaxT, true><<<n_blocks, threads, 0, stream>>>(w, x, n_tokens, bias, y);
    else
      dense16_kernel<VT, kRows, kMaxT, false><<<n_blocks, kDenseThreads, 0, stream>>>(w, x, n_tokens, bias, y);
  }
  CUDA_CHECK_LAUNCH();
}

// Token counts round up to 1, 2, 4 or 8 accumulators (fewer template instances).
template <Values VT>
void launch_tokens(const DeviceWeight& w, const float* x, uint32_t n_tokens, const float* bias, float* y,
                   cudaStream_t stream) {
  if (n_tokens <= 1)
    launch_typed<VT, 1>(w, x, n_tokens, bias, y, stream);
  else if (n_tokens <= 2)
    launch_typed<VT, 2>(w, x, n_tokens, bias, y, stream);
  else if (n_tokens <= 4)
    launch_typed<VT, 4>(w, x, n_tokens, bias, y, stream);
  else
    launch_typed<VT, 8>(w, x, n_tokens, bias, y, stream);
}

}  // namespace

void launch_fused_linear16(const DeviceWeight& w, const float* x, uint32_t n_tokens, const float* bias, float* y,
                           cudaStream_t stream) {
  if (n_tokens == 0 || w.rows == 0) return;
  switch (w.values_type) {
    case Values::F16: launch_tokens<Values::F16>(w, x, n_tokens, bias, y, stream); break;
    case Values::BF16: launch_tokens<Values::BF16>(w, x, n_tokens, bias, y, stream); break;
    case Values::F32: launch_tokens<Values::F32>(w, x, n_tokens, bias, y, stream); break;
    case Values::I8: launch_tokens<Values::I8>(w, x, n_tokens, bias, y, stream); break;
    case Values::I4: launch_tokens<Values::I4>(w, x, n_tokens, bias, y, stream); break;
    case Values::I8G: launch_tokens<Values::I8G>(w, x, n_tokens, bias, y, stream); break;
  }
}

}  // namespace endor::cuda::detail
