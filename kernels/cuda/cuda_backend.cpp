// The CUDA Backend: device memory, device-resident compressed weights, and the kernels of
// decode.cu / fused_linear*.cu / ops.cu / attention.cu / sampling.cu behind the Backend interface; plus the
// cuda:: helpers of cuda_backend.h (whole-tensor decode, timing, copy bandwidth).
#include "endor/cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <unordered_set>
#include <vector>

#include "context.h"
#include "cuda_check.h"

namespace endor {

namespace cuda::detail {

[[noreturn]] void throw_cuda_error(const char* library, const char* message, int code, const char* statement,
                                   const char* file, int line) {
  throw Error(std::string(library) + " error: " + message + " (code " + std::to_string(code) + ") in `" +
              statement + "` at " + file + ":" + std::to_string(line));
}

}  // namespace cuda::detail

bool cuda_device_available(std::string* why) {
  int n = 0;
  const cudaError_t status = cudaGetDeviceCount(&n);
  if (status != cudaSuccess) {
    if (why) *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(status);
    cudaGetLastError();  // clear the error so later calls start clean
    return false;
  }
  if (n == 0) {
    if (why) *why = "cudaGetDeviceCount: 0 devices";
    return false;
  }
  return true;
}

namespace {

using cuda::detail::Context;
using cuda::detail::Dense;
using cuda::detail::DeviceWeight;
using cuda::detail::Values;

// The one mapping from the container's dtypes (endor/dtype.h) to the kernels' mirror of them
// (launch.h, which the .cu files read instead of format.h): a Values kind, and for int4k the I4
// kernels with coded group parameters (DeviceWeight::int4_coded).
struct KernelForm {
  Values values;
  bool int4_coded;
};
constexpr KernelForm kernel_form(Dtype d) {
  switch (d) {
    case Dtype::F16: return {Values::F16, false};
    case Dtype::BF16: return {Values::BF16, false};
    case Dtype::F32: return {Values::F32, false};
    case Dtype::Int8: return {Values::I8, false};
    case Dtype::Int8g: return {Values::I8G, false};
    case Dtype::Int4: return {Values::I4, false};
    case Dtype::Int4k: return {Values::I4, true};
  }
  return {Values::F32, false};
}
// Values mirrors ValueType kind for kind, and int4_coded is Int4Params::Coded6, for every dtype: a
// dtype added to the format and not here, or a reordered mirror, fails to compile.
constexpr bool kernel_forms_mirror_the_format() {
  for (Dtype d : kAllDtypes) {
    const KernelForm f = kernel_form(d);
    if (uint8_t(f.values) != uint8_t(value_type_of(d)) || f.int4_coded != (int4_params_of(d) == Int4Params::Coded6))
      return false;
  }
  return true;
}
static_assert(kernel_forms_mirror_the_format(), "launch.h's Values/int4_coded must mirror endor::Dtype");

bool same_layout(const TensorLayout& a, const TensorLayout& b) {
  return a.encoding == b.encoding && a.value_type == b.value_type && a.rows == b.rows && a.cols == b.cols &&
         a.nnz == b.nnz && a.group_size == b.group_size && a.words_per_row == b.words_per_row &&
         a.blocks_per_row == b.blocks_per_row && a.groups_per_row == b.groups_per_row &&
         a.bitmap_offset == b.bitmap_offset && a.bitmap_bytes == b.bitmap_bytes && a.index_offset == b.index_offset &&
         a.index_bytes == b.index_bytes && a.values_offset == b.values_offset && a.values_bytes == b.values_bytes &&
         a.scales_offset == b.scales_offset && a.scales_bytes == b.scales_bytes && a.mins_offset == b.mins_offset &&
         a.mins_bytes == b.mins_bytes && a.total_bytes == b.total_bytes;
}

// Checks what the kernels rely on: a layout that is exactly the format's for its shape (so every
// section lies inside the blob), 32-bit row/column counts, and index entries that never decrease
// nor exceed nnz (O(rows·blocks)). Bitmap popcounts are validate_bitmap()'s job (the caller's).
void check_weight(const TensorView& v) {
  const TensorLayout& L = v.layout;
  const std::string what = v.info ? "tensor " + v.info->name : std::string("weight");
  if (!v.data) throw Error("cuda backend: " + what + " has no data");
  if (L.rows == 0 || L.cols == 0) throw Error("cuda backend: " + what + " has an empty shape");
  if (L.rows > uint64_t(INT32_MAX) || L.cols > uint64_t(INT32_MAX))
    throw Error("cuda backend: " + what + " has more than 2^31-1 rows or columns");
  if ((L.rows * ((L.cols + cuda::detail::kBlockCols - 1) / cuda::detail::kBlockCols)) > uint64_t(INT32_MAX))
    throw Error("cuda backend: " + what + " has more than 2^31-1 column blocks");
  TensorLayout expect;
  try {
    expect = compute_layout({L.rows, L.cols}, L.encoding, L.value_type, L.group_size, L.nnz, L.int4_params);
  } catch (const Error& e) {
    throw Error("cuda backend: " + what + " has an invalid layout: " + e.what());
  }
  if (!same_layout(L, expect)) throw Error("cuda backend: " + what + " layout does not match its shape and encoding");
  if (L.encoding != Encoding::Bitmap) return;
  const uint64_t n = L.rows * L.blocks_per_row;
  uint64_t prev = 0;
  for (uint64_t i = 0; i < n; ++i) {
    uint32_t e;
    std::memcpy(&e, v.data + L.index_offset + 4 * i, 4);
    if (e < prev || e > L.nnz)
      throw Error("cuda backend: " + what + " bitmap index entry " + std::to_string(i) + " is out of order or past nnz");
    prev = e;
  }
}

class CudaWeight final : public Weight {
 public:
  CudaWeight(const TensorLayout& layout, int device) : layout_(layout), device_(device) {}
  ~CudaWeight() override {
    if (blob_ && owned_) cudaFree(blob_);
  }
  CudaWeight(const CudaWeight&) = delete;
  CudaWeight& operator=(const CudaWeight&) = delete;

