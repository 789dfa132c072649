// The quantizers SparseGPT/GPTQ's sweep asks (quantizer.h): one class per stored form, each with
// the arithmetic the sweep used to select by flags, in the same order (codes equal bit for bit).
#include "quantizer.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "endor/format.h"

namespace endor::pruning::detail {

namespace {

// No quantization: the kept weight stays as the sweep leaves it.
class Identity final : public Quantizer {
 public:
  float quantize(size_t, size_t, size_t, float x) override { return x; }
};

// int8, one symmetric scale per row from the input W (quantizer.find_params(W) runs first).
class Int8Rows final : public Quantizer {
 public:
  Int8Rows(size_t n_out, size_t n_in, const float* w, SparseGptResult& res) : n_in_(n_in), res_(res) {
    res.row_scales.resize(n_out);
    for (size_t r = 0; r < n_out; ++r) res.row_scales[r] = int8_row_scale(w + r * n_in, n_in);
    res.int8_codes.assign(n_out * n_in, 0);
  }
  float quantize(size_t r, size_t, size_t oc, float x) override {
    const int8_t code = int8_code(x, res_.row_scales[r]);
    res_.int8_codes[r * n_in_ + oc] = code;
    return int8_value(code, res_.row_scales[r]);
  }

 private:
  size_t n_in_;
  SparseGptResult& res_;
};

// The shape of a grouped dtype's parameters: [n_out, groups_per_row], group g = columns [g·G, g·G+G).
struct Groups {
  size_t n_out = 0, n_in = 0, group = 0, per_row = 0;
  Groups(size_t n_out_, size_t n_in_, uint32_t group_size)
      : n_out(n_out_), n_in(n_in_), group(group_size), per_row((n_in_ + group_size - 1) / group_size) {}
  size_t index(size_t r, size_t column) const { return r * per_row + column / group; }
  size_t size() const { return n_out * per_row; }
};

// int8 codes with an f16 scale per group: static (each group's scale over its kept entries of the
// input W) or chosen as the sweep reaches a group (over its entries as they stand then, leaving out
// those already marked pruned).
class Int8Groups final : public Quantizer {
 public:
  Int8Groups(const Groups& g, bool statics, SparseGptResult& res) : g_(g), statics_(statics), res_(res) {
    res.group_size = uint32_t(g.group);
    res.group_scales_f16.assign(g.size(), 0);
    scales_.assign(g.size(), 0.0f);
    res.int8_codes.assign(g.n_out * g.n_in, 0);
  }
  void choose_static(const float* w, const float*, const uint8_t* fixed_mask) override {
    if (!statics_) return;
    for (size_t r = 0; r < g_.n_out; ++r)
      for (size_t gi = 0; gi < g_.per_row; ++gi) {
        float amax = 0.0f;
        for (size_t c = gi * g_.group; c < std::min(g_.n_in, (gi + 1) * g_.group); ++c)
          if (!fixed_mask || !fixed_mask[r * g_.n_in + c]) amax = std::max(amax, std::fabs(w[r * g_.n_in + c]));
        set_scale(r * g_.per_row + gi, amax);
      }
  }
  void reach(size_t r, size_t c, const float* row, const uint8_t* mask) override {
    if (statics_ || c % g_.group != 0) return;
    float amax = 0.0f;
    for (size_t k = c; k < std::min(g_.n_in, c + g_.group); ++k)
      if (!mask[k]) amax = std::max(amax, std::fabs(row[k]));
    set_scale(g_.index(r, c), amax);
  }
  float quantize(size_t r, size_t, size_t oc, float x) override {
    const float sc = scales_[g_.index(r, oc)];
    const int8_t code = int8g_code(x, sc);
    res_.int8_codes[r * g_.n_in + oc] = code;
    return int8_value(code, sc);
  }

