// The activation ops on the GPU against the CPU backend (and, for attention, a double-precision
// reference), with u = 2^-24 and every bound derived in the test that uses it:
//   add, scale, relu, add_bias — the same IEEE operations: bit-identical.
//   layer_norm, rms_norm — the same f32 formula; the statistics are double sums taken in another
//     order, so float(mean) and float(var) may land one ulp apart (≤ 2u relative), which moves the
//     output by a few u relative to its scale.
//   silu_mul, rope — CUDA's expf/sincosf are within 2 ulp, the CPU's exp8 (silu_mul) and glibc's
//     sinf/cosf within 1: the outputs differ by a few u relative to their inputs' scale.
//   attention — scores, softmax and weighted sums in f32 on both sides (online softmax on the GPU).
#include "cuda_test_util.h"

using namespace endor;
using namespace endor::cudatest;

namespace {

const size_t kDims[] = {1, 3, 65, 127, 4097, 8192};
const size_t kTokens[] = {1, 3, 17};

struct OpBackends {
  std::unique_ptr<Backend> gpu = make_cuda_backend();
  std::unique_ptr<Backend> cpu = make_exact_cpu_backend(0);
};

}  // namespace

GPU_TEST_CASE("cuda layer_norm and rms_norm match the CPU backend within a few u") {
  REQUIRE_GPU();
  OpBackends be;
  uint32_t seed = 1;
  size_t identical = 0, total = 0;
  for (size_t dim : kDims)
    for (size_t T : kTokens)
      for (bool with_beta : {true, false}) {
        CAPTURE(dim);
        CAPTURE(T);
        CAPTURE(with_beta);
        const auto x = random_normal(T * dim, ++seed, 3.0f, 2.0f);  // an offset mean tests the centring
        const auto gamma = random_normal(dim, ++seed, 1.0f, 0.5f);
        const auto beta = random_normal(dim, ++seed);
        const float eps = 1e-5f;
        DeviceFloats dx(*be.gpu, x), dg(*be.gpu, gamma), db(*be.gpu, beta), dout(*be.gpu, T * dim);

        // layer_norm: out = ((x − mean_f)·rstd)·γ (+ β). mean_f may differ by 2u·|mean|, rstd by
        // ≤ 8u relative, the three roundings by 1u each per side, β's addition by 2u·|out|:
        //   |Δ| ≤ 16u·rstd·|γ|·(|x| + 2|mean|) + 4u·(|β| + |out|).
        be.gpu->layer_norm(dx.get(), dg.get(), with_beta ? db.get() : nullptr, eps, T, dim, dout.get());
        std::vector<float> ref(T * dim);
        be.cpu->layer_norm(x.data(), gamma.data(), with_beta ? beta.data() : nullptr, eps, T, dim, ref.data());
        std::vector<float> got = dout.download();
        size_t bad = 0;
        for (size_t t = 0; t < T; ++t) {
          double mean = 0.0, var = 0.0;
          for (size_t i = 0; i < dim; ++i) mean += x[t * dim + i];
          mean /= double(dim);
          for (size_t i = 0; i < dim; ++i) var += (x[t * dim + i] - mean) * (x[t * dim + i] - mean);
          const double rstd = 1.0 / std::sqrt(var / double(dim) + eps);
          for (size_t i = 0; i < dim; ++i) {
            const size_t k = t * dim + i;
            const double tol = 16 * kU * rstd * std::fabs(gamma[i]) * (std::fabs(x[k]) + 2 * std::fabs(mean)) +
                               4 * kU * ((with_beta ? std::fabs(beta[i]) : 0.0) + std::fabs(ref[k])) + 1e-30;
            bad += !(std::fabs(double(got[k]) - double(ref[k])) <= tol);
            identical += bits(got[k]) == bits(ref[k]);
            ++total;
          }
        }
        CHECK(bad == 0);

        // rms_norm: out = γ·(x·r); r may differ by ≤ 8u relative, two roundings per side:
        //   |Δ| ≤ 16u·r·|γ·x|.
        be.gpu->rms_norm(dx.get(), dg.get(), eps, T, dim, dout.get());
        be.cpu->rms_norm(x.data(), gamma.data(), eps, T, dim, ref.data());
        got = dout.download();
        bad = 0;
        for (size_t t = 0; t < T; ++t) {
          double sq = 0.0;
          for (size_t i = 0; i < dim; ++i) sq += double(x[t * dim + i]) * x[t * dim + i];
          const double r = 1.0 / std::sqrt(sq / double(dim) + eps);
          for (size_t i = 0; i < dim; ++i) {
            const size_t k = t * dim + i;
            const double tol = 16 * kU * r * std::fabs(double(gamma[i]) * x[k]) + 1e-30;
            bad += !(std::fabs(double(got[k]) - double(ref[k])) <= tol);
            identical += bits(got[k]) == bits(ref[k]);
            ++total;
          }
        }
        CHECK(bad == 0);
      }
  MESSAGE("norm outputs bit-identical to the CPU backend: " << identical << " of " << total);
}

