// Internal to endor_kernels_cuda: what the host code (cuda_backend.cpp, linear.cpp) and the kernel
// files (*.cu) share — plain structs and launch functions, so the .cu files never parse format.h.
// Every launch function queues work on `stream`, checks the launch, and does not synchronize.
// Shapes are those of endor/kernels.h; all pointers are device pointers unless named host_*.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

namespace endor::cuda::detail {

// Mirrors endor::ValueType, kind for kind; cuda_backend.cpp's kernel_form is the one mapping from
// endor::Dtype (int4k: I4 with DeviceWeight::int4_coded), and a static_assert there checks it. I8G (int8g, SPEC.md §6.8) is a
// kind of its own rather than I8 with a group-scale pointer: the kernels are instantiated per kind,
// so int8's loops keep their per-row scale with no run-time test, and int8g's share int4's group
// handling (group_scales, groups_per_row, group_size; grouped() in device_common.cuh).
enum class Values : uint8_t { F16, BF16, F32, I8, I4, I8G };
// Element type of a dense buffer the decode/convert kernels write.
enum class Dense : uint8_t { F32, F16, BF16 };

inline constexpr uint32_t kBlockCols = 4096;  // == endor::kIndexBlockCols (checked in linear.cpp)
inline constexpr size_t kMaxFusedTokens = 8;  // tokens one fused-kernel launch multiplies at once
inline constexpr uint32_t kMaxHeadDim = 256;  // attention kernel: 8 elements per lane of a warp
inline constexpr uint32_t kMaxSampleCandidates = 1024;  // sampling kernel: kept candidates (top-k)

// One weight's encoded sections in device memory: pointers into one device blob (SPEC §6.2),
// null for sections the encoding does not have. prepare_weight checked rows, cols < 2^31.
//
// No field may leave a whole padding word: the CPU emulation (tests/cuemu) scans kernel arguments for
// device pointers, and a padding word holding a stale pointer read as an access (a bool after the
// last pointer did: its 7 padding bytes kept a slot address, 256-aligned, whose low byte it zeroed).
struct DeviceWeight {
  Values values_type = Values::F32;
  bool bitmap = false;
  bool int4_coded = false;  // int4k (SPEC.md §6.7): group_scales/group_mins hold its coded parameters
  uint32_t rows = 0, cols = 0;
  uint32_t words_per_row = 0;   // bitmap: ceil(cols/64) u64 words per row
  uint32_t blocks_per_row = 0;  // bitmap: ceil(cols/4096) u32 index entries per row
  uint32_t groups_per_row = 0;  // int4, int8g: ceil(cols/group_size)
  uint32_t group_size = 0;      // int4, int8g
  uint64_t nnz = 0;             // stored values
  const uint64_t* bitmap_words = nullptr;  // [rows, words_per_row], bit c%64 of word c/64
  const uint32_t* index = nullptr;         // [rows, blocks_per_row]: values before each block
  const uint8_t* values = nullptr;         // nnz values, row-major (int4: two per byte, low first)
  const float* row_scales = nullptr;       // int8: [rows]
  // int8g: group_scales = f16 S [rows, groups_per_row] (decoded q·S, exact in f32); no mins.
  // int4: f16 [rows, groups_per_row] each; int4k (int4_coded): group_scales = the super-block
  // (d, dmin) f16 pairs, group_mins = their 12-byte code blocks (SPEC.md §6.7). Read them through
  // int4_group_params (device_common.cuh).
  const uint16_t* group_scales = nullptr;
  const uint16_t* group_mins = nullptr;
};

// ---- weights (decode.cu, fused_linear.cu, fused_linear16.cu) ----
// Decodes rows into a dense row-major buffer out[n_rows, cols] of element type `dense`: output row
// i is weight row row_ids[i] when row_ids (device, validated ids) is non-null, else row_begin + i.
void launch_decode_rows(const DeviceWeight& w, uint32_t row_begin, uint32_t n_rows, const int32_t* row_ids,
                        Dense dense, void* out, cudaStream_t stream);
// y[t, r] = Σ_c W[r, c]·x[t, c] (+ bias[r] when non-null) for t < n_tokens ≤ kMaxFusedTokens.
// x: [n_tokens, cols], y: [n_tokens, rows].
void launch_fused_linear(const DeviceWeight& w, const float* x, uint32_t n_tokens, const float* bias, float* y,
                         cudaStream_t stream);
// The same product by the 16-byte-load kernels of fused_linear16.cu (cuda::FusedKernel::Wide16).
void launch_fused_linear16(const DeviceWeight& w, const float* x, uint32_t n_tokens, const float* bias, float* y,
                           cudaStream_t stream);
// out[i] = x[i] rounded to nearest even in `dense` (f16 or bf16) for i < n.
void launch_convert_f32(const float* x, size_t n, Dense dense, void* out, cudaStream_t stream);

// ---- activations (ops.cu) ----
void launch_layer_norm(const float* x, const float* gamma, const float* beta, float eps, size_t n_tokens,
                       size_t dim, float* out, cudaStream_t stream);
void launch_rms_norm(const float* x, const float* gamma, float eps, size_t n_tokens, size_t dim, float* out,
                     cudaStream_t stream);
// x += y, then out = rms_norm(x) (x and out [n_tokens, dim], not aliased): one launch.
void launch_add_rms_norm(float* x, const float* y, const float* gamma, float eps, size_t n_tokens, size_t dim,
                         float* out, cudaStream_t stream);
void launch_add(float* x, const float* y, size_t n, cudaStream_t stream);
void launch_scale(float* x, float s, size_t n, cudaStream_t stream);
void launch_relu(float* x, size_t n, cudaStream_t stream);
void launch_silu_mul(const float* gate, const float* up, size_t n, float* out, cudaStream_t stream);
void launch_add_bias(float* x, const float* bias, size_t n_tokens, size_t dim, cudaStream_t stream);
// Rotates x [n_tokens, n_heads, head_dim] and x2 [n_tokens, n_heads2, head_dim] (q and k; x2 may be
// null with n_heads2 = 0) in one launch. positions: [n_tokens] int32, inv_freq: [rotary_dim/2] (both
// device copies of the host inputs).
void launch_rope(float* x, uint32_t n_heads, float* x2, uint32_t n_heads2, size_t n_tokens, uint32_t head_dim,
                 uint32_t rotary_dim, const int32_t* positions, const float* inv_freq, float attention_factor,
                 cudaStream_t stream);

// ---- sampling (sampling.cu) ----
// *out (device) = sample_logits(logits[vocab], {temperature, top_k, top_p}, u01) (endor/kernels.h)
// where `keep` is the number of candidates top_k keeps (min(top_k, vocab), vocab when off),
// ≤ kMaxSampleCandidates unless temperature is 0 (greedy reads every logit, keeps none).
void launch_sample(const float* logits, uint32_t vocab, float temperature, uint32_t keep, float top_p, double u01,
                   int32_t* out, cudaStream_t stream);

// ---- attention (attention.cu) ----
struct AttentionShape {
  uint32_t n_heads = 0, n_kv_heads = 0, head_dim = 0;  // head_dim ≤ kMaxHeadDim
  float scale = 1.0f;
  uint32_t sliding_window = 0;
};
void launch_attention(const float* q, const float* k_cache, const float* v_cache, size_t n_past, size_t n_tokens,
                      const AttentionShape& shape, float* out, cudaStream_t stream);

}  // namespace endor::cuda::detail
