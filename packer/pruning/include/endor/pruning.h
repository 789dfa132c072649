// Calibrated pruning of one Linear layer: magnitude, Wanda and SparseGPT (optionally with joint
// int8/int8g/int4/int4k quantization, and GPTQ as SparseGPT with nothing pruned), as pure functions
// over f32 matrices. What they compute is described in docs/algorithms.md, "Pruning" and
// "Quantization"; deliberate departures from the published methods are marked "Differs:".
//
// Shapes (all row-major f32, nn.Linear convention):
//   W   [n_out, n_in]   weight, row = output channel
//   X   [n_tokens, n_in] activations entering the layer (one or more calibration samples)
//   H   [n_in, n_in]     SparseGPT Hessian, symmetric
//   mask [n_out, n_in]   uint8, 1 = pruned; a pruned weight is exactly +0 afterwards
//
// Errors: bad arguments (sizes, ratios, non-finite values, a Hessian that is not positive
// definite after dampening) throw endor::Error with one line saying what is wrong; nothing here
// calls exit(). Thread safety: free functions are reentrant; an accumulator is single-writer.
// The calibration driver (running the model block by block) lives in the packer, not here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "endor/dtype.h"

namespace endor::pruning {

// How much to prune: an unstructured fraction, or N of every M consecutive input columns.
struct SparsityTarget {
  double ratio = 0.0;     // unstructured: fraction in [0, 1) (double, as the references' Python)
  uint32_t n = 0, m = 0;  // N:M when m != 0: 1 <= n < m, and m must divide n_in

  static SparsityTarget unstructured(double ratio) { return {ratio, 0, 0}; }
  static SparsityTarget n_of_m(uint32_t n, uint32_t m) { return {0.0, n, m}; }
  bool is_n_of_m() const { return m != 0; }
};

// ---- calibration statistics (fed one batch at a time by the calibration driver) ----------

// Wanda's per-input-column activation energy, updated exactly as wanda lib/layerwrapper.py
// WrappedGPT.add_batch does, in f32:
//   scaler_row *= n/(n+b);  n += b;  scaler_row[j] += ||X[:, j]||² / n
// where b counts calibration SAMPLES in the batch (rows of the reference's 3-D [b, seq, in]
// input), not tokens. So scaler_row[j] = Σ_tokens x_j² / n_samples: a per-sample (not
// per-token) mean. The factor is the same for every column, so masks do not depend on it.
// ||X_j||² is summed in double here (the reference sums in f32, in an unspecified order), then
// rounded, square-rooted and squared in f32 as the reference does.
class WandaStats {
 public:
  explicit WandaStats(size_t n_in);
  // x: [n_tokens, n_in], the activations of n_samples samples (the reference hooks one sample of
  // seq_len tokens per call: n_samples = 1). n_in must match the constructor's.
  void add_batch(const float* x, size_t n_tokens, size_t n_in, size_t n_samples = 1);
  const std::vector<float>& scaler_row() const { return scaler_row_; }  // [n_in]
  size_t n_in() const { return scaler_row_.size(); }
  uint64_t n_samples() const { return n_samples_; }

 private:
  std::vector<float> scaler_row_;
  uint64_t n_samples_ = 0;
};

// SparseGPT's running Hessian (sparsegpt.py SparseGPT.add_batch), f32:
//   H *= n/(n+b);  n += b;  Xs = sqrt(2/n)·X;  H += Xsᵀ·Xs
// b counts samples as in WandaStats. Cost per batch: n_tokens·n_in² flops (BLAS ssyrk);
// memory: n_in² floats, held for the accumulator's lifetime.
class HessianAccumulator {
 public:
  explicit HessianAccumulator(size_t n_in);
  // x: [n_tokens, n_in] activations of n_samples samples; n_in must match the constructor's.
  void add_batch(const float* x, size_t n_tokens, size_t n_in, size_t n_samples = 1);
  const std::vector<float>& hessian() const;  // [n_in, n_in], both triangles set
  size_t n_in() const { return n_in_; }
  uint64_t n_samples() const { return n_samples_; }