  const TensorLayout& layout() const override { return layout_; }
  const DeviceWeight& device_weight() const { return dw_; }
  int device() const { return device_; }

  // Copies the blob to the device once (on `stream`, waited for) and points dw_ at its sections.
  void upload(const uint8_t* host_blob, cudaStream_t stream) {
    const TensorLayout& L = layout_;
    CUDA_CHECK(cudaMalloc(&blob_, (L.total_bytes + 16 + 255) / 256 * 256));
    owned_ = true;
    CUDA_CHECK(cudaMemcpyAsync(blob_, host_blob, L.total_bytes, cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    bind(blob_);
  }

  // Points dw_ at the sections of a blob at `device_blob` that someone else owns (a streaming slot).
  void attach(const void* device_blob) {
    blob_ = const_cast<void*>(device_blob);
    owned_ = false;
    bind(blob_);
  }

 private:
  void bind(const void* device_blob) {
    const TensorLayout& L = layout_;
    const uint8_t* base = static_cast<const uint8_t*>(device_blob);
    auto section = [&](uint64_t offset, uint64_t bytes) { return bytes ? base + offset : nullptr; };
    const KernelForm form = kernel_form(L.dtype());
    dw_.values_type = form.values;
    dw_.bitmap = L.encoding == Encoding::Bitmap;
    dw_.rows = uint32_t(L.rows);
    dw_.cols = uint32_t(L.cols);
    dw_.words_per_row = uint32_t(L.words_per_row);
    dw_.blocks_per_row = uint32_t(L.blocks_per_row);
    dw_.groups_per_row = uint32_t(L.groups_per_row);
    dw_.group_size = L.group_size;
    dw_.nnz = L.nnz;
    dw_.bitmap_words = reinterpret_cast<const uint64_t*>(section(L.bitmap_offset, L.bitmap_bytes));
    dw_.index = reinterpret_cast<const uint32_t*>(section(L.index_offset, L.index_bytes));
    dw_.values = section(L.values_offset, L.values_bytes);
    if (form.values == Values::I8) dw_.row_scales = reinterpret_cast<const float*>(section(L.scales_offset, L.scales_bytes));
    if (form.values == Values::I4) {
      dw_.group_scales = reinterpret_cast<const uint16_t*>(section(L.scales_offset, L.scales_bytes));
      dw_.group_mins = reinterpret_cast<const uint16_t*>(section(L.mins_offset, L.mins_bytes));
      dw_.int4_coded = form.int4_coded;
    }
    // int8g: one f16 scale per (row, group), in the blob's scales section (uploaded with it).
    if (form.values == Values::I8G)
      dw_.group_scales = reinterpret_cast<const uint16_t*>(section(L.scales_offset, L.scales_bytes));
  }

  TensorLayout layout_;
  int device_;
  void* blob_ = nullptr;
  bool owned_ = false;  // false: blob_ is a streaming slot's memory
  DeviceWeight dw_;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const cuda::Options& options) : ctx_(options) {}
  ~CudaBackend() override {
    cudaSetDevice(ctx_.options.device);  // not activate(): a destructor must not throw
    cudaStreamSynchronize(ctx_.compute);
    for (float* p : live_) cudaFree(p);
    for (void* p : live_bytes_) cudaFree(p);
  }

  Context& context() { return ctx_; }

  std::string name() const override {
    const cudaDeviceProp& p = ctx_.props;
    return "cuda (" + std::string(p.name) + ", sm_" + std::to_string(p.major) + std::to_string(p.minor) + ", " +
           std::to_string(p.multiProcessorCount) + " SMs)";
  }

  // ---- memory ----
  float* alloc(size_t n_floats) override {
    return static_cast<float*>(alloc_bytes(std::max<size_t>(n_floats, 1) * sizeof(float), live_));
  }
  void free(float* p) override {
    if (!p) return;
    if (live_.erase(p) == 0) throw Error("cuda backend: free() of a pointer this backend did not allocate");
    release(p);
  }
  void* alloc_raw(size_t n_bytes) { return alloc_bytes(n_bytes, live_bytes_); }
  void free_raw(void* p) {
    if (!p) return;
    if (live_bytes_.erase(p) == 0) throw Error("cuda backend: free_bytes() of a pointer this backend did not allocate");
    release(p);
  }
  void upload(float* dst, const float* host_src, size_t n) override {
    ctx_.activate();
    // Returns when host_src may be reused, as the interface promises — also for a pinned source,
    // whose copy would otherwise still be in flight. (Per-call inputs use ParamStaging instead.)
    CUDA_CHECK(cudaMemcpyAsync(dst, host_src, n * sizeof(float), cudaMemcpyHostToDevice, ctx_.compute));
    CUDA_CHECK(cudaStreamSynchronize(ctx_.compute));
  }
  void download(float* host_dst, const float* src, size_t n) override { download_raw(host_dst, src, n * sizeof(float)); }
  void download_raw(void* host_dst, const void* src, size_t n_bytes) {
    ctx_.activate();
    CUDA_CHECK(cudaMemcpyAsync(host_dst, src, n_bytes, cudaMemcpyDeviceToHost, ctx_.compute));
    CUDA_CHECK(cudaStreamSynchronize(ctx_.compute));
  }
  void copy(float* dst, const float* src, size_t n) override {
    if (n == 0 || dst == src) return;
    ctx_.activate();
    const size_t bytes = n * sizeof(float);
    if (dst < src + n && src < dst + n) {  // memmove semantics: overlapping ranges go through a bounce buffer
      void* tmp = ctx_.bounce.ensure(bytes, ctx_.compute);
      CUDA_CHECK(cudaMemcpyAsync(tmp, src, bytes, cudaMemcpyDeviceToDevice, ctx_.compute));
      CUDA_CHECK(cudaMemcpyAsync(dst, tmp, bytes, cudaMemcpyDeviceToDevice, ctx_.compute));
    } else {
      CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ctx_.compute));
    }
  }
  void synchronize() override {
    ctx_.activate();
    CUDA_CHECK(cudaStreamSynchronize(ctx_.compute));
  }

