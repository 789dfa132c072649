// Dense f32 GEMM y = x·aᵀ for prefill: oneDNN matmul when the build has it, else the built-in
// blocked kernel (WeightKernels::dense_dot) split over row blocks with OpenMP.
#include <omp.h>

#include <algorithm>

#include "context.h"

#ifdef ENDOR_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace endor::cpu::detail {

#ifdef ENDOR_HAVE_DNNL
class OneDnnGemm {
 public:
  OneDnnGemm() : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {}
  void run(const float* x, size_t n_tokens, size_t k_dim, const float* a, size_t n_rows, float* y, size_t ldy) {
    using dnnl::memory;
    const auto f32 = memory::data_type::f32;
    const memory::dim T = memory::dim(n_tokens), K = memory::dim(k_dim), N = memory::dim(n_rows);
    // a is [N, K] row-major = the K×N weights matrix with strides (1, K); y has row stride ldy.
    const memory::desc src_md({T, K}, f32, memory::dims{K, 1});
    const memory::desc wei_md({K, N}, f32, memory::dims{1, K});
    const memory::desc dst_md({T, N}, f32, memory::dims{memory::dim(ldy), 1});
    // oneDNN keeps its own primitive cache, so re-creating the primitive per call is a lookup.
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src_md, wei_md, dst_md), engine_);
    memory src(src_md, engine_, const_cast<float*>(x));
    memory wei(wei_md, engine_, const_cast<float*>(a));
    memory dst(dst_md, engine_, y);
    dnnl::matmul(pd).execute(stream_, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}});
    stream_.wait();
  }

 private:
  dnnl::engine engine_;
  dnnl::stream stream_;
};
#else
class OneDnnGemm {};
#endif

Context::Context(const Options& opts)
    : options(opts),
      n_threads(opts.n_threads > 0 ? opts.n_threads : omp_get_max_threads()),
      pool(n_threads) {
  kernels = &select_kernels(options.isa);
  isa = resolve_isa(options.isa);
#ifdef ENDOR_HAVE_DNNL
  if (options.gemm == GemmImpl::Auto) onednn = std::make_unique<OneDnnGemm>();
#endif
}
Context::~Context() = default;

float* ScratchBuffer::floats(size_t n) {
  if (n > capacity_) {
    const size_t bytes = ((std::max<size_t>(n, 16) * sizeof(float)) + 63) / 64 * 64;
    float* p = static_cast<float*>(std::aligned_alloc(64, bytes));
    if (!p) throw Error("cpu backend: out of memory allocating " + std::to_string(bytes) + " bytes of scratch");
    data_.reset(p);
    capacity_ = bytes / sizeof(float);
  }
  return data_.get();
}

size_t rows_per_task(uint64_t rows, int n_threads, size_t min_rows) {
  const uint64_t tasks = uint64_t(std::max(1, n_threads)) * 8;
  return size_t(std::max<uint64_t>(min_rows, (rows + tasks - 1) / tasks));
}

void gemm_xat(Context& ctx, const float* x, size_t n_tokens, size_t k_dim, const float* a, size_t n_rows,
              float* y, size_t ldy) {
  if (n_tokens == 0 || n_rows == 0) return;
  ctx.pool.park();  // the GEMM runs on OpenMP's threads: the pool's must not spin beside them
#ifdef ENDOR_HAVE_DNNL
  if (ctx.onednn) {
    // oneDNN's OpenMP runtime sizes its team from the calling thread's nthreads-var.
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads_for(n_rows * k_dim * n_tokens, ctx.n_threads));
    try {
      ctx.onednn->run(x, n_tokens, k_dim, a, n_rows, y, ldy);
    } catch (const dnnl::error& e) {
      omp_set_num_threads(saved);
      throw Error(std::string("cpu backend: oneDNN matmul failed: ") + e.what());
    }
    omp_set_num_threads(saved);
    return;
  }
#endif
  const size_t block = 16;
  const int64_t n_blocks = int64_t((n_rows + block - 1) / block);
  const WeightKernels& k = *ctx.kernels;
#pragma omp parallel for num_threads(threads_for(n_rows * k_dim * n_tokens, ctx.n_threads)) schedule(dynamic, 1)
  for (int64_t b = 0; b < n_blocks; ++b) {
    const size_t n0 = size_t(b) * block, nb = std::min(block, n_rows - n0);
    k.dense_dot(a + n0 * k_dim, k_dim, nb, k_dim, x, k_dim, n_tokens, y + n0, ldy);
  }
}

}  // namespace endor::cpu::detail
