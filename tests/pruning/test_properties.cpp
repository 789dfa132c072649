// Properties of the pruning library that need no reference: quantizer arithmetic, N:M and
// unstructured counts, tie handling, reconstruction-error ordering on correlated inputs,
// quantized outputs representable by the returned codes, and bad-input errors; for GPTQ
// (static groups, act-order, int4k): round to nearest when H is diagonal, less output error than
// round to nearest, permutation equivariance, stored codes that decode to the result bit for bit,
// and the range search's error against the full range.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "endor/format.h"
#include "endor/pruning.h"

using namespace endor::pruning;
using endor::Dtype;
using endor::Quantization;

namespace {

struct Layer {
  size_t n_out, n_in, n_tokens;
  std::vector<float> w, x;  // [n_out, n_in], [n_tokens, n_in]
};

// Correlated activations (low-rank mixing + noise), log-normal column scales and a few outlier
// columns as in LLM activations; Gaussian weights. Fixed seed.
Layer make_layer(size_t n_out, size_t n_in, size_t n_tokens, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const size_t rank = n_in / 4;
  std::vector<float> mix(rank * n_in), col_scale(n_in);
  for (float& v : mix) v = normal(rng) / std::sqrt(float(rank));
  for (size_t j = 0; j < n_in; ++j) col_scale[j] = std::exp(0.7f * normal(rng)) * (j % 37 == 5 ? 8.0f : 1.0f);
  Layer l{n_out, n_in, n_tokens, std::vector<float>(n_out * n_in), std::vector<float>(n_tokens * n_in)};
  std::vector<float> z(rank);
  for (size_t t = 0; t < n_tokens; ++t) {
    for (float& v : z) v = normal(rng);
    for (size_t j = 0; j < n_in; ++j) {
      float s = 0.3f * normal(rng);
      for (size_t k = 0; k < rank; ++k) s += z[k] * mix[k * n_in + j];
      l.x[t * n_in + j] = s * col_scale[j];
    }
  }
  for (float& v : l.w) v = normal(rng);
  return l;
}

// ‖X·Wᵀ − X·W'ᵀ‖_F
double reconstruction_error(const Layer& l, const std::vector<float>& pruned) {
  double sum = 0;
  for (size_t t = 0; t < l.n_tokens; ++t)
    for (size_t r = 0; r < l.n_out; ++r) {
      double d = 0;
      for (size_t j = 0; j < l.n_in; ++j) d += double(l.x[t * l.n_in + j]) * (l.w[r * l.n_in + j] - pruned[r * l.n_in + j]);
      sum += d * d;
    }
  return std::sqrt(sum);
}

std::vector<float> hessian_of(const Layer& l) {
  HessianAccumulator acc(l.n_in);
  acc.add_batch(l.x.data(), l.n_tokens, l.n_in, 4);
  return acc.hessian();
}

bool is_positive_zero(float v) { return v == 0.0f && !std::signbit(v); }

}  // namespace

TEST_CASE("int8 quantizer: per-row absmax scale, round half away from zero, clamp") {
  const float row[] = {0.5f, -2.0f, 1.0f};
  CHECK(int8_row_scale(row, 3) == 2.0f / 127.0f);
  const float zeros[] = {0.0f, 0.0f};
  CHECK(int8_row_scale(zeros, 2) == 1e-5f / 127.0f);
  CHECK(int8_code(2.5f, 1.0f) == 3);
  CHECK(int8_code(-2.5f, 1.0f) == -3);
  CHECK(int8_code(2.4999998f, 1.0f) == 2);
  CHECK(int8_code(300.0f, 1.0f) == 127);
  CHECK(int8_code(-300.0f, 1.0f) == -127);
  CHECK(int8_value(-3, 0.5f) == -1.5f);
}

TEST_CASE("int4 quantizer: the container's grid (a zero code), f16 parameters chosen first, codes against them") {
  std::vector<float> g(16);
  for (int i = 0; i < 16; ++i) g[i] = float(i) - 3.0f;  // range [-3, 12], step exactly 1, z = 3
  Int4GroupParams p = int4_group_params(g.data(), g.size());
  CHECK(p.scale == 1.0f);
  CHECK(p.min == -3.0f);
  CHECK(p.scale_f16 == endor::f32_to_f16(1.0f));
  CHECK(p.min_f16 == endor::f32_to_f16(-3.0f));
  for (int i = 0; i < 16; ++i) CHECK(int4_code(g[i], p) == i);
  CHECK(int4_code(4.5f, p) == 8);    // (4.5 + 3)/1 = 7.5 rounds away from zero
  CHECK(int4_code(100.0f, p) == 15);
  CHECK(int4_code(-100.0f, p) == 0);
  CHECK(int4_value(3, p) == 0.0f);  // the zero code

  // The same parameters as the container encoder's (endor::int4_grid over the group's range).
  const float odd[] = {0.1f, 0.7f, -0.33f};
  p = int4_group_params(odd, 3);
  const endor::Int4Grid grid = endor::int4_grid(-0.33f, 0.7f);
  CHECK(p.scale_f16 == grid.scale_f16);
  CHECK(p.min_f16 == grid.min_f16);
  CHECK(p.scale == endor::f16_to_f32(grid.scale_f16));
  CHECK(p.scale >= (0.7f + 0.33f) / 15.0f);
  const float z = -p.min / p.scale;
  CHECK(z == std::round(z));
  for (float x : odd) {
    CHECK(int4_value(int4_code(x, p), p) == float(int4_code(x, p)) * p.scale + p.min);
    CHECK(std::fabs(int4_value(int4_code(x, p), p) - x) <= p.scale / 2);
  }

  const float flat[] = {0.25f, 0.25f};  // one value: the grid runs from 0, 0.25 is code 15
  p = int4_group_params(flat, 2);
  CHECK(p.min == 0.0f);
  CHECK(int4_code(0.25f, p) == 15);
  CHECK(std::fabs(int4_value(15, p) - 0.25f) <= p.scale / 2);
  const float zeros[] = {0.0f, 0.0f};  // all zero: scale 1 (no division by 0), code 0
  p = int4_group_params(zeros, 2);
  CHECK(p.scale == 1.0f);
  CHECK(int4_value(int4_code(0.0f, p), p) == 0.0f);
  const float tiny[] = {0.0f, 1e-9f};  // below f16's least step: scale 2^-24, 1e-9 is code 0
  p = int4_group_params(tiny, 2);
  CHECK(p.scale == std::ldexp(1.0f, -24));
  CHECK(int4_code(1e-9f, p) == 0);
  const float huge[] = {-1e6f, 1e6f};
  CHECK_THROWS_AS(int4_group_params(huge, 2), endor::Error);
  const float top[] = {0.0f, 65520.0f};  // beyond f16
  CHECK_THROWS_AS(int4_group_params(top, 2), endor::Error);
  const float edge[] = {0.0f, 65504.0f};
  CHECK(int4_value(int4_code(65504.0f, int4_group_params(edge, 2)), int4_group_params(edge, 2)) > 65000.0f);
}