  // ---- weights ----
  std::unique_ptr<Weight> prepare_weight(const TensorView& view) override {
    check_weight(view);
    ctx_.activate();
    auto w = std::make_unique<CudaWeight>(view.layout, ctx_.options.device);
    w->upload(view.data, ctx_.copy);
    return w;
  }
  std::unique_ptr<Weight> weight_at(const TensorView& host_view, const void* device_blob) {
    check_weight(host_view);
    if (!device_blob || reinterpret_cast<uintptr_t>(device_blob) % 16 != 0)
      throw Error("cuda backend: a streamed weight's device address must be non-null and 16-byte aligned");
    auto w = std::make_unique<CudaWeight>(host_view.layout, ctx_.options.device);
    w->attach(device_blob);
    return w;
  }

  void embed(const Weight& table, const int32_t* host_ids, size_t n_tokens, float* out) override {
    const DeviceWeight& w = device_weight_of(table);
    for (size_t t = 0; t < n_tokens; ++t)
      if (host_ids[t] < 0 || uint64_t(host_ids[t]) >= w.rows)
        throw Error("embed: token id " + std::to_string(host_ids[t]) + " outside [0, " + std::to_string(w.rows) + ")");
    if (n_tokens == 0) return;
    if (n_tokens * ((w.cols + cuda::detail::kBlockCols - 1) / cuda::detail::kBlockCols) > size_t(INT32_MAX))
      throw Error("embed: " + std::to_string(n_tokens) + " tokens is more than one call takes");
    const int32_t* ids = upload_params(host_ids, n_tokens);
    cuda::detail::launch_decode_rows(w, 0, uint32_t(n_tokens), ids, Dense::F32, out, ctx_.compute);
  }

