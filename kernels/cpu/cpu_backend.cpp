// The CPU Backend: host memory, weights as views into the mapped container, and the ops of
// ops.h / linear.cpp behind the Backend interface.

#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_set>
#include <vector>

#include "context.h"
#include "half.h"
#include "int4_dense.h"
#include "ops.h"

namespace endor {
namespace {

using cpu::detail::Context;

class CpuWeight final : public Weight {
 public:
  explicit CpuWeight(const TensorView& view) : view_(view) {}
  // With a dense copy of its codes (int4_dense.h), which the view points to.
  CpuWeight(const TensorView& view, cpu::detail::DenseCodes codes) : view_(view), codes_(std::move(codes)) {
    view_.dense_codes = codes_.get();
  }
  const TensorLayout& layout() const override { return view_.layout; }
  uint64_t copy_bytes() const override { return codes_ ? view_.layout.rows * cpu::detail::dense_codes_row_bytes(view_.layout.cols) : 0; }
  const TensorView& view() const { return view_; }

 private:
  TensorView view_;  // points into the caller's mapping (no copy)
  cpu::detail::DenseCodes codes_{nullptr, std::free};
};

const TensorView& view_of(const Weight& w) {
  const auto* cw = dynamic_cast<const CpuWeight*>(&w);
  if (!cw) throw Error("cpu backend: weight was prepared by another backend");
  return cw->view();
}

// Checks what the kernels rely on beyond validate_bitmap(): sane dimensions, sections inside
// the blob, and index entries that never decrease nor exceed nnz (O(rows·blocks)).
void check_weight(const TensorView& v) {
  const TensorLayout& L = v.layout;
  const std::string what = v.info ? "tensor " + v.info->name : std::string("weight");
  if (!v.data) throw Error("cpu backend: " + what + " has no data");
  if (L.rows == 0 || L.cols == 0) throw Error("cpu backend: " + what + " has an empty shape");
  if ((L.value_type == ValueType::I4 || L.value_type == ValueType::I8G) && L.group_size == 0)
    throw Error("cpu backend: " + what + " " + to_string(L.value_type) + " group size 0");
  if (L.encoding == Encoding::Dense && L.nnz != L.rows * L.cols)
    throw Error("cpu backend: dense " + what + " has nnz != rows·cols");
  if (L.encoding != Encoding::Bitmap) return;
  const uint64_t n = L.rows * L.blocks_per_row;
  uint64_t prev = 0;
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t e = cpu::detail::load_u32(v.data + L.index_offset + 4 * i);
    if (e < prev || e > L.nnz)
      throw Error("cpu backend: " + what + " bitmap index entry " + std::to_string(i) + " is out of order or past nnz");
    prev = e;
  }
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const cpu::Options& options) : ctx_(options) {}
  ~CpuBackend() override {
    for (float* p : live_) std::free(p);
  }

  std::string name() const override {
    std::string s = "cpu (";
    s += ctx_.kernels->name;
    s += ", " + std::to_string(ctx_.n_threads) + (ctx_.n_threads == 1 ? " thread" : " threads");
    if (ctx_.onednn) s += ", oneDNN";
    return s + ")";
  }

  float* alloc(size_t n_floats) override {
    const size_t bytes = (std::max<size_t>(n_floats, 1) * sizeof(float) + 63) / 64 * 64;
    float* p = static_cast<float*>(std::aligned_alloc(64, bytes));
    if (!p) throw Error("cpu backend: out of memory allocating " + std::to_string(bytes) + " bytes");
    std::memset(p, 0, bytes);
    live_.insert(p);
    return p;
  }
  void free(float* p) override {
    if (!p) return;
    if (live_.erase(p) == 0) throw Error("cpu backend: free() of a pointer this backend did not allocate");
    std::free(p);
  }
  void upload(float* dst, const float* src, size_t n) override { std::memcpy(dst, src, n * sizeof(float)); }
  void download(float* dst, const float* src, size_t n) override { std::memcpy(dst, src, n * sizeof(float)); }
  void copy(float* dst, const float* src, size_t n) override { std::memmove(dst, src, n * sizeof(float)); }

  std::unique_ptr<Weight> prepare_weight(const TensorView& view) override {
    check_weight(view);
    return std::make_unique<CpuWeight>(view);
  }
  std::unique_ptr<Weight> prepare_resident_weight(const TensorView& view) override {
    check_weight(view);
    const TensorLayout& L = view.layout;
    if (L.value_type == ValueType::I4 && L.encoding == Encoding::Bitmap &&
        cpu::detail::int4_dense_enabled(ctx_.options, ctx_.kernels->name) &&
        cpu::detail::int4_dense_memory_allows(L.rows * cpu::detail::dense_codes_row_bytes(L.cols)))
      if (auto codes = cpu::detail::densify_int4_bitmap(view, /*vector=*/cpu::detail::int4_dense_impl::avx512_vnni_cpu()))
        return std::make_unique<CpuWeight>(view, std::move(codes));
    return std::make_unique<CpuWeight>(view);
  }