TEST_CASE("WandaStats: Σ x² per column divided by the number of samples (not tokens)") {
  WandaStats s(3);
  const std::vector<float> ones(4 * 3, 1.0f), twos(4 * 3, 2.0f);
  s.add_batch(ones.data(), 4, 3);  // one sample of 4 tokens
  CHECK(s.scaler_row() == std::vector<float>{4.0f, 4.0f, 4.0f});
  s.add_batch(twos.data(), 4, 3);  // (4 + 16)/2
  CHECK(s.scaler_row() == std::vector<float>{10.0f, 10.0f, 10.0f});
  CHECK(s.n_samples() == 2);
  WandaStats both(3);  // the same two samples in one batch of 2
  std::vector<float> joined = ones;
  joined.insert(joined.end(), twos.begin(), twos.end());
  both.add_batch(joined.data(), 8, 3, 2);
  CHECK(both.scaler_row() == s.scaler_row());
}

TEST_CASE("HessianAccumulator: 2/n · Σ XᵀX, symmetric, running over batches") {
  // sqrt(2/n) is rounded to f32 before squaring (as the reference), so compare within 8 ulps.
  auto near = [](const std::vector<float>& got, const std::vector<float>& want) {
    for (size_t i = 0; i < want.size(); ++i)
      if (std::fabs(got[i] - want[i]) > 8 * 0x1p-24 * std::fabs(want[i])) return false;
    return got.size() == want.size() && got[1] == got[2];
  };
  HessianAccumulator h(2);
  const float x1[] = {1, 2, 3, 4};  // [2 tokens, 2 inputs], one sample
  h.add_batch(x1, 2, 2);
  CHECK(near(h.hessian(), {20, 28, 28, 40}));
  const float x2[] = {1, 0};
  h.add_batch(x2, 1, 2);  // H = (2/2)·(XᵀX over all 3 tokens) = [[11, 14], [14, 20]]
  CHECK(near(h.hessian(), {11, 14, 14, 20}));
  CHECK(h.n_samples() == 2);
}

TEST_CASE("unstructured Wanda prunes exactly int(n_in·p) per row; ties go to lower columns") {
  Layer l = make_layer(16, 40, 64, 1);
  WandaStats stats(l.n_in);
  stats.add_batch(l.x.data(), l.n_tokens, l.n_in);
  for (double p : {0.3, 0.5, 0.77}) {
    std::vector<float> w = l.w;
    const auto mask = wanda_prune(w.data(), l.n_out, l.n_in, stats.scaler_row().data(), SparsityTarget::unstructured(p));
    for (size_t r = 0; r < l.n_out; ++r)
      CHECK(size_t(std::count(&mask[r * l.n_in], &mask[r * l.n_in] + l.n_in, 1)) == size_t(l.n_in * p));
  }
  // All scores equal: a stable sort keeps column order, so the first k columns go.
  std::vector<float> w(2 * 8, 1.0f), scaler(8, 4.0f);
  auto mask = wanda_prune(w.data(), 2, 8, scaler.data(), SparsityTarget::unstructured(0.5));
  CHECK(mask == std::vector<uint8_t>{1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0});
  w.assign(16, -1.0f);
  mask = wanda_prune(w.data(), 2, 8, scaler.data(), SparsityTarget::n_of_m(2, 4));
  CHECK(mask == std::vector<uint8_t>{1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0});
  CHECK(w == std::vector<float>{0, 0, -1, -1, 0, 0, -1, -1, 0, 0, -1, -1, 0, 0, -1, -1});
}

TEST_CASE("N:M masks have exactly N pruned weights in every group, all methods") {
  Layer l = make_layer(24, 64, 96, 2);
  WandaStats stats(l.n_in);
  stats.add_batch(l.x.data(), l.n_tokens, l.n_in);
  const std::vector<float> h = hessian_of(l);
  for (auto [n, m] : {std::pair<uint32_t, uint32_t>{2, 4}, {4, 8}, {1, 4}, {3, 16}}) {
    CAPTURE(n);
    CAPTURE(m);
    const SparsityTarget t = SparsityTarget::n_of_m(n, m);
    std::vector<float> w_mag = l.w, w_wanda = l.w, w_sgpt = l.w;
    SparseGptOptions opt;
    opt.target = t;
    opt.block_size = 32;
    const std::vector<std::vector<uint8_t>> masks = {
        magnitude_prune(w_mag.data(), l.n_out, l.n_in, t),
        wanda_prune(w_wanda.data(), l.n_out, l.n_in, stats.scaler_row().data(), t),
        sparsegpt_prune(w_sgpt.data(), l.n_out, l.n_in, h.data(), opt).mask};
    const std::vector<float>* outs[] = {&w_mag, &w_wanda, &w_sgpt};
    for (size_t k = 0; k < masks.size(); ++k) {
      CAPTURE(k);
      size_t bad_groups = 0, nonzero_pruned = 0;
      for (size_t r = 0; r < l.n_out; ++r)
        for (size_t g = 0; g < l.n_in; g += m)
          bad_groups += std::count(&masks[k][r * l.n_in + g], &masks[k][r * l.n_in + g] + m, 1) != long(n);
      for (size_t i = 0; i < masks[k].size(); ++i) nonzero_pruned += masks[k][i] && !is_positive_zero((*outs[k])[i]);
      CHECK(bad_groups == 0);
      CHECK(nonzero_pruned == 0);
    }
  }
}