GPU_TEST_CASE("cuda add, scale, relu, add_bias are bit-identical to the CPU backend; silu_mul within 16u") {
  REQUIRE_GPU();
  OpBackends be;
  for (size_t n : {size_t(1), size_t(33), size_t(100003), size_t(3) << 20}) {
    CAPTURE(n);
    auto a = random_normal(n, 1, 0.0f, 4.0f);
    const auto b = random_normal(n, 2);
    a[0] = -0.0f;  // relu(−0) = +0, as the CPU writes it
    if (n > 4) {
      a[1] = std::numeric_limits<float>::denorm_min();
      a[2] = 30.0f;
      a[3] = -100.0f;  // exp(100) overflows to inf on both sides: silu → −0
      a[4] = std::numeric_limits<float>::quiet_NaN();  // relu(NaN) = 0 on both
    }
    DeviceFloats da(*be.gpu, a), db(*be.gpu, b), dout(*be.gpu, n);
    auto same_bits = [&](const std::vector<float>& got, const std::vector<float>& want) {
      size_t differ = 0;
      for (size_t i = 0; i < n; ++i) differ += bits(got[i]) != bits(want[i]);
      return differ;
    };

    std::vector<float> host = a;
    be.gpu->relu(da.get(), n);
    be.cpu->relu(host.data(), n);
    CHECK(same_bits(da.download(), host) == 0);

    std::vector<float> clean = a;  // the remaining ops on finite inputs (NaN → 0)
    if (n > 4) clean[4] = 0.5f;
    be.gpu->upload(da.get(), clean.data(), n);
    host = clean;
    be.gpu->add(da.get(), db.get(), n);
    be.cpu->add(host.data(), b.data(), n);
    CHECK(same_bits(da.download(), host) == 0);

    be.gpu->scale(da.get(), 0.3712f, n);
    be.cpu->scale(host.data(), 0.3712f, n);
    CHECK(same_bits(da.download(), host) == 0);

    const size_t dim = n >= 33 ? 33 : 1;  // add_bias over [n/dim, dim]
    const size_t tokens = n / dim;
    const auto bias = random_normal(dim, 3);
    DeviceFloats dbias(*be.gpu, bias);
    be.gpu->add_bias(da.get(), dbias.get(), tokens, dim);
    be.cpu->add_bias(host.data(), bias.data(), tokens, dim);
    CHECK(same_bits(da.download(), host) == 0);

    // silu_mul: out = (g/(1 + e^-g))·up. e^-g differs by ≤ 3 ulp (≤ 6u), carried into 1 + e^-g;
    // the add, divide and multiply round once per side: relative difference ≤ 12u < 16u, plus
    // a few subnormal spacings (2^-149 each) where the result is subnormal.
    be.gpu->upload(da.get(), clean.data(), n);
    be.gpu->silu_mul(da.get(), db.get(), n, dout.get());
    std::vector<float> ref(n);
    be.cpu->silu_mul(clean.data(), b.data(), n, ref.data());
    const std::vector<float> got = dout.download();
    size_t bad = 0;
    for (size_t i = 0; i < n; ++i) bad += !(std::fabs(double(got[i]) - double(ref[i])) <= 16 * kU * std::fabs(ref[i]) + std::ldexp(4.0, -149));
    CHECK(bad == 0);
  }
}

