// Internal to endor_kernels: the per-instruction-set weight kernels every CPU linear path,
// embedding lookup and whole-tensor decode is built from, and the scalar helpers they share.
// Row ranges are the unit of parallel work: callers split rows into tasks on the backend's worker
// pool (thread_pool.h); decode_f32 and the built-in GEMM split them over OpenMP threads.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "endor/format.h"
#include "endor/kernels.h"

namespace endor::cpu::detail {

// Fused kernels keep one accumulator per token in registers: at most this many tokens per call.
inline constexpr size_t kMaxFusedTokens = 8;
// f(std::integral_constant<int, NT>{}) for 1 <= nt <= kMaxFusedTokens: the token count of a fused
// kernel as a compile-time constant, so that its accumulators stay in registers.
template <typename F>
void with_token_count(size_t nt, F&& f) {
  switch (nt) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 3: return f(std::integral_constant<int, 3>{});
    case 4: return f(std::integral_constant<int, 4>{});
    case 5: return f(std::integral_constant<int, 5>{});
    case 6: return f(std::integral_constant<int, 6>{});
    case 7: return f(std::integral_constant<int, 7>{});
    default: return f(std::integral_constant<int, 8>{});
  }
}

// ---- int8 activations (the default for int8/int4/int8g weights; Options::exact turns them off) -
//
// x is quantized per token in blocks of kActBlock consecutive columns: d = amax/127 (f32),
// q = nearbyint(x · (1/d)) in [−127, 127] (round half to even; d = 0 and q = 0 for an all-zero
// block). The product of a weight row with such an x is then, exactly as written (integer sums
// exact, the float steps rounded in any order the kernel likes):
//   int8 weights (row scale s):    y = s · Σ_b d_b · Σ_{c∈b} q_w[c]·q[c]
//   int4 weights (scale S, min M): y = Σ_b d_b · Σ_{g} (S_g·Σ_{c∈b∩g} q_w[c]·q[c] + M_g·Σ_{c∈b∩g, present} q[c])
//   int8g weights (f16 scale S per row group, no min):
//                                  y = Σ_b d_b · Σ_{g} S_g·Σ_{c∈b∩g} q_w[c]·q[c]
//     for groups that are multiples of kActBlock (32: Q8_0's grid, 64, 128) each block lies in one
//     group g(b), so y = Σ_b (d_b·S_{g(b)})·Σ_{c∈b} q_w[c]·q[c]: one exact int32 sum and one f32
//     factor per block, as int8's d_b with the row scale moved inside the sum; any other group
//     size splits a block at the group boundaries (the portable kernel's fallback)
// (absent bitmap elements contribute 0 to both sums: code 0, which int8/int8g decode to exactly 0). 32 columns, not the int4 group: it is the
// finest block whose scale costs nothing extra in the AVX-512 kernel (a vpdpbusd lane sums 4
// columns, so the two blocks of a 64-column word are the two halves of one accumulator, scaled by
// one vector of d), and activation outliers then spoil 32 columns, not 128.
inline constexpr size_t kActBlock = 32;

// The quantized activations of n_tokens tokens: q[t·q_stride + c] (zero past cols, up to
// q_stride), d[t·d_stride + b] and sums[t·d_stride + b] = Σ_{c∈b} q[c] (zero past the blocks of
// cols). q_stride = cols rounded up to 64 (whole 64-column words), d_stride = q_stride / 32.
struct QuantizedX {
  const int8_t* q = nullptr;
  const float* d = nullptr;
  const int32_t* sums = nullptr;
  size_t q_stride = 0, d_stride = 0;
  QuantizedX token(size_t t) const { return {q + t * q_stride, d + t * d_stride, sums + t * d_stride, q_stride, d_stride}; }
};
inline size_t quantized_q_stride(uint64_t cols) { return size_t((cols + 63) / 64 * 64); }
// Bytes of storage quantize_activations needs for n_tokens tokens of cols columns.
size_t quantized_bytes(size_t n_tokens, uint64_t cols);
// Quantizes x[t·x_stride + c] (c < cols, t < n_tokens) into `storage` (quantized_bytes of it,
// 64-byte aligned). One function for every instruction set (an AVX2 loop where the CPU has it, bit
// for bit the scalar reference's results), so every kernel sees the same q, d.
QuantizedX quantize_activations(const float* x, size_t x_stride, size_t n_tokens, uint64_t cols, void* storage);
// The same results from the plain scalar loop that defines them (the tests' reference).
QuantizedX quantize_activations_reference(const float* x, size_t x_stride, size_t n_tokens, uint64_t cols,
                                          void* storage);