TEST_CASE("reconstruction error on correlated inputs: SparseGPT < Wanda < magnitude") {
  const Layer l = make_layer(64, 128, 512, 3);
  WandaStats stats(l.n_in);
  for (size_t s = 0; s < 4; ++s) stats.add_batch(&l.x[s * 128 * l.n_in], 128, l.n_in);
  const std::vector<float> h = hessian_of(l);
  for (const SparsityTarget& t : {SparsityTarget::unstructured(0.5), SparsityTarget::n_of_m(2, 4)}) {
    CAPTURE(t.m);
    std::vector<float> w_mag = l.w, w_wanda = l.w, w_sgpt = l.w;
    magnitude_prune(w_mag.data(), l.n_out, l.n_in, t);
    wanda_prune(w_wanda.data(), l.n_out, l.n_in, stats.scaler_row().data(), t);
    SparseGptOptions opt;
    opt.target = t;
    sparsegpt_prune(w_sgpt.data(), l.n_out, l.n_in, h.data(), opt);
    const double e_mag = reconstruction_error(l, w_mag), e_wanda = reconstruction_error(l, w_wanda),
                 e_sgpt = reconstruction_error(l, w_sgpt);
    MESSAGE("‖XWᵀ−XW'ᵀ‖ (m=" << t.m << "): magnitude " << e_mag << ", wanda " << e_wanda << ", sparsegpt " << e_sgpt);
    CHECK(e_sgpt < e_wanda);
    CHECK(e_wanda < e_mag);
  }
}

TEST_CASE("SparseGPT with H = I is block-wise magnitude pruning without updates") {
  // U = I/sqrt(1 + damp): equal scores per column, and err·U[i, j>i] = 0 leaves kept weights alone.
  const Layer l = make_layer(12, 48, 8, 4);
  std::vector<float> eye(l.n_in * l.n_in, 0.0f);
  for (size_t j = 0; j < l.n_in; ++j) eye[j * l.n_in + j] = 1.0f;
  std::vector<float> w_sgpt = l.w, w_mag = l.w;
  SparseGptOptions opt;
  opt.target = SparsityTarget::unstructured(0.4);
  const auto res = sparsegpt_prune(w_sgpt.data(), l.n_out, l.n_in, eye.data(), opt);  // one block
  CHECK(res.mask == magnitude_prune(w_mag.data(), l.n_out, l.n_in, opt.target));
  CHECK(w_sgpt == w_mag);
}

TEST_CASE("SparseGPT zeroes dead inputs (H_jj == 0)") {
  Layer l = make_layer(8, 32, 64, 5);
  for (size_t t = 0; t < l.n_tokens; ++t) l.x[t * l.n_in + 3] = 0.0f;
  const std::vector<float> h = hessian_of(l);
  std::vector<float> w = l.w;
  const auto res = sparsegpt_prune(w.data(), l.n_out, l.n_in, h.data(), SparseGptOptions{});
  for (size_t r = 0; r < l.n_out; ++r) {
    CHECK(is_positive_zero(w[r * l.n_in + 3]));
    CHECK(res.mask[r * l.n_in + 3] == 1);  // score 0: always below the threshold
  }
}

TEST_CASE("SparseGPT + quantization: every kept weight is exactly its stored code's value") {
  const Layer l = make_layer(20, 200, 256, 6);
  const std::vector<float> h = hessian_of(l);
  struct Case { SparsityTarget t; Dtype q; uint32_t group; size_t block; };
  const Case cases[] = {
      {SparsityTarget::unstructured(0.5), Dtype::Int8, 0, 128},
      {SparsityTarget::n_of_m(2, 4), Dtype::Int8, 0, 64},
      {SparsityTarget::unstructured(0.5), Dtype::Int4, 64, 128},   // partial last group
      {SparsityTarget::n_of_m(2, 4), Dtype::Int4, 48, 32},         // groups straddle blocks
      {SparsityTarget::unstructured(0.6), Dtype::Int4, 128, 128},
      {SparsityTarget::unstructured(0.5), Dtype::Int8g, 32, 128},   // int8g: Q8_0's groups
      {SparsityTarget::n_of_m(2, 4), Dtype::Int8g, 48, 32},         // groups straddle blocks
  };
  for (const Case& c : cases) {
    CAPTURE(int(c.q));
    CAPTURE(c.group);
    std::vector<float> w = l.w;
    SparseGptOptions opt;
    opt.target = c.t;
    opt.block_size = c.block;
    opt.quant = {c.q, c.group};
    const SparseGptResult res = sparsegpt_prune(w.data(), l.n_out, l.n_in, h.data(), opt);
    CHECK(res.dtype == c.q);
    size_t mismatches = 0, nonzero_pruned = 0, bad_codes = 0;
    if (c.q == Dtype::Int8) {
      REQUIRE(res.row_scales.size() == l.n_out);
      REQUIRE(res.int8_codes.size() == w.size());
      for (size_t r = 0; r < l.n_out; ++r) CHECK(res.row_scales[r] == int8_row_scale(&l.w[r * l.n_in], l.n_in));
      for (size_t i = 0; i < w.size(); ++i) {
        const int8_t code = res.int8_codes[i];
        bad_codes += code < -127 || (res.mask[i] && code != 0);
        if (res.mask[i]) nonzero_pruned += !is_positive_zero(w[i]);
        else mismatches += w[i] != int8_value(code, res.row_scales[i / l.n_in]);
      }
    } else if (c.q == Dtype::Int8g) {
      const size_t gpr = (l.n_in + c.group - 1) / c.group;
      REQUIRE(res.group_size == c.group);
      REQUIRE(res.group_scales_f16.size() == l.n_out * gpr);
      REQUIRE(res.int8_codes.size() == w.size());
      for (size_t i = 0; i < w.size(); ++i) {
        const float s = endor::f16_to_f32(res.group_scales_f16[(i / l.n_in) * gpr + (i % l.n_in) / c.group]);
        const int8_t code = res.int8_codes[i];
        bad_codes += code < -127 || (res.mask[i] && code != 0);
        if (res.mask[i]) nonzero_pruned += !is_positive_zero(w[i]);
        else mismatches += w[i] != int8_value(code, s);
      }
      // Every kept weight on its group's grid: |w| <= 127·S (the scale spans the kept weights).
      for (size_t i = 0; i < w.size(); ++i)
        if (!res.mask[i])
          CHECK(std::fabs(w[i]) <= 127.0f * endor::f16_to_f32(res.group_scales_f16[(i / l.n_in) * gpr + (i % l.n_in) / c.group]));
    } else {
      const size_t gpr = (l.n_in + c.group - 1) / c.group;
      REQUIRE(res.group_size == c.group);
      REQUIRE(res.group_scales_f16.size() == l.n_out * gpr);
      REQUIRE(res.group_mins_f16.size() == l.n_out * gpr);
      for (size_t i = 0; i < w.size(); ++i) {
        const size_t r = i / l.n_in, g = (i % l.n_in) / c.group;
        Int4GroupParams p;
        p.scale = endor::f16_to_f32(res.group_scales_f16[r * gpr + g]);
        p.min = endor::f16_to_f32(res.group_mins_f16[r * gpr + g]);
        const uint8_t code = res.int4_codes[i];
        bad_codes += code > 15 || (res.mask[i] && code != 0);
        if (res.mask[i]) nonzero_pruned += !is_positive_zero(w[i]);
        else mismatches += w[i] != int4_value(code, p);
      }
    }
    CHECK(mismatches == 0);
    CHECK(nonzero_pruned == 0);
    CHECK(bad_codes == 0);
    CHECK(res.loss > 0.0);

    // Stored through the format's explicit-codes path (encode_quantized, what endor-pack does),
    // the tensor decodes to exactly w, bit for bit (pruned entries absent: +0).
    std::vector<uint8_t> present(w.size());
    for (size_t i = 0; i < w.size(); ++i) present[i] = !res.mask[i];
    endor::QuantizedValues qv;
    qv.present = present.data();
    if (c.q == Dtype::Int8) {
      qv.value_type = endor::ValueType::I8;
      qv.int8_codes = res.int8_codes.data();
      qv.row_scales = res.row_scales.data();
    } else if (c.q == Dtype::Int8g) {
      qv.value_type = endor::ValueType::I8G;
      qv.group_size = res.group_size;
      qv.int8_codes = res.int8_codes.data();
      qv.group_scales = res.group_scales_f16.data();
    } else {
      qv.value_type = endor::ValueType::I4;
      qv.group_size = res.group_size;
      qv.int4_codes = res.int4_codes.data();
      qv.group_scales = res.group_scales_f16.data();
      qv.group_mins = res.group_mins_f16.data();
    }
    endor::TensorInfo info;
    info.shape = {l.n_out, l.n_in};
    const endor::EncodedTensor e = endor::encode_quantized(info.shape, endor::Encoding::Bitmap, qv);
    std::vector<float> decoded(w.size(), -1.0f);
    endor::decode_rows_f32(endor::TensorView{&info, e.layout, e.bytes.data()}, 0, l.n_out, decoded.data());
    CHECK(std::memcmp(decoded.data(), w.data(), 4 * w.size()) == 0);
  }
}