  void linear(const Weight& weight, const float* x, size_t n_tokens, const float* bias, float* y) override {
    const DeviceWeight& w = device_weight_of(weight);
    cuda::detail::linear(ctx_, w, x, n_tokens, bias, y);
  }

  // ---- elementwise and normalisation ----
  void layer_norm(const float* x, const float* gamma, const float* beta, float eps, size_t n_tokens, size_t dim,
                  float* out) override {
    check_tokens("layer_norm", n_tokens, dim);
    cuda::detail::launch_layer_norm(x, gamma, beta, eps, n_tokens, dim, out, ctx_.compute);
  }
  void rms_norm(const float* x, const float* gamma, float eps, size_t n_tokens, size_t dim, float* out) override {
    check_tokens("rms_norm", n_tokens, dim);
    cuda::detail::launch_rms_norm(x, gamma, eps, n_tokens, dim, out, ctx_.compute);
  }
  void add_rms_norm(float* x, const float* y, const float* gamma, float eps, size_t n_tokens, size_t dim,
                    float* out) override {
    check_tokens("add_rms_norm", n_tokens, dim);
    cuda::detail::launch_add_rms_norm(x, y, gamma, eps, n_tokens, dim, out, ctx_.compute);
  }
  void add(float* x, const float* y, size_t n) override {
    ctx_.activate();
    cuda::detail::launch_add(x, y, n, ctx_.compute);
  }
  void scale(float* x, float s, size_t n) override {
    ctx_.activate();
    cuda::detail::launch_scale(x, s, n, ctx_.compute);
  }
  void relu(float* x, size_t n) override {
    ctx_.activate();
    cuda::detail::launch_relu(x, n, ctx_.compute);
  }
  void silu_mul(const float* gate, const float* up, size_t n, float* out) override {
    ctx_.activate();
    cuda::detail::launch_silu_mul(gate, up, n, out, ctx_.compute);
  }
  void add_bias(float* x, const float* bias, size_t n_tokens, size_t dim) override {
    ctx_.activate();
    cuda::detail::launch_add_bias(x, bias, n_tokens, dim, ctx_.compute);
  }

