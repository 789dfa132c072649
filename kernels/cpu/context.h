// Internal to endor_kernels: the state a CPU backend owns (thread count, chosen kernels, reusable
// scratch, the oneDNN engine) and the entry points of the linear paths built on it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "endor/kernels.h"
#include "thread_pool.h"
#include "weight_kernels.h"

namespace endor::cpu::detail {

// 64-byte aligned float storage that only grows: steady-state calls allocate nothing.
class ScratchBuffer {
 public:
  float* floats(size_t n);  // at least n floats, contents unspecified
 private:
  struct Free { void operator()(float* p) const { std::free(p); } };
  std::unique_ptr<float, Free> data_;
  size_t capacity_ = 0;
};

// One Linear of a linear_group: y[T, rows] = x·wᵀ (+ bias[rows] when non-null).
struct LinearJob {
  const TensorView* w = nullptr;
  const float* bias = nullptr;
  float* y = nullptr;
};
// Rows [r0, r1) of one job: a task of linear_group's parallel loop.
struct LinearGroupTask {
  const LinearJob* job;
  uint64_t r0, r1;
};

class OneDnnGemm;  // defined in gemm.cpp when built with oneDNN

struct Context {
  explicit Context(const Options& options);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  Options options;
  int n_threads = 1;
  const WeightKernels* kernels = nullptr;
  Isa isa = Isa::Portable;  // the instruction set of `kernels` (and of attention's decode kernel)
  ScratchBuffer panel_scratch;   // PanelGemm: one decoded row panel [rows, in]
  ScratchBuffer thread_scratch;  // RowDecode: a few decoded rows per thread
  ScratchBuffer attn_scratch;    // attention scores, per thread
  ScratchBuffer attn_v_scratch;  // prefill attention: V transposed per kv head
  ScratchBuffer act_scratch;     // int8 activations: the quantized x (QuantizedX)
  ScratchBuffer xhat_scratch;    // int8 activations on non-fused paths: x̂ = d·q as f32
  ScratchBuffer half_x_scratch;  // f16 activations: x rounded to f16 (uint16 bits)
  ScratchBuffer half_x_wide_scratch;  // and those values widened to f32 for token blocks (linear.cpp)
  ScratchBuffer kv_k_scratch;    // f16 KV cache: the keys attention reads, widened to f32
  ScratchBuffer kv_v_scratch;    // and the values
  std::vector<uint8_t> half_ok;  // f16 activations: whether each token of the call fits f16
  std::vector<uint64_t> attn_queries;  // attention_seqs' queries, reused between calls
  std::vector<LinearGroupTask> group_tasks;  // linear_group's task list, reused between calls
  std::unique_ptr<OneDnnGemm> onednn;  // null when not built with oneDNN or gemm == Builtin
  ThreadPool pool;                     // n_threads threads (the caller's included) for every parallel loop
};

// The path linear() takes for this weight and token count (Options::linear_path unless Auto).
LinearPath choose_linear_path(const Context&, const TensorLayout&, size_t n_tokens);
// y[T, out] = x[T, in]·Wᵀ (+ bias[out] when non-null), all host memory.
void linear(Context&, const TensorView& w, const float* x, size_t n_tokens, const float* bias, float* y);
// The jobs' results as linear() gives them, all of one input x[T, in] (every job's cols = in).
// When every job takes the fused path (any T, in blocks of 8 tokens) their row chunks share one
// parallel region; otherwise one linear() each.
void linear_group(Context&, const LinearJob* jobs, size_t n_jobs, const float* x, size_t n_tokens);
// y[t·ldy + n] = Σ_k x[t·k_dim + k]·a[n·k_dim + k] for n < n_rows, t < n_tokens (a GEMM x·aᵀ).
void gemm_xat(Context&, const float* x, size_t n_tokens, size_t k_dim, const float* a, size_t n_rows,
              float* y, size_t ldy);
// Threads worth waking for `work` scalar operations: below ~64K a parallel region's wake-up and
// barrier cost more than they save (and on a loaded machine far more).
inline int threads_for(uint64_t work, int n_threads) { return work < (uint64_t(1) << 16) ? 1 : n_threads; }
// Rows per parallel task: enough tasks per thread to balance, enough rows to amortise.
size_t rows_per_task(uint64_t rows, int n_threads, size_t min_rows = 4);

}  // namespace endor::cpu::detail