TEST_CASE("bad arguments throw endor::Error with one line and leave W untouched") {
  const Layer l = make_layer(4, 16, 32, 7);
  const std::vector<float> h = hessian_of(l);
  std::vector<float> scaler(16, 1.0f);
  auto throws_unchanged = [&](auto&& call, const std::string& needle) {
    std::vector<float> w = l.w;
    std::string msg;
    try {
      call(w.data());
    } catch (const endor::Error& e) {
      msg = e.what();
    }
    CAPTURE(msg);
    CHECK(msg.find(needle) != std::string::npos);
    CHECK(msg.find('\n') == std::string::npos);
    CHECK(w == l.w);
  };
  for (double bad : {0.0, 1.0, -0.5, std::nan("")}) {
    throws_unchanged([&](float* w) { wanda_prune(w, 4, 16, scaler.data(), SparsityTarget::unstructured(bad)); }, "ratio");
    throws_unchanged([&](float* w) { magnitude_prune(w, 4, 16, SparsityTarget::unstructured(bad)); }, "ratio");
  }
  throws_unchanged([&](float* w) { wanda_prune(w, 4, 16, scaler.data(), SparsityTarget::n_of_m(4, 4)); }, "N < M");
  throws_unchanged([&](float* w) { wanda_prune(w, 4, 16, scaler.data(), SparsityTarget::n_of_m(2, 3)); }, "does not divide");
  throws_unchanged([&](float* w) { wanda_prune(w, 0, 16, scaler.data(), SparsityTarget::unstructured(0.5)); }, "empty");
  std::vector<float> neg = scaler;
  neg[3] = -1.0f;
  throws_unchanged([&](float* w) { wanda_prune(w, 4, 16, neg.data(), SparsityTarget::unstructured(0.5)); }, "negative");
  neg[3] = INFINITY;
  throws_unchanged([&](float* w) { wanda_prune(w, 4, 16, neg.data(), SparsityTarget::unstructured(0.5)); }, "non-finite");

  SparseGptOptions opt;
  std::vector<float> w_nan = l.w;
  w_nan[5] = NAN;
  const std::vector<float> w_nan_before = w_nan;
  CHECK_THROWS_WITH_AS(sparsegpt_prune(w_nan.data(), 4, 16, h.data(), opt),
                       "sparsegpt_prune: weight has a non-finite value at flat index 5", endor::Error);
  CHECK(std::memcmp(w_nan.data(), w_nan_before.data(), w_nan.size() * sizeof(float)) == 0);
  std::vector<float> h_nan = h;
  h_nan[17] = INFINITY;
  throws_unchanged([&](float* w) { sparsegpt_prune(w, 4, 16, h_nan.data(), opt); }, "Hessian has a non-finite");
  opt.block_size = 0;
  throws_unchanged([&](float* w) { sparsegpt_prune(w, 4, 16, h.data(), opt); }, "block_size");
  opt.block_size = 6;
  opt.target = SparsityTarget::n_of_m(2, 4);
  throws_unchanged([&](float* w) { sparsegpt_prune(w, 4, 16, h.data(), opt); }, "block_size");
  opt = SparseGptOptions{};
  opt.quant = {Dtype::Int4, 0};
  throws_unchanged([&](float* w) { sparsegpt_prune(w, 4, 16, h.data(), opt); }, "group_size");
  opt = SparseGptOptions{};
  opt.percdamp = -1.0f;
  throws_unchanged([&](float* w) { sparsegpt_prune(w, 4, 16, h.data(), opt); }, "percdamp");
  // Negative definite with a dead input: fails in Cholesky, after the dead column was found.
  std::vector<float> bad_h(16 * 16, 0.0f);
  for (size_t j = 1; j < 16; ++j) bad_h[j * 16 + j] = -1.0f;
  opt = SparseGptOptions{};
  opt.percdamp = 0.0f;
  throws_unchanged([&](float* w) { sparsegpt_prune(w, 4, 16, bad_h.data(), opt); }, "not positive definite");

  WandaStats stats(16);
  HessianAccumulator acc(16);
  CHECK_THROWS_AS(stats.add_batch(l.x.data(), 32, 15), endor::Error);
  CHECK_THROWS_AS(acc.add_batch(l.x.data(), 32, 16, 0), endor::Error);
  CHECK_THROWS_AS(WandaStats(0), endor::Error);
  CHECK_THROWS_AS(HessianAccumulator(0), endor::Error);
  std::vector<float> x_nan(l.x);
  x_nan[7] = NAN;
  CHECK_THROWS_AS(acc.add_batch(x_nan.data(), 32, 16), endor::Error);
  CHECK(acc.n_samples() == 0);
}

