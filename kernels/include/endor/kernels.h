// Numeric building blocks behind one interface, with two backends: cpu/ (a persistent worker pool,
// AVX-512/AVX2/portable kernels chosen at run time, oneDNN) and cuda/ (CUDA, cuBLAS). The CPU backend is the fallback and the reference the CUDA kernels
// are tested against. The model code (runtime/) calls only this interface.
//
// Conventions: activations are row-major f32 in the backend's own memory (host for CPU, device
// for CUDA), obtained from Backend::alloc. A weight W has shape [out, in] (row = output feature)
// and stays in its encoded form (TensorView); linear() computes y = x·Wᵀ (+ bias).
// Thread safety: a Backend is used by one thread at a time; it may use many threads inside.
// Errors: bad arguments (unsupported encodings, ids out of range, ...) throw endor::Error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "endor/format.h"

namespace endor {

// A weight prepared for compute by a backend. CPU: a view into the mapped file (no copy).
// CUDA: device-resident compressed bytes (or a slot of a streaming ring, see runtime/).
class Weight {
 public:
  virtual ~Weight() = default;
  virtual const TensorLayout& layout() const = 0;
  // Bytes the backend holds beyond the file's for this weight (the CPU backend's dense copy of a
  // bitmap int4 weight's codes, Options::int4_dense); 0 when it reads the file's bytes alone.
  virtual uint64_t copy_bytes() const { return 0; }
  uint64_t out_features() const { return layout().rows; }
  uint64_t in_features() const { return layout().cols; }
};

// Positional rotation parameters (RoPE, half-split `rotate_half` convention).
struct RopeParams {
  uint32_t head_dim = 0;
  uint32_t rotary_dim = 0;          // == head_dim for every supported model; 0 means head_dim
  const float* inv_freq = nullptr;  // [rotary_dim/2], host memory, already rope_scaling-adjusted
  float attention_factor = 1.0f;    // multiplies cos/sin (1 unless a scaling type says otherwise)
};

struct AttentionParams {
  uint32_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  float scale = 1.0f;               // usually head_dim^-0.5 (OPT pre-scales q instead: 1.0)
  uint32_t sliding_window = 0;      // 0 = none; else a query at p sees keys in (p - window, p]
};

// One sequence of Backend::attention_seqs: attention() of its n_tokens queries over f32 caches
// (k16/v16 null), or attention_f16() over half ones (k_cache/v_cache null).
struct AttentionSeq {
  const float* q = nullptr;
  const float *k_cache = nullptr, *v_cache = nullptr;
  const uint16_t *k16 = nullptr, *v16 = nullptr;
  size_t n_past = 0, n_tokens = 0;
  float* out = nullptr;
};

// ---- sampling: the next token from one row of logits ----
// transformers' warpers in their order: temperature, top-k, top-p. Candidates are ordered by
// (logit desc, id asc), a NaN logit counting as -inf, so top_k = 1 is greedy.
struct SamplingParams {
  float temperature = 0.0f;  // 0 = greedy argmax (ties -> lowest id; NaN never wins); else > 0, finite
  uint32_t top_k = 0;        // 0 = off
  float top_p = 1.0f;        // in (0, 1]; 1 = off, else the smallest prefix of the ordered
                             // distribution whose probability mass reaches top_p
};
// Scratch of sample_logits (kept between calls so a decode loop allocates nothing).
struct SamplingScratch {
  std::vector<uint32_t> order;
  std::vector<double> probs;
  std::vector<uint64_t> items, moved;  // the radix sort's (every candidate kept)
};
// The reference pick, on the host; every backend's sample() equals it. u01 in [0, 1) is the random
// draw (unused when greedy): softmax(logit / temperature) over the kept candidates in double, then
// the first candidate whose cumulative mass exceeds u01 · (kept mass). Throws endor::Error when
// vocab is 0 or the parameters are out of range.
int32_t sample_logits(const float* logits, size_t vocab, const SamplingParams& params, double u01,
                      SamplingScratch& scratch);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "cpu (avx2+f16c+fma, 2 threads)", "cuda (NVIDIA H100 ...)"

  // ---- memory (f32 buffers in backend memory) ----
  virtual float* alloc(size_t n_floats) = 0;   // zero-initialised; owned by the backend
  virtual void free(float* p) = 0;
  virtual void upload(float* dst, const float* host_src, size_t n) = 0;
  virtual void download(float* host_dst, const float* src, size_t n) = 0;
  virtual void copy(float* dst, const float* src, size_t n) = 0;
  virtual void synchronize() {}

