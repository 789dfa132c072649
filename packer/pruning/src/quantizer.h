// Internal to endor_pruning: the quantizer SparseGPT/GPTQ's column sweep asks (sparsegpt.cpp).
// One object per sparsegpt_prune call, built from the options' QuantSpec, owns everything about the
// stored form: when each row's or group's parameters are chosen (from the input W, from the whole
// matrix before the sweep, or as the sweep reaches a group), the code and stored value of one
// weight, and writing its parameters and codes into the SparseGptResult. The sweep itself only
// orders columns, prunes, and feeds back the error of whatever value the quantizer returns.
//
// Thread safety: during the sweep, rows run in parallel (OpenMP); reach() and quantize() of a row
// touch only that row's parameters and codes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "endor/pruning.h"

namespace endor::pruning::detail {

class Quantizer {
 public:
  virtual ~Quantizer() = default;
  // After dead inputs are zeroed, before the sweep: parameters chosen for the whole matrix at once
  // (static groups). w [n_out, n_in] in original column order; hdiag [n_in] the Hessian's diagonal
  // (int4's range search weights); fixed_mask as SparseGptOptions::fixed_mask (nullable).
  virtual void choose_static(const float* /*w*/, const float* /*hdiag*/, const uint8_t* /*fixed_mask*/) {}
  // Row r's sweep has reached working column c (row: the row's current weights in working order,
  // mask: its pruning decisions so far). Parameters chosen as groups are reached are chosen here.
  virtual void reach(size_t /*r*/, size_t /*c*/, const float* /*row*/, const uint8_t* /*mask*/) {}
  // The stored value of x, the weight at row r, working column c, original column oc; its code is
  // written into the result. Identity without quantization.
  virtual float quantize(size_t r, size_t c, size_t oc, float x) = 0;
};

// The quantizer of opt.quant for w [n_out, n_in] (the input weights: int8's row scales are taken
// from them here, before anything else changes w). Allocates res's parameter and code buffers and
// sets res.dtype and res.group_size. Static groups: int4 when Int4k, act_order, static_groups or a
// fixed mask; int8g when act_order or static_groups (columns not reached in group order).
std::unique_ptr<Quantizer> make_quantizer(const SparseGptOptions& opt, size_t n_out, size_t n_in, const float* w,
                                          SparseGptResult& res);

}  // namespace endor::pruning::detail