// ---- GPTQ (sparsegpt_prune without pruning, static groups, optional act-order) --------------

namespace {

SparseGptOptions gptq_options(Dtype q, uint32_t group, bool act_order, bool mse_clip = false, size_t block = 128) {
  SparseGptOptions opt;
  opt.target = SparsityTarget::unstructured(0.0);
  opt.block_size = block;
  opt.quant = {q, group, mse_clip};
  opt.static_groups = true;
  opt.act_order = act_order;
  return opt;
}

std::vector<float> diagonal_of(const std::vector<float>& h, size_t n) {
  std::vector<float> d(n);
  for (size_t j = 0; j < n; ++j) d[j] = h[j * n + j];
  return d;
}

// Round to nearest on GPTQ's static parameters (what sparsegpt_prune would give without error
// feedback): codes and values of w [n_out, n_in]; int8 on the row's absmax scale.
struct Rtn {
  std::vector<int> codes;
  std::vector<float> values;
  StaticInt4Params params;
};
Rtn round_to_nearest(const std::vector<float>& w, size_t n_out, size_t n_in, const QuantSpec& q, const float* col_weight) {
  Rtn out;
  out.codes.resize(w.size());
  out.values.resize(w.size());
  if (q.dtype == Dtype::Int8) {
    for (size_t r = 0; r < n_out; ++r) {
      const float s = int8_row_scale(&w[r * n_in], n_in);
      for (size_t c = 0; c < n_in; ++c) {
        const int8_t code = int8_code(w[r * n_in + c], s);
        out.codes[r * n_in + c] = code;
        out.values[r * n_in + c] = int8_value(code, s);
      }
    }
    return out;
  }
  if (q.dtype == Dtype::Int8g) {  // SPEC.md §7.5 on the group's absmax
    const size_t gpr = (n_in + q.group_size - 1) / q.group_size;
    for (size_t r = 0; r < n_out; ++r)
      for (size_t g = 0; g < gpr; ++g) {
        const size_t c0 = g * q.group_size, c1 = std::min(n_in, c0 + q.group_size);
        float amax = 0.0f;
        for (size_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(w[r * n_in + c]));
        const float s = endor::f16_to_f32(endor::int8g_scale(amax));
        for (size_t c = c0; c < c1; ++c) {
          const int8_t code = int8g_code(w[r * n_in + c], s);
          out.codes[r * n_in + c] = code;
          out.values[r * n_in + c] = int8_value(code, s);
        }
      }
    return out;
  }
  out.params = choose_int4_params(w.data(), n_out, n_in, q, col_weight);
  for (size_t i = 0; i < w.size(); ++i) {
    const size_t p = (i / n_in) * out.params.groups_per_row + (i % n_in) / q.group_size;
    const uint8_t code = int4_code_on(w[i], out.params.scales[p], out.params.mins[p]);
    out.codes[i] = code;
    out.values[i] = float(code) * out.params.scales[p] + out.params.mins[p];  // q·S exact: one rounding
  }
  return out;
}

int result_code(const SparseGptResult& res, size_t i) {
  return res.dtype == Dtype::Int8 || res.dtype == Dtype::Int8g ? res.int8_codes[i]
                                                                                       : res.int4_codes[i];
}

// The tensor endor-pack would store from a result (encode_quantized), decoded by the reference
// decoder. Pruned weights absent (bitmap) when any are; dense otherwise.
std::vector<float> stored_and_decoded(const SparseGptResult& res, size_t n_out, size_t n_in) {
  std::vector<uint8_t> present(n_out * n_in);
  bool pruned = false;
  for (size_t i = 0; i < present.size(); ++i) {
    present[i] = !res.mask[i];
    pruned |= res.mask[i] != 0;
  }
  endor::QuantizedValues qv;
  qv.present = pruned ? present.data() : nullptr;
  if (res.dtype == Dtype::Int8) {
    qv.value_type = endor::ValueType::I8;
    qv.int8_codes = res.int8_codes.data();
    qv.row_scales = res.row_scales.data();
  } else if (res.dtype == Dtype::Int8g) {
    qv.value_type = endor::ValueType::I8G;
    qv.group_size = res.group_size;
    qv.int8_codes = res.int8_codes.data();
    qv.group_scales = res.group_scales_f16.data();
  } else {
    qv.value_type = endor::ValueType::I4;
    qv.group_size = res.group_size;
    qv.int4_codes = res.int4_codes.data();
    if (res.dtype == Dtype::Int4k) {
      qv.int4_params = endor::Int4Params::Coded6;
      qv.super_scales = res.super_scales_f16.data();
      qv.param_codes = res.param_codes.data();
    } else {
      qv.group_scales = res.group_scales_f16.data();
      qv.group_mins = res.group_mins_f16.data();
    }
  }
  endor::TensorInfo info;
  info.shape = {n_out, n_in};
  const endor::Encoding enc = pruned ? endor::Encoding::Bitmap : endor::Encoding::Dense;
  const endor::EncodedTensor e = endor::encode_quantized(info.shape, enc, qv);
  std::vector<float> decoded(n_out * n_in, -1.0f);
  endor::decode_rows_f32(endor::TensorView{&info, e.layout, e.bytes.data()}, 0, n_out, decoded.data());
  return decoded;
}

// Σ over a group of wt·(w − dq(w))² on a parameter pair, in double, dq(w) the decoded f32 value.
double weighted_group_error(const float* x, const float* wt, size_t n, float scale, float min) {
  double e = 0;
  for (size_t i = 0; i < n; ++i) {
    const float q = float(int4_code_on(x[i], scale, min)) * scale + min;  // q·S exact: one rounding
    const double d = double(x[i]) - double(q);
    e += double(wt[i]) * d * d;
  }
  return e;
}

}  // namespace