 private:
  void set_scale(size_t q, float amax) {
    res_.group_scales_f16[q] = int8g_scale(amax);
    scales_[q] = f16_to_f32(res_.group_scales_f16[q]);
  }
  Groups g_;
  bool statics_;
  SparseGptResult& res_;
  std::vector<float> scales_;  // the widened group scales
};

// int4 with every group's parameters chosen before the sweep (choose_int4_params: the zero-code
// grid for Int4, super-block coded parameters for Int4k), over the input W's kept entries, squared
// errors weighted by the Hessian's diagonal in the range search.
class Int4Static final : public Quantizer {
 public:
  Int4Static(const Groups& g, const QuantSpec& spec, SparseGptResult& res) : g_(g), spec_(spec), res_(res) {
    res.group_size = uint32_t(g.group);
    if (spec.dtype != Dtype::Int4k) {
      res.group_scales_f16.assign(g.size(), 0);
      res.group_mins_f16.assign(g.size(), 0);
    }
    res.int4_codes.assign(g.n_out * g.n_in, 0);
  }
  void choose_static(const float* w, const float* hdiag, const uint8_t* fixed_mask) override {
    sp_ = choose_int4_params(w, g_.n_out, g_.n_in, spec_, hdiag, fixed_mask);
    if (spec_.dtype == Dtype::Int4k) {
      res_.super_scales_f16 = sp_.super_scales_f16;
      res_.param_codes = sp_.param_codes;
    } else {
      res_.group_scales_f16 = sp_.scales_f16;
      res_.group_mins_f16 = sp_.mins_f16;
    }
  }
  float quantize(size_t r, size_t, size_t oc, float x) override {
    const size_t k = g_.index(r, oc);
    const uint8_t code = int4_code_on(x, sp_.scales[k], sp_.mins[k]);
    res_.int4_codes[r * g_.n_in + oc] = code;
    return float(code) * sp_.scales[k] + sp_.mins[k];  // as SPEC.md §6.6 decodes it
  }

 private:
  Groups g_;
  QuantSpec spec_;
  SparseGptResult& res_;
  StaticInt4Params sp_;
};

// int4 whose group parameters are chosen when the sweep reaches the group's first column, over all
// of that row's group in the current W (pruned entries included: their decisions come later). The
// parameters persist across blocks, so a group that started in an earlier block keeps them.
class Int4Reached final : public Quantizer {
 public:
  Int4Reached(const Groups& g, SparseGptResult& res) : g_(g), res_(res) {
    res.group_size = uint32_t(g.group);
    res.group_scales_f16.assign(g.size(), 0);
    res.group_mins_f16.assign(g.size(), 0);
    res.int4_codes.assign(g.n_out * g.n_in, 0);
    params_.resize(g.size());
  }
  void reach(size_t r, size_t c, const float* row, const uint8_t*) override {
    if (c % g_.group != 0) return;
    const size_t q = g_.index(r, c);
    params_[q] = int4_group_params(row + c, std::min(g_.group, g_.n_in - c));
    res_.group_scales_f16[q] = params_[q].scale_f16;
    res_.group_mins_f16[q] = params_[q].min_f16;
  }
  float quantize(size_t r, size_t c, size_t, float x) override {
    const Int4GroupParams& gp = params_[g_.index(r, c)];
    const uint8_t code = int4_code(x, gp);
    res_.int4_codes[r * g_.n_in + c] = code;
    return int4_value(code, gp);
  }

 private:
  Groups g_;
  SparseGptResult& res_;
  std::vector<Int4GroupParams> params_;
};

}  // namespace

std::unique_ptr<Quantizer> make_quantizer(const SparseGptOptions& opt, size_t n_out, size_t n_in, const float* w,
                                          SparseGptResult& res) {
  const QuantSpec& spec = opt.quant;
  res.dtype = spec.dtype;
  if (!spec.dtype) return std::make_unique<Identity>();
  const Dtype d = *spec.dtype;
  if (d == Dtype::Int8) return std::make_unique<Int8Rows>(n_out, n_in, w, res);
  const Groups g(n_out, n_in, spec.group_size);
  if (d == Dtype::Int8g) return std::make_unique<Int8Groups>(g, opt.static_groups || opt.act_order, res);
  if (!is_int4(d)) return std::make_unique<Identity>();  // a float dtype stores the weights as they are
  if (d == Dtype::Int4k || opt.static_groups || opt.act_order || opt.fixed_mask)
    return std::make_unique<Int4Static>(g, spec, res);
  return std::make_unique<Int4Reached>(g, res);
}

}  // namespace endor::pruning::detail
