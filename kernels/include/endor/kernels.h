// Numeric building blocks behind one interface, with two backends: cpu/ (OpenMP, AVX2, oneDNN)
// and cuda/ (CUDA, cuBLAS). The CPU backend is the fallback and the reference the CUDA kernels
// are tested against. The model code (runtime/) calls only this interface.
//
// Conventions: activations are row-major f32 in the backend's own memory (host for CPU, device
// for CUDA), obtained from Backend::alloc. A weight W has shape [out, in] (row = output feature)
// and stays in its encoded form (TensorView); linear() computes y = x·Wᵀ (+ bias).
// Thread safety: a Backend is used by one thread at a time; it may use many threads inside.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "endor/format.h"

namespace endor {

// A weight prepared for compute by a backend. CPU: a view into the mapped file (no copy).
// CUDA: device-resident compressed bytes (or a slot of a streaming ring, see runtime/).
class Weight {
 public:
  virtual ~Weight() = default;
  virtual const TensorLayout& layout() const = 0;
  uint64_t out_features() const { return layout().rows; }
  uint64_t in_features() const { return layout().cols; }
};

// Positional rotation parameters (RoPE, half-split `rotate_half` convention).
struct RopeParams {
  uint32_t head_dim = 0;
  uint32_t rotary_dim = 0;          // == head_dim for every supported model
  const float* inv_freq = nullptr;  // [rotary_dim/2], host memory, already rope_scaling-adjusted
  float attention_factor = 1.0f;    // multiplies cos/sin (1 unless a scaling type says otherwise)
};

struct AttentionParams {
  uint32_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  float scale = 1.0f;               // usually head_dim^-0.5 (OPT pre-scales q instead: 1.0)
  uint32_t sliding_window = 0;      // 0 = none; else a query at p sees keys in (p - window, p]
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "cpu (AVX2, 2 threads)", "cuda (NVIDIA H100 ...)"

  // ---- memory (f32 buffers in backend memory) ----
  virtual float* alloc(size_t n_floats) = 0;   // zero-initialised; owned by the backend
  virtual void free(float* p) = 0;
  virtual void upload(float* dst, const float* host_src, size_t n) = 0;
  virtual void download(float* host_dst, const float* src, size_t n) = 0;
  virtual void copy(float* dst, const float* src, size_t n) = 0;
  virtual void synchronize() {}

  // ---- weights ----
  // The view must outlive the returned Weight (it points into the mapped container).
  virtual std::unique_ptr<Weight> prepare_weight(const TensorView&) = 0;
  // Decoded rows of a weight (embedding lookup): out[t, :] = W[ids[t], :] as f32.
  virtual void embed(const Weight& table, const int32_t* host_ids, size_t n_tokens, float* out) = 0;
  // y[T, out] = x[T, in] · Wᵀ + bias[out] (bias may be null; bias lives in backend memory).
  virtual void linear(const Weight& w, const float* x, size_t n_tokens, const float* bias, float* y) = 0;

  // ---- elementwise and normalisation ([T, D] row-major) ----
  virtual void layer_norm(const float* x, const float* gamma, const float* beta, float eps,
                          size_t n_tokens, size_t dim, float* out) = 0;
  virtual void rms_norm(const float* x, const float* gamma, float eps, size_t n_tokens,
                        size_t dim, float* out) = 0;
  virtual void add(float* x, const float* y, size_t n) = 0;            // x += y
  virtual void scale(float* x, float s, size_t n) = 0;                 // x *= s
  virtual void relu(float* x, size_t n) = 0;
  virtual void silu_mul(const float* gate, const float* up, size_t n, float* out) = 0;
  virtual void add_bias(float* x, const float* bias, size_t n_tokens, size_t dim) = 0;

  // ---- attention ----
  // In place on x[T, n_heads, head_dim] for token positions positions[t] (host memory).
  virtual void rope(float* x, size_t n_tokens, uint32_t n_heads, const int32_t* host_positions,
                    const RopeParams&) = 0;
  // Causal attention of T new queries at positions [n_past, n_past+T) over the cache.
  // q: [T, n_heads, head_dim]; k_cache, v_cache: [capacity, n_kv_heads, head_dim] holding
  // n_past + T valid rows; out: [T, n_heads, head_dim]. GQA: kv head = q head / (n_heads/n_kv).
  virtual void attention(const float* q, const float* k_cache, const float* v_cache,
                         size_t n_past, size_t n_tokens, const AttentionParams&, float* out) = 0;
};

// The CPU backend. n_threads 0 = OpenMP default.
std::unique_ptr<Backend> make_cpu_backend(int n_threads = 0);

// ---- CPU building blocks also used directly by the packer and the benchmarks ----
namespace cpu {
// Multithreaded decode of a whole tensor to f32 (same values as decode_rows_f32).
void decode_f32(const TensorView&, float* out, int n_threads = 0);
// Decode to the tensor's own 16-bit type (dense f16/bf16 bytes) where value_type is f16/bf16.
void decode_u16(const TensorView&, uint16_t* out, int n_threads = 0);
// Which instruction set the fused kernels use on this machine ("avx2+f16c+fma" or "portable").
const char* simd_level();
}  // namespace cpu

}  // namespace endor