GPU_TEST_CASE("cuda rope matches the CPU backend: partial rotary dims, attention factor, large positions") {
  REQUIRE_GPU();
  OpBackends be;
  struct Case {
    uint32_t n_heads, head_dim, rotary_dim;
    float attention_factor;
  };
  const Case cases[] = {{4, 64, 64, 1.0f}, {8, 128, 128, 1.0f}, {2, 64, 32, 1.25f}, {3, 80, 80, 1.0f}, {1, 2, 2, 1.0f}};
  const std::vector<int32_t> positions = {0, 1, 2, 17, 4095, 131071, 3};
  const size_t T = positions.size();
  uint32_t seed = 50;
  for (const Case& c : cases) {
    CAPTURE(c.n_heads);
    CAPTURE(c.head_dim);
    CAPTURE(c.rotary_dim);
    std::vector<float> inv_freq(c.rotary_dim / 2);
    for (uint32_t i = 0; i < inv_freq.size(); ++i)
      inv_freq[i] = float(1.0 / std::pow(10000.0, 2.0 * i / double(c.rotary_dim)));
    RopeParams p;
    p.head_dim = c.head_dim;
    p.rotary_dim = c.rotary_dim;
    p.inv_freq = inv_freq.data();
    p.attention_factor = c.attention_factor;
    const auto x = random_normal(T * c.n_heads * c.head_dim, ++seed);
    DeviceFloats dx(*be.gpu, x);
    be.gpu->rope(dx.get(), T, c.n_heads, positions.data(), p);
    std::vector<float> ref = x;
    be.cpu->rope(ref.data(), T, c.n_heads, positions.data(), p);
    const std::vector<float> got = dx.download();
    // cos/sin differ by ≤ 3 ulp (≤ 6u) before and 2u after the attention-factor product; the
    // two products and the sum round once per side: |Δ| ≤ 14u·af·(|x1| + |x2|) < 16u·af·(…).
    size_t bad = 0, untouched_changed = 0;
    const uint32_t half = c.rotary_dim / 2;
    for (size_t th = 0; th < T * c.n_heads; ++th) {
      const float* xi = x.data() + th * c.head_dim;
      for (uint32_t i = 0; i < half; ++i) {
        const double tol = 16 * kU * c.attention_factor * (std::fabs(xi[i]) + std::fabs(xi[i + half]));
        for (uint32_t d : {i, i + half})
          bad += !(std::fabs(double(got[th * c.head_dim + d]) - double(ref[th * c.head_dim + d])) <= tol);
      }
      for (uint32_t d = c.rotary_dim; d < c.head_dim; ++d) untouched_changed += bits(got[th * c.head_dim + d]) != bits(xi[d]);
    }
    CHECK(bad == 0);
    CHECK(untouched_changed == 0);
  }
  RopeParams odd;
  odd.head_dim = 64;
  odd.rotary_dim = 63;
  std::vector<float> inv(32, 1.0f);
  odd.inv_freq = inv.data();
  DeviceFloats dx(*be.gpu, 64);
  const int32_t pos = 0;
  CHECK_THROWS_AS(be.gpu->rope(dx.get(), 1, 1, &pos, odd), Error);
  odd.rotary_dim = 64;
  odd.inv_freq = nullptr;
  CHECK_THROWS_AS(be.gpu->rope(dx.get(), 1, 1, &pos, odd), Error);
}