  // ---- attention ----
  void rope(float* x, size_t n_tokens, uint32_t n_heads, const int32_t* host_positions, const RopeParams& p) override {
    rope_pair(x, n_heads, nullptr, 0, n_tokens, host_positions, p);
  }
  void rope_qk(float* q, uint32_t n_heads, float* k, uint32_t n_kv_heads, size_t n_tokens,
               const int32_t* host_positions, const RopeParams& p) override {
    rope_pair(q, n_heads, k, n_kv_heads, n_tokens, host_positions, p);
  }
  // x's heads and x2's (null with n_heads2 = 0) in one upload of the inputs and one launch.
  void rope_pair(float* x, uint32_t n_heads, float* x2, uint32_t n_heads2, size_t n_tokens,
                 const int32_t* host_positions, const RopeParams& p) {
    const uint32_t head_dim = p.head_dim;
    const uint32_t rotary_dim = p.rotary_dim ? p.rotary_dim : p.head_dim;
    if (head_dim == 0 || rotary_dim > head_dim || rotary_dim % 2 != 0)
      throw Error("rope: rotary_dim " + std::to_string(rotary_dim) + " must be even and <= head_dim " +
                  std::to_string(head_dim));
    if (!p.inv_freq) throw Error("rope: inv_freq table is null");
    if (n_tokens == 0 || n_heads + n_heads2 == 0 || rotary_dim == 0) return;
    ctx_.activate();
    // One scratch upload: positions [n_tokens] int32, then inv_freq [rotary_dim/2] f32 (both 4 bytes).
    const size_t half = rotary_dim / 2;
    std::vector<uint32_t> host(n_tokens + half);
    std::memcpy(host.data(), host_positions, n_tokens * 4);
    std::memcpy(host.data() + n_tokens, p.inv_freq, half * 4);
    const uint32_t* dev = upload_params(host.data(), host.size());
    cuda::detail::launch_rope(x, n_heads, x2, n_heads2, n_tokens, head_dim, rotary_dim,
                              reinterpret_cast<const int32_t*>(dev), reinterpret_cast<const float*>(dev + n_tokens),
                              p.attention_factor, ctx_.compute);
  }

  void attention(const float* q, const float* k_cache, const float* v_cache, size_t n_past, size_t n_tokens,
                 const AttentionParams& p, float* out) override {
    if (p.n_heads == 0 || p.n_kv_heads == 0 || p.head_dim == 0 || p.n_heads % p.n_kv_heads != 0)
      throw Error("attention: n_heads " + std::to_string(p.n_heads) + " must be a positive multiple of n_kv_heads " +
                  std::to_string(p.n_kv_heads) + " and head_dim must be positive");
    if (p.head_dim > cuda::detail::kMaxHeadDim)
      throw Error("attention: head_dim " + std::to_string(p.head_dim) + " exceeds the CUDA kernel's limit of " +
                  std::to_string(cuda::detail::kMaxHeadDim));
    if (n_tokens == 0) return;
    if (n_tokens * p.n_heads > size_t(INT32_MAX))
      throw Error("attention: " + std::to_string(n_tokens) + " queries is more than one call takes");
    ctx_.activate();
    cuda::detail::AttentionShape shape;
    shape.n_heads = p.n_heads;
    shape.n_kv_heads = p.n_kv_heads;
    shape.head_dim = p.head_dim;
    shape.scale = p.scale;
    shape.sliding_window = p.sliding_window;
    cuda::detail::launch_attention(q, k_cache, v_cache, n_past, n_tokens, shape, out, ctx_.compute);
  }

  // ---- sampling ----
  // On the device unless the reference must run (bad parameters: it throws the one-line error)
  // or top-k keeps more than kMaxSampleCandidates (top-k off or large, temperature > 0): then the
  // row is downloaded and sampled on the host (Backend::sample), with the same result.
  int32_t sample(const float* logits, size_t vocab, const SamplingParams& p, double u01) override {
    const bool valid = vocab > 0 && vocab <= size_t(INT32_MAX) && p.temperature >= 0.0f &&
                       std::isfinite(p.temperature) && p.top_p > 0.0f && p.top_p <= 1.0f;
    const size_t keep = p.top_k > 0 && p.top_k < vocab ? p.top_k : vocab;
    if (!valid || (p.temperature > 0.0f && keep > cuda::detail::kMaxSampleCandidates))
      return Backend::sample(logits, vocab, p, u01);
    ctx_.activate();
    auto* id_dev = static_cast<int32_t*>(ctx_.sampled.ensure(sizeof(int32_t), ctx_.compute));
    cuda::detail::launch_sample(logits, uint32_t(vocab), p.temperature, uint32_t(keep), p.top_p, u01, id_dev,
                                ctx_.compute);
    int32_t id = -1;
    download_raw(&id, id_dev, sizeof id);
    return id;
  }