  // ---- weights ----
  // The view must outlive the returned Weight (it points into the mapped container), and a
  // bitmap view must have passed validate_bitmap() (the reader's verify_all() does that): the
  // kernels trust the index. prepare_weight checks the layout's own consistency only.
  virtual std::unique_ptr<Weight> prepare_weight(const TensorView&) = 0;
  // The same for a weight whose bytes are already in memory and stay there (not a streamed slot
  // filled after preparing): a backend may re-encode it once here. The CPU backend stores bitmap
  // int4 as dense int4 where cpu::Options::int4_dense says so. Default: prepare_weight.
  virtual std::unique_ptr<Weight> prepare_resident_weight(const TensorView& v) { return prepare_weight(v); }
  // Decoded rows of a weight (embedding lookup): out[t, :] = W[ids[t], :] as f32.
  // Throws endor::Error when an id is outside [0, rows).
  virtual void embed(const Weight& table, const int32_t* host_ids, size_t n_tokens, float* out) = 0;
  // y[T, out] = x[T, in] · Wᵀ + bias[out] (bias may be null; bias lives in backend memory).
  virtual void linear(const Weight& w, const float* x, size_t n_tokens, const float* bias, float* y) = 0;
  // Several Linears of the same input (q/k/v; gate/up): targets[i].y = x·targets[i].wᵀ + bias,
  // the same values as one linear() per target. A backend may run them as one unit of work: the
  // CPU backend gives all their rows to one parallel region at decode token counts, so a block
  // pays one thread wake-up for q/k/v instead of three. x must not alias any y.
  struct LinearTarget {
    const Weight* w = nullptr;
    const float* bias = nullptr;  // may be null
    float* y = nullptr;           // [T, w.rows]
  };
  virtual void linear_group(const LinearTarget* targets, size_t n_targets, const float* x, size_t n_tokens) {
    for (size_t i = 0; i < n_targets; ++i) linear(*targets[i].w, x, n_tokens, targets[i].bias, targets[i].y);
  }

  // ---- elementwise and normalisation ([T, D] row-major) ----
  virtual void layer_norm(const float* x, const float* gamma, const float* beta, float eps,
                          size_t n_tokens, size_t dim, float* out) = 0;
  // Hugging Face Llama semantics in f32: out = γ · (x · rsqrt(mean(x²) + eps)).
  virtual void rms_norm(const float* x, const float* gamma, float eps, size_t n_tokens,
                        size_t dim, float* out) = 0;
  // x += y, then out = rms_norm(x): a residual add and the norm after it, as one unit of work (one
  // launch on a device). The same values as add() then rms_norm(); out must not alias x or y.
  virtual void add_rms_norm(float* x, const float* y, const float* gamma, float eps, size_t n_tokens, size_t dim,
                            float* out) {
    add(x, y, n_tokens * dim);
    rms_norm(x, gamma, eps, n_tokens, dim, out);
  }
  virtual void add(float* x, const float* y, size_t n) = 0;            // x += y
  virtual void scale(float* x, float s, size_t n) = 0;                 // x *= s
  virtual void relu(float* x, size_t n) = 0;
  virtual void silu_mul(const float* gate, const float* up, size_t n, float* out) = 0;
  virtual void add_bias(float* x, const float* bias, size_t n_tokens, size_t dim) = 0;

  // ---- attention ----
  // In place on x[T, n_heads, head_dim] for token positions positions[t] (host memory).
  // cos/sin as Hugging Face computes them: freq = f32(pos)·inv_freq in f32, then cos/sin in f32,
  // times attention_factor; out = x·cos + rotate_half(x)·sin on the first rotary_dim dims.
  virtual void rope(float* x, size_t n_tokens, uint32_t n_heads, const int32_t* host_positions,
                    const RopeParams&) = 0;
  // rope() of q [T, n_heads, head_dim] and k [T, n_kv_heads, head_dim] at the same positions, as
  // one unit of work (one launch on a device); the same values as two rope() calls.
  virtual void rope_qk(float* q, uint32_t n_heads, float* k, uint32_t n_kv_heads, size_t n_tokens,
                       const int32_t* host_positions, const RopeParams& p) {
    rope(q, n_tokens, n_heads, host_positions, p);
    rope(k, n_tokens, n_kv_heads, host_positions, p);
  }
  // Causal attention of T new queries at positions [n_past, n_past+T) over the cache.
  // q: [T, n_heads, head_dim]; k_cache, v_cache: [capacity, n_kv_heads, head_dim] holding
  // n_past + T valid rows; out: [T, n_heads, head_dim]. GQA: kv head = q head / (n_heads/n_kv).
  virtual void attention(const float* q, const float* k_cache, const float* v_cache,
                         size_t n_past, size_t n_tokens, const AttentionParams&, float* out) = 0;