GPU_TEST_CASE("cuda add_rms_norm and rope_qk: one launch each, bit-identical to the unfused ops, the CPU's within their bounds") {
  REQUIRE_GPU();
  OpBackends be;
  uint32_t seed = 70;
  // add_rms_norm: x must be exactly add()'s (the same IEEE sums) on both backends, out exactly the
  // GPU's rms_norm of that x, and within rms_norm's bound (16u·r·|γ·x|, test above) of the CPU's.
  for (size_t dim : kDims)
    for (size_t T : kTokens) {
      CAPTURE(dim);
      CAPTURE(T);
      const auto x = random_normal(T * dim, ++seed, 0.5f, 2.0f);
      const auto y = random_normal(T * dim, ++seed);
      const auto gamma = random_normal(dim, ++seed, 1.0f, 0.5f);
      const float eps = 1e-6f;
      DeviceFloats dx(*be.gpu, x), dy(*be.gpu, y), dg(*be.gpu, gamma), dout(*be.gpu, T * dim);
      be.gpu->add_rms_norm(dx.get(), dy.get(), dg.get(), eps, T, dim, dout.get());
      DeviceFloats ux(*be.gpu, x), uout(*be.gpu, T * dim);
      be.gpu->add(ux.get(), dy.get(), T * dim);
      be.gpu->rms_norm(ux.get(), dg.get(), eps, T, dim, uout.get());
      std::vector<float> ref_x = x, ref(T * dim);
      be.cpu->add_rms_norm(ref_x.data(), y.data(), gamma.data(), eps, T, dim, ref.data());
      const std::vector<float> got_x = dx.download(), got = dout.download();
      CHECK(std::memcmp(got_x.data(), ux.download().data(), T * dim * 4) == 0);
      CHECK(std::memcmp(got.data(), uout.download().data(), T * dim * 4) == 0);
      CHECK(std::memcmp(got_x.data(), ref_x.data(), T * dim * 4) == 0);
      size_t bad = 0;
      for (size_t t = 0; t < T; ++t) {
        double sq = 0.0;
        for (size_t i = 0; i < dim; ++i) sq += double(ref_x[t * dim + i]) * ref_x[t * dim + i];
        const double r = 1.0 / std::sqrt(sq / double(dim) + eps);
        for (size_t i = 0; i < dim; ++i) {
          const size_t k = t * dim + i;
          const double tol = 16 * kU * r * std::fabs(double(gamma[i]) * ref_x[k]) + 1e-30;
          bad += !(std::fabs(double(got[k]) - double(ref[k])) <= tol);
        }
      }
      CHECK(bad == 0);
    }
  // rope_qk: q and k (GQA, partial rotary dims, attention factor) in one launch equal two rope()
  // launches bit for bit, and the CPU's within rope's bound (16u·af·(|x1| + |x2|), test above).
  struct Case {
    uint32_t n_heads, n_kv_heads, head_dim, rotary_dim;
    float attention_factor;
  };
  const Case cases[] = {{4, 4, 64, 64, 1.0f}, {8, 2, 128, 128, 1.0f}, {6, 3, 64, 32, 1.25f}, {1, 1, 2, 2, 1.0f}};
  const std::vector<int32_t> positions = {5, 0, 131071, 17, 4095};
  const size_t T = positions.size();
  for (const Case& c : cases) {
    CAPTURE(c.n_heads);
    CAPTURE(c.n_kv_heads);
    CAPTURE(c.rotary_dim);
    std::vector<float> inv_freq(c.rotary_dim / 2);
    for (uint32_t i = 0; i < inv_freq.size(); ++i)
      inv_freq[i] = float(1.0 / std::pow(500000.0, 2.0 * i / double(c.rotary_dim)));
    RopeParams p;
    p.head_dim = c.head_dim;
    p.rotary_dim = c.rotary_dim;
    p.inv_freq = inv_freq.data();
    p.attention_factor = c.attention_factor;
    const auto q = random_normal(T * c.n_heads * c.head_dim, ++seed);
    const auto k = random_normal(T * c.n_kv_heads * c.head_dim, ++seed);
    DeviceFloats dq(*be.gpu, q), dk(*be.gpu, k), uq(*be.gpu, q), uk(*be.gpu, k);
    be.gpu->rope_qk(dq.get(), c.n_heads, dk.get(), c.n_kv_heads, T, positions.data(), p);
    be.gpu->rope(uq.get(), T, c.n_heads, positions.data(), p);
    be.gpu->rope(uk.get(), T, c.n_kv_heads, positions.data(), p);
    std::vector<float> rq = q, rk = k;
    be.cpu->rope_qk(rq.data(), c.n_heads, rk.data(), c.n_kv_heads, T, positions.data(), p);
    const std::vector<float> gq = dq.download(), gk = dk.download();
    CHECK(std::memcmp(gq.data(), uq.download().data(), gq.size() * 4) == 0);
    CHECK(std::memcmp(gk.data(), uk.download().data(), gk.size() * 4) == 0);
    size_t bad = 0, rotated = 0;
    const uint32_t half = c.rotary_dim / 2;
    for (const auto& [x, got, ref] : {std::tie(q, gq, rq), std::tie(k, gk, rk)})
      for (size_t th = 0; th < x.size() / c.head_dim; ++th)
        for (uint32_t i = 0; i < half; ++i) {
          const float* xi = x.data() + th * c.head_dim;
          const double tol = 16 * kU * c.attention_factor * (std::fabs(xi[i]) + std::fabs(xi[i + half]));
          for (uint32_t d : {i, i + half}) {
            bad += !(std::fabs(double(got[th * c.head_dim + d]) - double(ref[th * c.head_dim + d])) <= tol);
            rotated += bits(got[th * c.head_dim + d]) != bits(xi[d]);
          }
        }
    CHECK(bad == 0);
    CHECK(rotated > 0);
  }
}