  const DeviceWeight& device_weight_of(const Weight& weight) {
    const auto* cw = dynamic_cast<const CudaWeight*>(&weight);
    if (!cw) throw Error("cuda backend: weight was prepared by another backend");
    if (cw->device() != ctx_.options.device)
      throw Error("cuda backend: weight lives on device " + std::to_string(cw->device()) + ", backend on " +
                  std::to_string(ctx_.options.device));
    ctx_.activate();
    return cw->device_weight();
  }

 private:
  template <typename Set>
  void* alloc_bytes(size_t n_bytes, Set& live) {
    ctx_.activate();
    void* p = nullptr;
    const size_t bytes = (std::max<size_t>(n_bytes, 1) + 255) / 256 * 256;
    const cudaError_t status = cudaMalloc(&p, bytes);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      throw Error("cuda backend: out of device memory allocating " + std::to_string(bytes) + " bytes");
    }
    CUDA_CHECK(status);
    // Zeroed before return, so any stream (another backend's too) may use the memory at once.
    const cudaError_t zeroed = cudaMemsetAsync(p, 0, bytes, ctx_.compute);
    const cudaError_t synced = zeroed == cudaSuccess ? cudaStreamSynchronize(ctx_.compute) : zeroed;
    if (synced != cudaSuccess) cudaFree(p);
    CUDA_CHECK(synced);
    live.insert(static_cast<typename Set::value_type>(p));
    return p;
  }
  void release(void* p) {
    ctx_.activate();
    CUDA_CHECK(cudaStreamSynchronize(ctx_.compute));  // queued work may still use p
    CUDA_CHECK(cudaFree(p));
  }
  void check_tokens(const char* op, size_t n_tokens, size_t dim) {
    if (n_tokens > size_t(INT32_MAX)) throw Error(std::string(op) + ": too many tokens for one call");
    if (n_tokens > 0 && dim == 0) throw Error(std::string(op) + ": dim must be positive");
    ctx_.activate();
  }
  // Device copy of n host values for the next kernel on the compute stream (see ParamStaging).
  template <typename T>
  const T* upload_params(const T* host, size_t n) {
    return static_cast<const T*>(ctx_.params.upload(host, n * sizeof(T), ctx_.compute));
  }

  Context ctx_;
  std::unordered_set<float*> live_;       // alloc(): freed with the backend
  std::unordered_set<void*> live_bytes_;  // cuda::alloc_bytes()
};

CudaBackend& cuda_backend_of(Backend& b) {
  auto* cb = dynamic_cast<CudaBackend*>(&b);
  if (!cb) throw Error("cuda helpers need a backend made by make_cuda_backend, got " + b.name());
  return *cb;
}

void decode_whole(Backend& backend, const Weight& weight, Dense dense, void* out) {
  CudaBackend& b = cuda_backend_of(backend);
  const DeviceWeight& w = b.device_weight_of(weight);
  cuda::detail::launch_decode_rows(w, 0, w.rows, nullptr, dense, out, b.context().compute);
}

}  // namespace