 private:
  size_t n_in_;
  // add_batch updates the upper triangle only; hessian() mirrors it once when asked (a mirror per
  // batch cost as much as a quarter of the batch's ssyrk at 128-token windows).
  mutable std::vector<float> h_;
  mutable bool mirrored_ = true;
  std::vector<float> scaled_;  // scratch: sqrt(2/n)·X
  uint64_t n_samples_ = 0;
};

// ---- stored quantizers (must equal the container encodings code for code) ---------------
// Rounding is half away from zero (std::round) for both schemes, and dequantization is the
// unfused q·scale (+ min): these functions are compiled with -ffp-contract=off.

// int8, one symmetric scale per output row: s = max(max|w_row|, 1e-5)/127.
float int8_row_scale(const float* row, size_t n);
// clamp(round(w/s), -127, 127).
int8_t int8_code(float w, float scale);
float int8_value(int8_t code, float scale);  // code·s
// int8g (SPEC.md §7.5): a group's f16 scale is the container's int8g_scale(amax) (format.h); the
// code of w on the widened scale s is int8_code(w, s), 0 when s = 0.
int8_t int8g_code(float w, float scale);

// int4, asymmetric per (row, group of group_size consecutive input columns): the container
// encoder's grid over the group's [mn, mx] (endor::int4_grid, SPEC.md §7.2: the range widened to
// hold 0, min = −z·scale for an integer z, so code z is exactly 0), as f16 BEFORE codes are
// chosen. Differs: FlexGen's grid spans exactly [mn, mx] with a float min; this one has the
// same half-step error bound for a group of both signs (the step up to 1.6 % coarser) and spans
// from 0 for a group of one sign, and lets the CPU kernels multiply a bitmap word as dense. Values beyond the f16 range (|x| > 65504) throw, as in the container encoder.
struct Int4GroupParams {
  uint16_t scale_f16 = 0, min_f16 = 0;  // what the container stores
  float scale = 1.0f, min = 0.0f;       // the same values widened to f32
};
Int4GroupParams int4_group_params(const float* x, size_t n);
// clamp(round((x − min)/scale), 0, 15).
uint8_t int4_code(float x, const Int4GroupParams&);
float int4_value(uint8_t code, const Int4GroupParams&);  // code·scale + min

// The quantizers are the container's dtypes (endor/dtype.h), as the packer names them:
//   Int8   int8 codes, one scale per row (above);
//   Int4   int4 codes on int4_grid's zero-code grid per (row, group) (above);
//   Int4k  int4 whose group parameters are six-bit codes under f16 super-block scales (SPEC.md
//          §6.7): a float minimum (no zero code), chosen for every group before any column is
//          quantized (GPTQ's static groups: a super-block spans 8 groups, which may lie in later
//          columns);
//   Int8g  int8 codes with an f16 scale per group (SPEC.md §6.8), each group's scale from its
//          entries (not yet pruned) as they stand when the loop reaches the group (GPTQ's
//          non-static groups), or from the input W with act_order.
struct QuantSpec {
  Quantization dtype;         // nullopt: no quantization; else Int8, Int8g, Int4 or Int4k
  uint32_t group_size = 128;  // the grouped dtypes (is_grouped): consecutive input columns per group
  // Int4/Int4k: choose each group's range by a search that minimises its (column-weighted)
  // squared rounding error instead of spanning [min, max] (clipping outliers where that pays).
  bool mse_clip = false;
};

// Per (row, group) int4 parameters chosen for a whole matrix at once (static groups), as stored:
//   Int4:  f16 scale and min (zero-code grid, SPEC.md §7.2, optionally range-searched);
//   Int4k: the super-block f16 (d, dmin) pairs and (sc, mc) codes (SPEC.md §6.7).
// scales/mins hold the decoded f32 values either way, [n_out · groups_per_row].
struct StaticInt4Params {
  Dtype dtype = Dtype::Int4;  // Int4 or Int4k
  uint32_t group_size = 0;
  size_t groups_per_row = 0;
  std::vector<float> scales, mins;
  std::vector<uint16_t> scales_f16, mins_f16;          // Int4
  std::vector<uint16_t> super_scales_f16;              // Int4k: [ceil(n_params/8) · 2]
  std::vector<uint8_t> param_codes;                    // Int4k: [n_params · 2] (sc, mc)
};
// w [n_out, n_in]; col_weight [n_in] (>= 0, e.g. the Hessian's diagonal) weights each column's
// squared error in the range search, nullptr = all 1; pruned [n_out, n_in] (nullable, 1 = pruned)
// leaves those entries out of every group's range (a group with none left: scale and min 0).
// Throws on non-finite or |w| > 65504.
StaticInt4Params choose_int4_params(const float* w, size_t n_out, size_t n_in, const QuantSpec&, const float* col_weight,
                                    const uint8_t* pruned = nullptr);
// The code of x on a parameter pair: clamp(round((x − min)/scale), 0, 15), 0 when scale is 0.
uint8_t int4_code_on(float x, float scale, float min);

// ---- pruning -----------------------------------------------------------------------------

// Magnitude (wanda lib/prune.py prune_magnitude). Unstructured: one threshold over the whole
// matrix, thresh = sorted(|W|)[int(numel·ratio)], prune |W| <= thresh (ties at the threshold are
// all pruned, as the reference). N:M: the n smallest |W| of each group. Zeroes w in place and
// returns the mask.
std::vector<uint8_t> magnitude_prune(float* w, size_t n_out, size_t n_in, const SparsityTarget&);

// Wanda (wanda lib/prune.py prune_wanda): score S_ij = |W_ij|·sqrt(scaler_row_j) in f32; no
// weight update. Unstructured: in every row the int(n_in·ratio) lowest scores are pruned, ties
// broken by column index (a stable sort, as torch.sort(stable=True)) -- so the mask equals the
// reference's exactly for equal scores. N:M: in every group of m consecutive columns of a row,
// the n lowest scores; ties broken by lower column index. (The reference's torch.topk
// (largest=False) leaves the order of equal scores unspecified -- its CPU path uses
// std::nth_element -- so on exact ties the two masks may pick different but equally-scored
// weights.) scaler_row: [n_in], e.g. WandaStats::scaler_row(). Zeroes w in place; returns mask.
std::vector<uint8_t> wanda_prune(float* w, size_t n_out, size_t n_in, const float* scaler_row,
                                 const SparsityTarget&);

struct SparseGptOptions {
  // unstructured(0) prunes nothing: GPTQ (quantization with OBS error feedback only).
  SparsityTarget target = SparsityTarget::unstructured(0.5);
  size_t block_size = 128;  // columns per lazy-update block; an N:M m must divide it
  float percdamp = 0.01f;   // H += percdamp·mean(diag H)·I
  // Joint quantization of the kept weights (None: prune only). The sweep asks one quantizer object
  // built from this, act_order, static_groups and fixed_mask (src/quantizer.h) for each kept
  // weight's stored value; the quantizer chooses the row and group parameters (up front, static,
  // or as the sweep reaches a group) and writes them and the codes into the result.
  QuantSpec quant;
  // GPTQ's --act-order: columns processed in order of decreasing Hessian diagonal (the inputs with
  // the most activation energy first, while the most columns remain to absorb their error). Implies
  // static groups. Not with N:M (whose groups are consecutive columns).
  bool act_order = false;
  // Every group's int4 parameters chosen from the input W before any column is quantized (always
  // so for Int4k and with act_order), instead of from the updated W when a group is reached.
  bool static_groups = false;
  // A mask decided already ([n_out, n_in], 1 = pruned; e.g. by a first, pruning-only pass): no
  // pruning decision is made, these weights become 0 with error feedback like pruned ones, the
  // target is ignored, and int4 groups are static, their ranges over the kept weights only
  // (joint SparseGPT's ranges also span the weights it prunes later). Must outlive the call.
  const uint8_t* fixed_mask = nullptr;
};

// The outcome for one layer. `w` itself (the caller's buffer) holds the final weights.
//   mask            [n_out, n_in]  1 = pruned (weight exactly +0)
//   Int8:      row_scales   [n_out]                 f32, computed on the input W (see below)
//              int8_codes   [n_out, n_in]           int8 in [-127, 127]; 0 where pruned
//   Int8g:     group_scales_f16 [n_out, ceil(n_in/G)] f16 bits; int8_codes as Int8
//   Int4:      group_scales_f16, group_mins_f16
//                           [n_out, ceil(n_in/G)]   f16 bits, group g = columns [g·G, g·G+G)
//              int4_codes   [n_out, n_in]           one code 0..15 per byte (unpacked); 0 where pruned
//   Int4k:     super_scales_f16, param_codes; int4_codes as Int4
// For every kept weight, w == int8_value(code, row_scales[r]) or
// int4_value(code, {group_scales_f16, group_mins_f16}) bit for bit, so a container encoder given
// these parameters and codes stores exactly what the algorithm chose.
struct SparseGptResult {
  std::vector<uint8_t> mask;
  Quantization dtype;       // the options' QuantSpec::dtype
  uint32_t group_size = 0;  // the grouped dtypes
  std::vector<float> row_scales;
  std::vector<int8_t> int8_codes;
  std::vector<uint16_t> group_scales_f16, group_mins_f16;
  std::vector<uint8_t> int4_codes;
  std::vector<uint16_t> super_scales_f16;  // Int4k: (d, dmin) per super-block of 8 parameters
  std::vector<uint8_t> param_codes;        // Int4k: (sc, mc) per (row, group)
  double loss = 0.0;  // the reference's Σ (w−q)²/d² / 2 over the layer (for logs)
};

// SparseGPT (sparsegpt.py fasterprune), f32 throughout, on w [n_out, n_in] in place, with the
// Hessian h [n_in, n_in] (read only; copied). Steps, as the reference:
//  1. Int8: row scales from the input W, before anything else (quantizer.find_params(W)).
//  2. Dead inputs (H_jj == 0): H_jj = 1, W[:, j] = 0. Dampen the diagonal by percdamp·mean(diag).
//  3. U = upper Cholesky factor of H⁻¹, as chol(H) -> cholesky_inverse -> chol(upper)
//     (LAPACK spotrf, spotri, spotrf).
//  4. Blocks of block_size columns. Unstructured: per block, score = W²/diag(U)² over all rows ×
//     block columns of the block-start W, thresh = sorted(score)[int(numel·ratio)], pruned where
//     score <= thresh. N:M: at every group start, score the next m columns of the UPDATED W and
//     prune the n smallest per row (ties: lower column).
//  5. Per column c: q = pruned ? 0 : quant(w) (quant = identity without a dtype),
//     err = (w − q)/U_cc, later columns of the block -= err·U[c, ...]; after the block,
//     W[:, end:] −= Err·U[block, end:] (BLAS sgemm).
// Int4 params of group g are computed when the loop reaches its first column, over ALL
// entries of that row's group in the current W (columns inside the block already carry this
// block's updates, later blocks' columns the updates of earlier blocks). The pruning decisions
// for the group's later columns are not known then, so pruned entries take part in min/max.
// Differs: GPTQ's groupsize path reads the group from W, which for a group starting mid-block
// lacks that block's in-block updates; we use the updated values (they are what gets quantized).
// Cost: ~(4/3)·n_in³ flops for step 3, ~n_out·n_in·(n_in + block_size) for steps 4-5;
// memory n_in² + n_out·block_size floats. Uses OpenMP threads over rows and BLAS/LAPACK threads.
SparseGptResult sparsegpt_prune(float* w, size_t n_out, size_t n_in, const float* h,
                                const SparseGptOptions&);

// Threads for everything above: OpenMP (the row loops) and the BLAS/LAPACK library (its own
// threads). n <= 0 leaves them at their defaults (every core).
void set_threads(int n);

}  // namespace endor::pruning