GPU_TEST_CASE("cuda attention: causal, GQA, sliding window, prefill and decode, head_dim 1..256") {
  REQUIRE_GPU();
  OpBackends be;
  struct Case {
    uint32_t n_heads, n_kv_heads, head_dim;
    size_t n_past, n_tokens;
    uint32_t window;
  };
  const Case cases[] = {{1, 1, 64, 0, 1, 0},     {4, 4, 64, 5, 3, 0},    {8, 2, 128, 37, 9, 0},
                        {8, 1, 80, 100, 1, 0},   {4, 2, 128, 50, 17, 8}, {2, 2, 256, 300, 2, 0},
                        {32, 8, 128, 1000, 1, 0}, {4, 4, 32, 0, 64, 16}, {3, 1, 1, 10, 4, 0},
                        {6, 3, 200, 20, 5, 3},   {2, 1, 64, 0, 33, 1}};
  uint32_t seed = 70;
  for (const Case& c : cases) {
    CAPTURE(c.n_heads);
    CAPTURE(c.n_kv_heads);
    CAPTURE(c.head_dim);
    CAPTURE(c.n_past);
    CAPTURE(c.n_tokens);
    CAPTURE(c.window);
    const size_t hd = c.head_dim, n_ctx = c.n_past + c.n_tokens, capacity = n_ctx + 5;
    const size_t kv_row = size_t(c.n_kv_heads) * hd;
    auto k = random_normal(capacity * kv_row, ++seed);
    auto v = random_normal(capacity * kv_row, ++seed);
    // Rows past the valid ones must never be read: values this large would dominate any output.
    for (size_t i = n_ctx * kv_row; i < capacity * kv_row; ++i) k[i] = v[i] = 1e4f;
    const auto q = random_normal(c.n_tokens * c.n_heads * hd, ++seed);
    AttentionParams p;
    p.n_heads = c.n_heads;
    p.n_kv_heads = c.n_kv_heads;
    p.head_dim = c.head_dim;
    p.scale = float(1.0 / std::sqrt(double(hd)));
    p.sliding_window = c.window;

    DeviceFloats dq(*be.gpu, q), dk(*be.gpu, k), dv(*be.gpu, v), dout(*be.gpu, c.n_tokens * c.n_heads * hd);
    be.gpu->attention(dq.get(), dk.get(), dv.get(), c.n_past, c.n_tokens, p, dout.get());
    const std::vector<float> got = dout.download();
    std::vector<float> cpu_out(c.n_tokens * c.n_heads * hd);
    be.cpu->attention(q.data(), k.data(), v.data(), c.n_past, c.n_tokens, p, cpu_out.data());

    // Double reference. Bound per output d of (t, h), with keys j in [lo, pos], S = max_j
    // scale·Σ|q·k_j|, V_d = Σ_j p_j·|v_jd|: scores are dot products of ≤ head_dim terms plus the
    // scale product, so |δs| ≤ Δ = (head_dim + 4)·u·S, which moves each p_j by ≤ (e^{2Δ} − 1)·p_j;
    // exp (≤ 2 ulp), the running rescaling of the online softmax and the sums add ≤ 6u per key
    // and a fixed 64u for the final combine: |err| ≤ (e^{2Δ} − 1 + (6·n_keys + 64)·u)·V_d.
    size_t bad_ref = 0, bad_cpu = 0;
    const size_t group = c.n_heads / c.n_kv_heads;
    for (size_t t = 0; t < c.n_tokens; ++t)
      for (size_t h = 0; h < c.n_heads; ++h) {
        const size_t pos = c.n_past + t;
        const size_t lo = (c.window && pos + 1 > c.window) ? pos + 1 - c.window : 0;
        const float* qv = q.data() + (t * c.n_heads + h) * hd;
        const size_t off = (h / group) * hd;
        std::vector<double> s(pos + 1 - lo);
        double s_max = -1e300, abs_max = 0.0;
        for (size_t j = lo; j <= pos; ++j) {
          double dot = 0.0, abs_dot = 0.0;
          for (size_t d = 0; d < hd; ++d) {
            dot += double(qv[d]) * k[j * kv_row + off + d];
            abs_dot += std::fabs(double(qv[d]) * k[j * kv_row + off + d]);
          }
          s[j - lo] = dot * p.scale;
          s_max = std::max(s_max, s[j - lo]);
          abs_max = std::max(abs_max, abs_dot * p.scale);
        }
        double z = 0.0;
        for (double& e : s) z += (e = std::exp(e - s_max));
        const double delta = (double(hd) + 4.0) * kU * abs_max;
        const double rel = std::expm1(2.0 * delta) + (6.0 * double(s.size()) + 64.0) * kU;
        for (size_t d = 0; d < hd; ++d) {
          double o = 0.0, scale_d = 0.0;
          for (size_t j = lo; j <= pos; ++j) {
            const double pj = s[j - lo] / z;
            o += pj * v[j * kv_row + off + d];
            scale_d += pj * std::fabs(double(v[j * kv_row + off + d]));
          }
          const double tol = rel * scale_d + 1e-30;
          const size_t i = (t * c.n_heads + h) * hd + d;
          bad_ref += !(std::fabs(double(got[i]) - o) <= tol);
          bad_cpu += !(std::fabs(double(got[i]) - double(cpu_out[i])) <= 2.0 * tol);
        }
      }
    CHECK(bad_ref == 0);
    CHECK(bad_cpu == 0);
  }

  AttentionParams too_wide;
  too_wide.n_heads = too_wide.n_kv_heads = 1;
  too_wide.head_dim = 300;  // beyond the kernel's 8 dims per lane
  DeviceFloats buf(*be.gpu, 600);
  CHECK_THROWS_AS(be.gpu->attention(buf.get(), buf.get(), buf.get(), 0, 1, too_wide, buf.get()), Error);
  AttentionParams uneven;
  uneven.n_heads = 3;
  uneven.n_kv_heads = 2;
  uneven.head_dim = 4;
  CHECK_THROWS_AS(be.gpu->attention(buf.get(), buf.get(), buf.get(), 0, 1, uneven, buf.get()), Error);
}