  void embed(const Weight& table, const int32_t* ids, size_t n_tokens, float* out) override {
    const TensorView& v = view_of(table);
    const uint64_t rows = v.layout.rows, cols = v.layout.cols;
    for (size_t t = 0; t < n_tokens; ++t)
      if (ids[t] < 0 || uint64_t(ids[t]) >= rows)
        throw Error("embed: token id " + std::to_string(ids[t]) + " outside [0, " + std::to_string(rows) + ")");
    const cpu::detail::WeightKernels& k = *ctx_.kernels;
    ctx_.pool.run(int64_t(n_tokens), cpu::detail::threads_for(n_tokens * cols, ctx_.n_threads), [&](int64_t t, int) {
      k.decode_rows(v, uint64_t(ids[t]), uint64_t(ids[t]) + 1, out + size_t(t) * cols);
    });
  }

  void linear(const Weight& w, const float* x, size_t n_tokens, const float* bias, float* y) override {
    cpu::detail::linear(ctx_, view_of(w), x, n_tokens, bias, y);
  }

  void linear_group(const LinearTarget* targets, size_t n_targets, const float* x, size_t n_tokens) override {
    jobs_.resize(n_targets);
    for (size_t i = 0; i < n_targets; ++i) jobs_[i] = {&view_of(*targets[i].w), targets[i].bias, targets[i].y};
    cpu::detail::linear_group(ctx_, jobs_.data(), n_targets, x, n_tokens);
  }

  void layer_norm(const float* x, const float* gamma, const float* beta, float eps, size_t n_tokens, size_t dim,
                  float* out) override {
    cpu::detail::layer_norm(ctx_, x, gamma, beta, eps, n_tokens, dim, out);
  }
  void rms_norm(const float* x, const float* gamma, float eps, size_t n_tokens, size_t dim, float* out) override {
    cpu::detail::rms_norm(ctx_, x, gamma, eps, n_tokens, dim, out);
  }
  void add(float* x, const float* y, size_t n) override { cpu::detail::add(ctx_, x, y, n); }
  void scale(float* x, float s, size_t n) override { cpu::detail::scale(ctx_, x, s, n); }
  void relu(float* x, size_t n) override { cpu::detail::relu(ctx_, x, n); }
  void silu_mul(const float* gate, const float* up, size_t n, float* out) override {
    cpu::detail::silu_mul(ctx_, gate, up, n, out);
  }
  void add_bias(float* x, const float* bias, size_t n_tokens, size_t dim) override {
    cpu::detail::add_bias(ctx_, x, bias, n_tokens, dim);
  }
  void rope(float* x, size_t n_tokens, uint32_t n_heads, const int32_t* positions, const RopeParams& p) override {
    cpu::detail::rope(ctx_, x, n_tokens, n_heads, positions, p);
  }
  void attention(const float* q, const float* k_cache, const float* v_cache, size_t n_past, size_t n_tokens,
                 const AttentionParams& p, float* out) override {
    cpu::detail::attention(ctx_, q, k_cache, v_cache, n_past, n_tokens, p, out);
  }
  int32_t sample(const float* logits, size_t vocab, const SamplingParams& params, double u01) override {
    return sample_logits(logits, vocab, params, u01, sampling_scratch_);  // host memory: no copy
  }
  bool supports_f16_kv() const override { return true; }
  void store_f16(uint16_t* dst, const float* src, size_t n) override { cpu::detail::narrow_to_half(src, dst, n); }
  void attention_f16(const float* q, const uint16_t* k_cache, const uint16_t* v_cache, size_t n_past,
                     size_t n_tokens, const AttentionParams& p, float* out) override {
    cpu::detail::attention_f16(ctx_, q, k_cache, v_cache, n_past, n_tokens, p, out);
  }
  void attention_seqs(const AttentionSeq* seqs, size_t n, const AttentionParams& p) override {
    cpu::detail::attention_seqs(ctx_, seqs, n, p);
  }

 private:
  Context ctx_;
  std::unordered_set<float*> live_;  // allocations freed with the backend
  std::vector<cpu::detail::LinearJob> jobs_;  // linear_group's jobs, reused between calls
};

}  // namespace

void Backend::store_f16(uint16_t*, const float*, size_t) {
  throw Error("this backend has no f16 KV cache (use --kv-dtype f32)");
}
void Backend::attention_f16(const float*, const uint16_t*, const uint16_t*, size_t, size_t, const AttentionParams&,
                            float*) {
  throw Error("this backend has no f16 KV cache (use --kv-dtype f32)");
}

void Backend::attention_seqs(const AttentionSeq* seqs, size_t n, const AttentionParams& p) {
  for (size_t i = 0; i < n; ++i) {
    const AttentionSeq& s = seqs[i];
    if (s.k16) attention_f16(s.q, s.k16, s.v16, s.n_past, s.n_tokens, p, s.out);
    else attention(s.q, s.k_cache, s.v_cache, s.n_past, s.n_tokens, p, s.out);
  }
}

std::unique_ptr<Backend> make_cpu_backend(const cpu::Options& options) {
  return std::make_unique<CpuBackend>(options);
}

std::unique_ptr<Backend> make_cpu_backend(int n_threads) {
  cpu::Options options;
  options.n_threads = n_threads;
  return make_cpu_backend(options);
}

std::unique_ptr<Backend> make_exact_cpu_backend(int n_threads) {
  cpu::Options options;
  options.n_threads = n_threads;
  options.exact = true;
  return make_cpu_backend(options);
}

}  // namespace endor