TEST_CASE("GPTQ with a diagonal H is round-to-nearest on the static parameters") {
  // H diagonal: U = diag(1/sqrt(H_jj + damp)) exactly, so err·U[i, j>i] = 0 and no column ever
  // changes; the result is every weight rounded on the parameters chosen from W, in any order.
  const Layer l = make_layer(12, 96, 8, 11);
  std::mt19937 rng(12);
  std::uniform_real_distribution<float> uni(0.1f, 10.0f);
  std::vector<float> eye(l.n_in * l.n_in, 0.0f), diag(l.n_in * l.n_in, 0.0f);
  for (size_t j = 0; j < l.n_in; ++j) {
    eye[j * l.n_in + j] = 1.0f;
    diag[j * l.n_in + j] = j == 5 ? 0.0f : uni(rng);  // input 5 dead: its column is zeroed first
  }
  struct Case { Dtype q; uint32_t group; bool mse; };
  const Case cases[] = {{Dtype::Int8, 0, false}, {Dtype::Int4, 32, false},
                        {Dtype::Int4, 40, true}, {Dtype::Int4k, 32, false},
                        {Dtype::Int4k, 64, true}, {Dtype::Int8g, 32, false},
                        {Dtype::Int8g, 40, false}};
  for (const auto* h : {&eye, &diag}) {
    const bool dead = h == &diag;
    std::vector<float> w_in = l.w;
    if (dead)
      for (size_t r = 0; r < l.n_out; ++r) w_in[r * l.n_in + 5] = 0.0f;
    const std::vector<float> col_weight = diagonal_of(*h, l.n_in);
    for (const Case& c : cases)
      for (bool act : {false, true}) {
        CAPTURE(dead);
        CAPTURE(int(c.q));
        CAPTURE(c.group);
        CAPTURE(c.mse);
        CAPTURE(act);
        const SparseGptOptions opt = gptq_options(c.q, c.group, act, c.mse, 32);
        std::vector<float> w = l.w;
        const SparseGptResult res = sparsegpt_prune(w.data(), l.n_out, l.n_in, h->data(), opt);
        // int8 scales come from the input W (before dead inputs are zeroed), as gptq.py's.
        const Rtn rtn = round_to_nearest(c.q == Dtype::Int8 ? l.w : w_in, l.n_out, l.n_in, opt.quant,
                                         col_weight.data());
        size_t code_mismatches = 0, value_mismatches = 0;
        for (size_t i = 0; i < w.size(); ++i) {
          const bool dead_col = dead && i % l.n_in == 5;
          if (c.q == Dtype::Int8 && dead_col) {  // 0 on the input-W scale: code 0, value 0
            code_mismatches += result_code(res, i) != 0;
            value_mismatches += w[i] != 0.0f;
            continue;
          }
          code_mismatches += result_code(res, i) != rtn.codes[i];
          value_mismatches += std::memcmp(&w[i], &rtn.values[i], 4) != 0;
        }
        CHECK(code_mismatches == 0);
        CHECK(value_mismatches == 0);
        if (c.q == Dtype::Int4) {
          CHECK(res.group_scales_f16 == rtn.params.scales_f16);
          CHECK(res.group_mins_f16 == rtn.params.mins_f16);
        }
        if (c.q == Dtype::Int4k) {
          CHECK(res.super_scales_f16 == rtn.params.super_scales_f16);
          CHECK(res.param_codes == rtn.params.param_codes);
        }
      }
  }
}

TEST_CASE("GPTQ's reconstruction error on correlated inputs is below round-to-nearest's") {
  const Layer l = make_layer(64, 128, 512, 13);
  const std::vector<float> h = hessian_of(l);
  const std::vector<float> col_weight = diagonal_of(h, l.n_in);
  struct Case { Dtype q; uint32_t group; bool mse; };
  const Case cases[] = {{Dtype::Int8, 0, false},   {Dtype::Int4, 32, false},
                        {Dtype::Int4, 64, true}, {Dtype::Int4k, 32, false},
                        {Dtype::Int4k, 64, false}, {Dtype::Int4k, 32, true},
                        {Dtype::Int8g, 32, false}};
  for (const Case& c : cases) {
    CAPTURE(int(c.q));
    CAPTURE(c.group);
    CAPTURE(c.mse);
    const Rtn rtn = round_to_nearest(l.w, l.n_out, l.n_in, {c.q, c.group, c.mse}, col_weight.data());
    const double e_rtn = reconstruction_error(l, rtn.values);
    for (bool act : {false, true}) {
      CAPTURE(act);
      std::vector<float> w = l.w;
      sparsegpt_prune(w.data(), l.n_out, l.n_in, h.data(), gptq_options(c.q, c.group, act, c.mse, 32));
      const double e_gptq = reconstruction_error(l, w);
      MESSAGE("‖X(W−Q)ᵀ‖ scheme " << int(c.q) << " group " << c.group << std::string(c.mse ? " mse_clip" : "")
                                  << std::string(act ? " act-order" : "") << ": round-to-nearest " << e_rtn << ", GPTQ " << e_gptq);
      CHECK(e_gptq < e_rtn);
    }
  }
}