// Where quantize_activations puts the codes, scales and sums of n_tokens tokens in storage.
QuantizedX quantized_layout(size_t n_tokens, uint64_t cols, void* storage);
// x̂[t·x_stride + c] = d_b · q[c] (f32, one rounding): what the non-fused paths multiply instead.
void dequantize_activations(const QuantizedX& qx, size_t n_tokens, uint64_t cols, float* out, size_t out_stride);
// Dense int4: every column is present, so Σ_{c∈g} x̂_c = P_g = Σ_{b∈g} d_b·sums_b is the same for
// every row of token xt, and a row adds Σ_g M_g·P_g once. Writes p[g] for the groups of L.
inline void dense_group_sums(const QuantizedX& xt, const TensorLayout& L, float* p) {
  for (uint64_t g = 0; g < L.groups_per_row; ++g) {
    const uint64_t b0 = g * L.group_size / kActBlock;
    const uint64_t b1 = std::min<uint64_t>(xt.d_stride, (g + 1) * L.group_size / kActBlock);
    float sum = 0.0f;
    for (uint64_t b = b0; b < b1; ++b) sum += xt.d[b] * float(xt.sums[b]);
    p[g] = sum;
  }
}
// The zero code z of an int4 group of scale S and min M (as f32): −M/S an integer in [0, 15] with
// z·S == −M in binary32, so z decodes to exactly 0 (an empty group, S = M = 0, takes 0); false
// when the group has none (int4_grid's fallback, other writers' grids).
inline bool int4_zero_code(float S, float M, uint8_t& z) {
  const float neg_m = -M;
  if (S == 0.0f && neg_m == 0.0f) {
    z = 0;
    return true;
  }
  const float zf = std::nearbyint(neg_m / S);
  if (!(zf >= 0.0f && zf <= 15.0f && zf * S == neg_m)) return false;
  z = uint8_t(zf);
  return true;
}
// Bytes a row of TensorView::dense_codes (kernels/cpu/int4_dense.h): 64 a pair of words, 32 an odd
// last word.
inline uint64_t dense_codes_row_bytes(uint64_t cols) {
  const uint64_t words = (cols + 63) / 64;
  return words / 2 * 64 + (words % 2) * 32;
}

// True for the value types the int8-activation kernels serve (int8, int4, int8g).
inline bool int8_activation_weight(ValueType vt) {
  return vt == ValueType::I8 || vt == ValueType::I4 || vt == ValueType::I8G;
}

struct WeightKernels {
  const char* name;
  // out[(r - r0)·cols + c] = W[r, c] as f32 for r in [r0, r1): bit-identical to decode_rows_f32.
  void (*decode_rows)(const TensorView& w, uint64_t r0, uint64_t r1, float* out);
  // f16/bf16 only: out[(r - r0)·cols + c] = the stored 16-bit value of W[r, c], +0 when absent.
  void (*decode_rows_u16)(const TensorView& w, uint64_t r0, uint64_t r1, uint16_t* out);
  // Fused decode-multiply: y[t·y_stride + r] = Σ_c W[r, c]·x[t·x_stride + c] for r in [r0, r1),
  // t < n_tokens (1 ≤ n_tokens ≤ kMaxFusedTokens). Reads every weight byte of the rows once.
  void (*dot_rows)(const TensorView& w, uint64_t r0, uint64_t r1, const float* x, size_t x_stride,
                   size_t n_tokens, float* y, size_t y_stride);
  // Dense f32 block product: y[t·y_stride + n] = Σ_k a[n·a_stride + k]·x[t·x_stride + k] for
  // n < n_rows, t < n_tokens (any n_tokens); `a` is a decoded row panel.
  void (*dense_dot)(const float* a, size_t a_stride, size_t n_rows, size_t k, const float* x,
                    size_t x_stride, size_t n_tokens, float* y, size_t y_stride);
  // int8, int4 or int8g weights only: y[t·y_stride + r] = the int8-activation product above of row r with
  // token t of qx (the QuantizedX of t = 0), r in [r0, r1), 1 ≤ n_tokens ≤ kMaxFusedTokens.
  void (*dot_rows_q8)(const TensorView& w, uint64_t r0, uint64_t r1, const QuantizedX& qx, size_t n_tokens,
                      float* y, size_t y_stride);
  // f16 or bf16 weights only: dot_rows with x given as IEEE half bits (x rounded to f16 by the
  // caller, every value finite): y = Σ_c W[r, c]·f32(x16[c]), the f32 path's function of that x.
  void (*dot_rows_hx)(const TensorView& w, uint64_t r0, uint64_t r1, const uint16_t* x16, size_t x_stride,
                      size_t n_tokens, float* y, size_t y_stride);
};