  // ---- f16 KV cache (optional: half the cache memory) ----
  // Whether store_f16/attention_f16 work on this backend (the CPU backend: yes; CUDA: not yet).
  virtual bool supports_f16_kv() const { return false; }
  // dst[i] = src[i] rounded to IEEE half (to nearest even; overflow to ±inf), backend memory.
  virtual void store_f16(uint16_t* dst, const float* src, size_t n);
  // attention() over caches of IEEE half values: the same contract and arithmetic on the cached
  // values widened to f32.
  virtual void attention_f16(const float* q, const uint16_t* k_cache, const uint16_t* v_cache, size_t n_past,
                             size_t n_tokens, const AttentionParams&, float* out);

  // attention()/attention_f16() of each of n sequences (a batched step: each its own cache), the
  // same values as those calls bit for bit, as one unit of work. The default makes one call each;
  // the CPU backend runs the queries of all of them in one parallel region (kernels/cpu/attention.cpp).
  virtual void attention_seqs(const AttentionSeq* seqs, size_t n, const AttentionParams& p);

  // ---- sampling ----
  // sample_logits() of logits[vocab] (backend memory) with the same u01: the same id. Only the id
  // reaches the host; the default downloads the row and samples it there (the CPU backend reads it
  // in place; CUDA picks it on the device, see cuda_backend.h).
  virtual int32_t sample(const float* logits, size_t vocab, const SamplingParams& params, double u01);

 protected:
  SamplingScratch sampling_scratch_;  // for sample(): a Backend is used by one thread at a time
};