TEST_CASE("GPTQ act-order returns codes in the original column order (permutation equivariance)") {
  // Permuting W's columns and H's rows and columns by σ leaves act-order's processing order (by
  // decreasing H_jj) and so every operation unchanged, as long as σ keeps groups whole: here σ
  // permutes the 8 groups of a row and the columns inside each group. With 8 groups a row, one
  // int4k super-block is one row's parameters, so its (d, dmin) do not change either. The
  // result on the permuted layer must be the original's, permuted by σ, bit for bit.
  const size_t G = 16, n_in = 8 * G;
  const Layer l = make_layer(8, n_in, 256, 14);
  const std::vector<float> h = hessian_of(l);
  std::mt19937 rng(15);
  std::vector<size_t> groups(8), sigma(n_in);
  for (size_t g = 0; g < 8; ++g) groups[g] = g;
  std::shuffle(groups.begin(), groups.end(), rng);
  for (size_t g = 0; g < 8; ++g) {
    std::vector<size_t> inner(G);
    for (size_t t = 0; t < G; ++t) inner[t] = groups[g] * G + t;
    std::shuffle(inner.begin(), inner.end(), rng);
    for (size_t t = 0; t < G; ++t) sigma[g * G + t] = inner[t];  // column j of the permuted = sigma[j] of the original
  }
  std::vector<float> w_perm(l.w.size()), h_perm(h.size());
  for (size_t r = 0; r < l.n_out; ++r)
    for (size_t j = 0; j < n_in; ++j) w_perm[r * n_in + j] = l.w[r * n_in + sigma[j]];
  for (size_t i = 0; i < n_in; ++i)
    for (size_t j = 0; j < n_in; ++j) h_perm[i * n_in + j] = h[sigma[i] * n_in + sigma[j]];
  for (Dtype q : {Dtype::Int8, Dtype::Int4, Dtype::Int4k}) {
    CAPTURE(int(q));
    const SparseGptOptions opt = gptq_options(q, uint32_t(G), true, false, 32);
    std::vector<float> w = l.w, wp = w_perm;
    const SparseGptResult res = sparsegpt_prune(w.data(), l.n_out, n_in, h.data(), opt);
    const SparseGptResult resp = sparsegpt_prune(wp.data(), l.n_out, n_in, h_perm.data(), opt);
    size_t code_mismatches = 0, value_mismatches = 0, moved = 0;
    for (size_t r = 0; r < l.n_out; ++r)
      for (size_t j = 0; j < n_in; ++j) {
        code_mismatches += result_code(resp, r * n_in + j) != result_code(res, r * n_in + sigma[j]);
        value_mismatches += std::memcmp(&wp[r * n_in + j], &w[r * n_in + sigma[j]], 4) != 0;
        moved += result_code(resp, r * n_in + j) != result_code(res, r * n_in + j);
      }
    CHECK(code_mismatches == 0);
    CHECK(value_mismatches == 0);
    CHECK(moved > 0);  // σ really moved codes: the comparison above is not vacuous
    if (q == Dtype::Int4)
      for (size_t r = 0; r < l.n_out; ++r)
        for (size_t g = 0; g < 8; ++g) {
          CHECK(resp.group_scales_f16[r * 8 + g] == res.group_scales_f16[r * 8 + groups[g]]);
          CHECK(resp.group_mins_f16[r * 8 + g] == res.group_mins_f16[r * 8 + groups[g]]);
        }
    if (q == Dtype::Int4k) {
      CHECK(resp.super_scales_f16 == res.super_scales_f16);
      for (size_t r = 0; r < l.n_out; ++r)
        for (size_t g = 0; g < 8; ++g)
          for (size_t k = 0; k < 2; ++k) CHECK(resp.param_codes[2 * (r * 8 + g) + k] == res.param_codes[2 * (r * 8 + groups[g]) + k]);
    }
  }
}

TEST_CASE("GPTQ/SparseGPT with int4k: every weight is exactly its stored code's decoded value") {
  Layer l = make_layer(20, 200, 256, 16);
  for (size_t t = 0; t < l.n_tokens; ++t) l.x[t * l.n_in + 17] = 0.0f;  // a dead input
  const std::vector<float> h = hessian_of(l);
  struct Case { SparsityTarget t; uint32_t group; bool act, mse; size_t block; };
  const Case cases[] = {
      {SparsityTarget::unstructured(0.0), 32, false, false, 128},
      {SparsityTarget::unstructured(0.0), 48, true, false, 64},    // partial last group; 100 parameters: a partial super-block
      {SparsityTarget::unstructured(0.0), 64, true, true, 128},
      {SparsityTarget::unstructured(0.0), 128, false, true, 32},
      {SparsityTarget::unstructured(0.5), 32, false, true, 128},   // as the quantizer inside SparseGPT
      {SparsityTarget::unstructured(0.4), 64, true, false, 64},    // SparseGPT with act-order: mask and codes permuted back
      {SparsityTarget::n_of_m(2, 4), 64, false, false, 64},
  };
  for (const Case& c : cases) {
    CAPTURE(c.t.ratio);
    CAPTURE(c.t.m);
    CAPTURE(c.group);
    CAPTURE(c.act);
    CAPTURE(c.mse);
    SparseGptOptions opt = gptq_options(Dtype::Int4k, c.group, c.act, c.mse, c.block);
    opt.target = c.t;
    std::vector<float> w = l.w;
    const SparseGptResult res = sparsegpt_prune(w.data(), l.n_out, l.n_in, h.data(), opt);
    const size_t gpr = (l.n_in + c.group - 1) / c.group, n_params = l.n_out * gpr;
    REQUIRE(res.dtype == Dtype::Int4k);
    REQUIRE(res.group_size == c.group);
    REQUIRE(res.int4_codes.size() == w.size());
    REQUIRE(res.param_codes.size() == 2 * n_params);
    REQUIRE(res.super_scales_f16.size() == 2 * ((n_params + 7) / 8));
    size_t bad_codes = 0, bad_params = 0, nonzero_pruned = 0, mismatches = 0;
    for (uint8_t code : res.int4_codes) bad_codes += code > 15;
    for (uint8_t pc : res.param_codes) bad_params += pc > endor::kInt4kCodeMax;
    for (uint16_t s : res.super_scales_f16) bad_params += !std::isfinite(endor::f16_to_f32(s)) || endor::f16_to_f32(s) < 0.0f;
    const std::vector<float> decoded = stored_and_decoded(res, l.n_out, l.n_in);
    for (size_t i = 0; i < w.size(); ++i) {
      if (res.mask[i]) nonzero_pruned += !is_positive_zero(w[i]);
      mismatches += std::memcmp(&decoded[i], &w[i], 4) != 0;
    }
    CHECK(bad_codes == 0);
    CHECK(bad_params == 0);
    CHECK(nonzero_pruned == 0);
    CHECK(mismatches == 0);
  }
  // The zero-code int4 and int8 results of act-order GPTQ decode to w as well.
  for (Dtype q : {Dtype::Int4, Dtype::Int8}) {
    CAPTURE(int(q));
    std::vector<float> w = l.w;
    const SparseGptResult res = sparsegpt_prune(w.data(), l.n_out, l.n_in, h.data(), gptq_options(q, 64, true, true, 64));
    const std::vector<float> decoded = stored_and_decoded(res, l.n_out, l.n_in);
    CHECK(std::memcmp(decoded.data(), w.data(), 4 * w.size()) == 0);
  }
}