namespace cuda {

void decode_to_f32(Backend& backend, const Weight& w, float* out) { decode_whole(backend, w, Dense::F32, out); }
void decode_to_f16(Backend& backend, const Weight& w, uint16_t* out) { decode_whole(backend, w, Dense::F16, out); }
void decode_to_bf16(Backend& backend, const Weight& w, uint16_t* out) { decode_whole(backend, w, Dense::BF16, out); }

void* compute_stream(Backend& backend) { return cuda_backend_of(backend).context().compute; }
int device_ordinal(Backend& backend) { return cuda_backend_of(backend).context().options.device; }
std::unique_ptr<Weight> make_weight_at(Backend& backend, const TensorView& host_view, const void* device_blob) {
  return cuda_backend_of(backend).weight_at(host_view, device_blob);
}

void* alloc_bytes(Backend& backend, size_t n_bytes) { return cuda_backend_of(backend).alloc_raw(n_bytes); }
void free_bytes(Backend& backend, void* p) { cuda_backend_of(backend).free_raw(p); }
void download_bytes(Backend& backend, void* host_dst, const void* src, size_t n_bytes) {
  cuda_backend_of(backend).download_raw(host_dst, src, n_bytes);
}

DeviceInfo device_info(Backend& backend) {
  const cudaDeviceProp& p = cuda_backend_of(backend).context().props;
  DeviceInfo info;
  info.name = p.name;
  info.sm_count = p.multiProcessorCount;
  info.cc_major = p.major;
  info.cc_minor = p.minor;
  info.global_bytes = p.totalGlobalMem;
  info.l2_bytes = size_t(p.l2CacheSize);
  return info;
}

namespace {

// A pair of events on the compute stream, destroyed on every path out.
struct EventPair {
  cudaEvent_t start = nullptr, stop = nullptr;
  EventPair() {
    CUDA_CHECK(cudaEventCreate(&start));
    const cudaError_t status = cudaEventCreate(&stop);
    if (status != cudaSuccess) cudaEventDestroy(start);
    CUDA_CHECK(status);
  }
  ~EventPair() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
  float elapsed_ms() const {
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    return ms;
  }
};

}  // namespace

double time_device_ms(Backend& backend, const std::function<void()>& work, int n_iters, bool flush_l2) {
  CudaBackend& b = cuda_backend_of(backend);
  Context& ctx = b.context();
  ctx.activate();
  const size_t flush_bytes = 2 * std::max<size_t>(size_t(ctx.props.l2CacheSize), size_t(1) << 20);
  void* flush = flush_l2 ? ctx.l2_flush.ensure(flush_bytes, ctx.compute) : nullptr;
  EventPair events;
  work();  // warm-up: first-launch costs, cuBLAS heuristics, scratch growth
  CUDA_CHECK(cudaStreamSynchronize(ctx.compute));
  std::vector<double> times;
  for (int i = 0; i < std::max(n_iters, 1); ++i) {
    if (flush) CUDA_CHECK(cudaMemsetAsync(flush, i & 0xFF, flush_bytes, ctx.compute));
    CUDA_CHECK(cudaEventRecord(events.start, ctx.compute));
    work();
    CUDA_CHECK(cudaEventRecord(events.stop, ctx.compute));
    times.push_back(events.elapsed_ms());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

double measure_d2d_copy_gbps(Backend& backend, size_t bytes) {
  CudaBackend& b = cuda_backend_of(backend);
  Context& ctx = b.context();
  if (bytes == 0) bytes = size_t(1) << 30;
  void* src = b.alloc_raw(bytes);
  void* dst = nullptr;
  double best_ms = 0.0;
  try {
    dst = b.alloc_raw(bytes);
    best_ms = time_device_ms(
        backend, [&] { CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ctx.compute)); }, 5,
        false);
  } catch (...) {
    b.free_raw(src);
    if (dst) b.free_raw(dst);
    throw;
  }
  b.free_raw(src);
  b.free_raw(dst);
  return 2.0 * double(bytes) / (best_ms * 1e-3) / 1e9;
}

}  // namespace cuda

bool is_cuda_backend(const Backend& backend) { return dynamic_cast<const CudaBackend*>(&backend) != nullptr; }

std::unique_ptr<Backend> make_cuda_backend(const cuda::Options& options) {
  std::string why;
  if (!cuda_device_available(&why)) throw Error("cuda backend: no CUDA device (" + why + ")");
  return std::make_unique<CudaBackend>(options);
}

std::unique_ptr<Backend> make_cuda_backend(int device) {
  cuda::Options options;
  options.device = device;
  return make_cuda_backend(options);
}

}  // namespace endor