// ---- CPU building blocks also used directly by the packer, the tests and the benchmarks ----
namespace cpu {

// Instruction set of the weight kernels. Auto picks the widest this CPU and build have:
// Avx512 (AVX-512 F/BW/VL/DQ/VBMI/VBMI2: the bitmap decode is vpexpand; its int8-activation kernels
// also need VNNI and hand over to AVX2's without it), else Avx2 (AVX2+FMA+F16C),
// else Portable. Forcing an ISA the CPU lacks throws endor::Error. The environment variable
// ENDOR_ISA=portable|avx2|avx512 caps what Auto picks (benchmarks, reproducing a CI machine).
enum class Isa : uint8_t { Auto, Portable, Avx2, Avx512 };

// How linear() multiplies by an encoded weight. Auto: Fused for T <= 8; then, below the weight's
// GEMM crossover, Fused in blocks of 8 tokens for int8/int4/int8g weights (int8 activations; not bitmap
// int4 in groups that are not a multiple of 64, nor int8g in groups that are not a multiple of 32) and
// RowDecode for the others; PanelGemm from the crossover: int4 96 tokens where the weight's f32 copy
// fits 8 MiB, else 384; int8 and int8g 256; f16/bf16/f32
// 64 or 128; dense f32 16. Options::gemm_min_tokens overrides it. The measurements behind
// these (bench/bench_prefill) are in kernels/cpu/linear.cpp.
//   Fused     — decode in registers and multiply in one pass (up to 8 tokens share the decoded
//               row; a larger T runs blocks of 8 over each thread's rows, which stay in cache).
//               Best for decode and short prompts.
//   RowDecode — each thread decodes 4 rows into an L1/L2-resident f32 scratch, then dense dots.
//   PanelGemm — decode 16 MiB row panels to f32 and run a GEMM (oneDNN matmul when built with
//               it); dense f32 weights go to the GEMM straight from the mapping.
// All paths compute the same y within the error bound of tests/kernels/test_linear.cpp.
enum class LinearPath : uint8_t { Auto, Fused, RowDecode, PanelGemm };

// Which GEMM PanelGemm calls: Auto = oneDNN when the build found it, else the built-in one.
enum class GemmImpl : uint8_t { Auto, Builtin };

// Resident bitmap int4 weights re-encoded at load time as dense int4 (issue 40): their absent
// columns take their group's zero code z (z·S + M = 0 exactly), so the word-by-word kernel expands
// nothing a token and sums the copy as it sums the bitmap: the same results bit for bit, at 4/3 of
// the bytes (0.5 against 0.375 a weight at 50 %) on the heap. Auto (default): on where the AVX-512
// or AVX2 int8-activation kernels run (not the portable ones) and MemAvailable holds the copy, unless
// ENDOR_INT4_DENSE=off (`on` and `auto` mean Auto); streamed weights (offload tiers) keep the bitmap.
// Never under Options::exact.
enum class Int4Dense : uint8_t { Auto, Off };

struct Options {
  int n_threads = 0;                      // worker-pool threads; 0 = omp_get_max_threads() (every core)
  Isa isa = Isa::Auto;
  LinearPath linear_path = LinearPath::Auto;
  GemmImpl gemm = GemmImpl::Auto;
  size_t gemm_min_tokens = 0;             // Auto path: T >= this uses PanelGemm; 0 = per weight (above)
  Int4Dense int4_dense = Int4Dense::Auto;  // resident bitmap int4 as dense int4 (above)
  // false (default): int8, int8g and int4 weights multiply activations quantized to int8 per 32-column
  // block (integer dot products: vpdpbusd with AVX-512 VNNI, vpmaddubsw with AVX2); prefill paths
  // multiply the same dequantized activations, so decode and prefill compute one function. Dense
  // f16/bf16 weights, and bitmap ones of rows over 4096 columns, multiply the activations rounded to
  // f16 (half the bytes to load and to keep in L1 beside the streaming row; prefill multiplies the
  // same rounded values).
  // true: every weight multiplies the f32 activations exactly (the reference; calibration uses it).
  bool exact = false;
  // true (default): batch invariance. Each row of linear()/linear_group() is computed exactly as a
  // one-token call of that row computes it (the fused kernels at any T, in blocks of only as many
  // tokens as keep a token's one-token arithmetic, 1-8 by kernel set and weight form: no row-decode
  // or GEMM path under Auto), whatever T, the other rows and the thread count; an f16
  // activation row that does not fit f16 keeps f32 x alone; attention computes every query as a
  // one-query call does (the decode kernel over its own keys). So a sequence's results, and greedy
  // ids, do not depend on what is batched with it, on how its prompt is chunked, nor on n_threads
  // (for one isa and arithmetic). false: the fast path (Auto's crossovers above, blocked prefill
  // attention), faster prefill of long prompts, without that guarantee (docs/serve.md).
  bool batch_invariant = true;
};

// Multithreaded decode of a whole tensor to f32 (same values as decode_rows_f32), out[rows·cols].
void decode_f32(const TensorView&, float* out, int n_threads = 0, Isa isa = Isa::Auto);
// Decode to the tensor's own 16-bit type (dense f16/bf16 bits, absent elements +0) where
// value_type is f16/bf16; throws endor::Error for other value types. out[rows·cols].
void decode_u16(const TensorView&, uint16_t* out, int n_threads = 0, Isa isa = Isa::Auto);
// Which instruction set Auto uses on this machine ("avx512-vbmi2", "avx2+f16c+fma" or "portable").
const char* simd_level();
// True when this CPU (and build) can run the AVX2+FMA+F16C kernels.
bool cpu_has_avx2();
// True when this CPU (and build) can run the AVX-512 kernels (F, BW, VL, DQ, VBMI, VBMI2 and AVX2's).
bool cpu_has_avx512();
// Parses "auto|portable|avx2|avx512"; throws endor::Error naming `what` otherwise.
Isa parse_isa(const std::string& name, const std::string& what = "isa");
// True when the library was built with oneDNN.
bool have_onednn();

// STREAM-like memory bandwidth, all threads, best of a few passes over a buffer of `bytes`
// (0 = 1 GiB, enough to defeat the caches of a large server CPU). Costs ~1 s and the buffer.
// Read: sum of every word in the widest vector loads the CPU has; copy: dst = src, counted as
// read + write bytes.
double measure_read_bandwidth_gbps(size_t bytes = 0, int n_threads = 0);
double measure_copy_bandwidth_gbps(size_t bytes = 0, int n_threads = 0);

}  // namespace cpu

// The CPU backend. n_threads 0 = omp_get_max_threads() (OMP_NUM_THREADS when set, else every core).
std::unique_ptr<Backend> make_cpu_backend(int n_threads = 0);
std::unique_ptr<Backend> make_cpu_backend(const cpu::Options& options);
// The reference CPU backend: Options::exact (f32 activations for every weight), n_threads as above.
// What other backends and approximate paths are compared against.
std::unique_ptr<Backend> make_exact_cpu_backend(int n_threads = 0);

}  // namespace endor