// Int4: the range search keeps the full range unless a candidate rounds the group better,
// so no group can get worse. Int4k: the search judges a group's (S, M) before int4k codes them
// (six-bit codes under the super-block's d, dmin, which the search itself moves), so a single
// group can come out worse after coding (measured: up to a quarter of the groups); only the
// matrix total is asserted there, and the per-group and per-super-block counts are printed.
TEST_CASE("choose_int4_params: mse_clip never gives a larger weighted error than the full range") {
  // Heavy-tailed weights (a few outliers a row), positive column weights with some zeros.
  const size_t n_out = 16, n_in = 256;
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  std::vector<float> w(n_out * n_in), wt(n_in);
  for (float& v : w) v = normal(rng) * (uni(rng) < 0.02f ? 8.0f : 1.0f);
  for (size_t j = 0; j < n_in; ++j) wt[j] = j % 29 == 3 ? 0.0f : std::exp(normal(rng));
  const std::vector<float> ones(n_in, 1.0f);
  const float* const col_weights[] = {wt.data(), nullptr};
  for (Dtype q : {Dtype::Int4, Dtype::Int4k})
    for (uint32_t g : {32u, 64u, 100u})
      for (const float* cw : col_weights) {
        CAPTURE(int(q));
        CAPTURE(g);
        CAPTURE(cw != nullptr);
        const StaticInt4Params full = choose_int4_params(w.data(), n_out, n_in, {q, g, false}, cw);
        const StaticInt4Params mse = choose_int4_params(w.data(), n_out, n_in, {q, g, true}, cw);
        const size_t gpr = (n_in + g - 1) / g, n_params = n_out * gpr;
        std::vector<double> ef(n_params), em(n_params);
        for (size_t p = 0; p < n_params; ++p) {
          const size_t r = p / gpr, c0 = (p % gpr) * g, n = std::min<size_t>(g, n_in - c0);
          const float* wg = cw ? cw + c0 : ones.data();
          ef[p] = weighted_group_error(&w[r * n_in + c0], wg, n, full.scales[p], full.mins[p]);
          em[p] = weighted_group_error(&w[r * n_in + c0], wg, n, mse.scales[p], mse.mins[p]);
        }
        double e_full = 0, e_mse = 0, worst_excess = 0;
        size_t worse_groups = 0, worse_supers = 0;
        for (size_t b = 0; b * 8 < n_params; ++b) {
          double sf = 0, sm = 0;
          for (size_t p = b * 8; p < std::min(n_params, b * 8 + 8); ++p) {
            sf += ef[p];
            sm += em[p];
            worse_groups += em[p] > ef[p];
            if (em[p] > ef[p]) worst_excess = std::max(worst_excess, (em[p] - ef[p]) / ef[p]);
          }
          e_full += sf;
          e_mse += sm;
          worse_supers += sm > sf;
        }
        MESSAGE("scheme " << int(q) << " group " << g << std::string(cw ? " weighted" : "") << ": Σ error full range "
                          << e_full << ", mse_clip " << e_mse << "; groups worse " << worse_groups << "/" << n_params
                          << " (at most +" << 100 * worst_excess << " %), super-blocks of 8 worse " << worse_supers);
        if (q == Dtype::Int4) CHECK(worse_groups == 0);
        CHECK(e_mse < e_full);
      }
}

TEST_CASE("SparseGPT with a fixed mask: that mask, kept weights on static ranges over the kept weights only") {
  const Layer l = make_layer(32, 128, 384, 21);
  const std::vector<float> h = hessian_of(l);
  for (Dtype q : {Dtype::Int4, Dtype::Int4k}) {
    CAPTURE(int(q));
    // The pruning-only pass, then the quantizing pass on its mask.
    std::vector<float> w = l.w;
    SparseGptOptions first;
    first.target = SparsityTarget::unstructured(0.5);
    const std::vector<uint8_t> mask = sparsegpt_prune(w.data(), l.n_out, l.n_in, h.data(), first).mask;
    SparseGptOptions second;
    second.quant = {q, 32, true};
    second.fixed_mask = mask.data();
    const std::vector<float> pruned = w;
    const SparseGptResult res = sparsegpt_prune(w.data(), l.n_out, l.n_in, h.data(), second);
    CHECK(res.mask == mask);
    // Every pruned weight is +0; every kept one is its code's value on parameters whose range
    // covers the kept weights of the pruning pass only: a group's pruned entries (here, whatever
    // the pruning pass left there, scaled up 100x) do not move its parameters.
    std::vector<float> outsized = pruned;
    for (size_t i = 0; i < outsized.size(); ++i)
      if (mask[i]) outsized[i] = 100.0f * l.w[i];
    const StaticInt4Params a = choose_int4_params(pruned.data(), l.n_out, l.n_in, second.quant, nullptr, mask.data());
    const StaticInt4Params b = choose_int4_params(outsized.data(), l.n_out, l.n_in, second.quant, nullptr, mask.data());
    CHECK(a.scales == b.scales);
    CHECK(a.mins == b.mins);
    const StaticInt4Params c = choose_int4_params(outsized.data(), l.n_out, l.n_in, second.quant, nullptr, nullptr);
    CHECK(c.scales != a.scales);  // without the mask, the outsized entries do widen the ranges
    const size_t gpr = (l.n_in + 31) / 32;
    for (size_t r = 0; r < l.n_out; ++r)
      for (size_t j = 0; j < l.n_in; ++j) {
        const size_t i = r * l.n_in + j;
        if (mask[i]) {
          REQUIRE(is_positive_zero(w[i]));
          continue;
        }
        float s, m;
        if (q == Dtype::Int4k) {
          const size_t p = r * gpr + j / 32, b0 = p / 8;
          s = endor::f16_to_f32(res.super_scales_f16[2 * b0]) * float(res.param_codes[2 * p]);
          m = -(endor::f16_to_f32(res.super_scales_f16[2 * b0 + 1]) * float(res.param_codes[2 * p + 1]));
        } else {
          s = endor::f16_to_f32(res.group_scales_f16[r * gpr + j / 32]);
          m = endor::f16_to_f32(res.group_mins_f16[r * gpr + j / 32]);
        }
        REQUIRE(w[i] == float(res.int4_codes[i]) * s + m);
      }
  }
}