// ---- f16 activations (dense f16/bf16 weights, and bitmap ones of wide rows; Options::exact
// turns them off) -----------------------------------------------------------------------------
//
// x rounded to f16 once per call (round to nearest even; 2^-11 relative per element, as fine as
// the f16 weights it multiplies: llama.cpp multiplies its F16 weights by f16 x always) and
// widened again by one vcvtph2ps per 16 columns as the kernel loads it. Why:
//  - a one-token product streams the weight row through L1 while re-reading x from it; once x in
//    f32 outgrows about half of L1 (32 KiB on Zen 4) the stream evicts it and every x load misses,
//    which takes a dense f16 row of 5632 columns from 28 to 17 GB/s on one core (bench/RESULTS.md);
//    f16 x is half the bytes and stays;
//  - a dense f16 row loads two bytes of x per byte of weight in f32, one in f16: the dense kernel
//    is bound by its loads at any width (+4 to +18 % tokens/s in the model, SmolLM2 and 1 B).
// A bitmap row's kernel is bound by its expands and conversions instead, and one more conversion
// per 16 columns costs it 3-8 %: bitmap rows take f16 x only from this width on.
inline constexpr uint64_t kHalfXMinCols = 4096 + 1;
// dot_rows_hx for a kernel set without a half-x loop of its own: x widened back to f32 (exactly
// the rounded values) and multiplied by its dot_rows.
void dot_rows_hx_widened(const WeightKernels& k, const TensorView& w, uint64_t r0, uint64_t r1, const uint16_t* x16,
                         size_t x_stride, size_t n_tokens, float* y, size_t y_stride);

const WeightKernels& portable_kernels();
// The portable dot_rows_q8 (the reference of the int8-activation arithmetic; also the fallback of
// the x86 sets for int4 and int8g group sizes their kernels do not take).
void portable_dot_rows_q8(const TensorView& w, uint64_t r0, uint64_t r1, const QuantizedX& qx, size_t n_tokens,
                          float* y, size_t y_stride);
// Only valid when cpu_has_avx2(): compiled with -mavx2 -mfma -mf16c in its own translation unit.
const WeightKernels& avx2_kernels();
// Only valid when cpu_has_avx512(): compiled with -mavx512{f,bw,vl,dq,vbmi,vbmi2} in translation
// units of its own (weight_kernels_avx512*.cpp; the int8-activation ones also with -mavx512vnni, and
// dot_rows_q8 checks VNNI at run time and hands over to the AVX2 set without it). dot_rows,
// dot_rows_q8, dot_rows_hx and int8g's decode_rows of its own (each handing the cases its loops do
// not take to the AVX2 set); the other entries are the AVX2 kernels.
const WeightKernels& avx512_kernels();
// Auto/Portable/Avx2/Avx512 -> kernels; throws endor::Error for an ISA this CPU or build lacks.
const WeightKernels& select_kernels(Isa isa);
// The instruction set select_kernels(isa) chooses (Auto resolved; the CPU is not checked).
Isa resolve_isa(Isa isa);

// ---- scalar helpers (exactly the reference decoder's arithmetic, SPEC.md §6.1/§6.6) ----------

inline float bits_to_f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

inline uint32_t f32_to_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

// Exact f16 -> f32 without data-dependent branches (zeros and normals are mixed at random in a
// pruned dense tensor): the exponent/mantissa bits placed in an f32 and scaled by 2^112 give the
// value for normals and subnormals alike (a subnormal f32 times a power of two is exact).
inline float half_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t em = uint32_t(h & 0x7FFF) << 13;
  float f = bits_to_f32(em) * 0x1p112f;
  if (em >= (0x7C00u << 13)) f = bits_to_f32(em | 0x7F800000u);  // inf, NaN (payload kept)
  return bits_to_f32(f32_to_bits(f) | sign);
}
inline float bfloat_to_f32(uint16_t b) { return bits_to_f32(uint32_t(b) << 16); }
inline uint16_t load_u16(const uint8_t* p) { uint16_t v; std::memcpy(&v, p, 2); return v; }
inline uint32_t load_u32(const uint8_t* p) { uint32_t v; std::memcpy(&v, p, 4); return v; }
inline uint64_t load_u64(const uint8_t* p) { uint64_t v; std::memcpy(&v, p, 8); return v; }

// Index of the first stored value of bitmap row r (the index entry of its block 0).
inline uint64_t bitmap_row_start(const TensorView& w, uint64_t r) {
  return load_u32(w.data + w.layout.index_offset + 4 * (r * w.layout.blocks_per_row));
}
// Mask of the bits of a row's last bitmap word that lie inside the row (all ones when cols%64 == 0).
inline uint64_t last_word_mask(uint64_t cols) {
  const uint64_t used = cols % 64;
  return used == 0 ? ~uint64_t(0) : (uint64_t(1) << used) - 1;
}

}  // namespace endor::cpu::detail
