// Non-weight ops of the CPU backend against direct double-precision formulas, with derived
// bounds (u = 2^-24 is the f32 unit roundoff; each bound names the roundings it covers).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernel_test_util.h"

using namespace endor;
using namespace endor::ktest;

namespace {

constexpr double u = kEpsF32;

// Activations with a non-zero mean and a spread of magnitudes, as real hidden states have.
std::vector<float> hidden_states(size_t n, uint32_t seed) {
  std::vector<float> x = random_activations(n, seed, 3.0f);
  for (size_t i = 0; i < n; ++i) x[i] += 0.5f;
  return x;
}

}  // namespace

TEST_CASE("rms_norm follows HF Llama: out = γ·(x·rsqrt(mean(x²)+eps))") {
  auto b = make_cpu_backend();
  for (size_t dim : {size_t(1), size_t(7), size_t(64), size_t(4097)})
    for (size_t T : {size_t(1), size_t(3)}) {
      const auto x = hidden_states(T * dim, uint32_t(dim + T));
      const auto g = random_activations(dim, 9);
      std::vector<float> out(T * dim);
      const float eps = 1e-6f;
      b->rms_norm(x.data(), g.data(), eps, T, dim, out.data());
      size_t bad = 0;
      for (size_t t = 0; t < T; ++t) {
        double ss = 0;
        for (size_t i = 0; i < dim; ++i) ss += double(x[t * dim + i]) * x[t * dim + i];
        const double r = 1.0 / std::sqrt(ss / double(dim) + double(eps));
        for (size_t i = 0; i < dim; ++i) {
          const double ref = double(g[i]) * (double(x[t * dim + i]) * r);
          // mean → f32 (1), + eps (1), sqrt (1), reciprocal (1), two products (2): 6u, +2 slack.
          bad += !(std::fabs(out[t * dim + i] - ref) <= 8 * u * std::fabs(ref) + 1e-37);
        }
      }
      CAPTURE(dim);
      CHECK(bad == 0);
    }
}

TEST_CASE("layer_norm: (x − mean)·rstd·γ + β with the biased variance") {
  auto b = make_cpu_backend();
  for (size_t dim : {size_t(1), size_t(5), size_t(768), size_t(4097)}) {
    const size_t T = 2;
    const auto x = hidden_states(T * dim, uint32_t(dim));
    const auto g = random_activations(dim, 1), beta = random_activations(dim, 2);
    std::vector<float> out(T * dim);
    const float eps = 1e-5f;
    for (bool with_beta : {true, false}) {
      b->layer_norm(x.data(), g.data(), with_beta ? beta.data() : nullptr, eps, T, dim, out.data());
      size_t bad = 0;
      for (size_t t = 0; t < T; ++t) {
        double mean = 0, var = 0;
        for (size_t i = 0; i < dim; ++i) mean += x[t * dim + i];
        mean /= double(dim);
        for (size_t i = 0; i < dim; ++i) var += (x[t * dim + i] - mean) * (x[t * dim + i] - mean);
        const double rstd = 1.0 / std::sqrt(var / double(dim) + double(eps));
        for (size_t i = 0; i < dim; ++i) {
          const double centred = double(x[t * dim + i]) - mean;
          const double ref = centred * rstd * g[i] + (with_beta ? beta[i] : 0.0);
          // The f32 mean is off by u·|mean|; the subtraction, rstd (var→f32, +eps, sqrt, 1/x) and
          // two products add 7u of |x − mean|; the β add u of |ref|.
          const double tol = (8 * u * std::fabs(centred) + 2 * u * std::fabs(mean)) * rstd * std::fabs(g[i]) +
                             2 * u * std::fabs(ref) + 1e-37;
          bad += !(std::fabs(out[t * dim + i] - ref) <= tol);
        }
      }
      CAPTURE(dim);
      CHECK(bad == 0);
    }
  }
}

TEST_CASE("rope: half-split rotate_half with f32 angles pos·inv_freq, as HF computes them") {
  auto b = make_cpu_backend();
  for (uint32_t head_dim : {2u, 64u, 128u})
    for (uint32_t rotary_dim : {head_dim, head_dim / 2}) {
      if (rotary_dim % 2 != 0 || rotary_dim == 0) continue;
      const uint32_t n_heads = 3, half = rotary_dim / 2;
      std::vector<float> inv_freq(half);
      for (uint32_t i = 0; i < half; ++i) inv_freq[i] = float(std::pow(10000.0, -2.0 * i / rotary_dim));
      // Large positions make the f32 rounding of pos·inv_freq visible (~0.004 rad at 1e5).
      const std::vector<int32_t> pos = {0, 1, 7, 4095, 100000, 131071};
      const size_t T = pos.size();
      const auto x0 = random_activations(T * n_heads * head_dim, head_dim);
      auto x = x0;
      RopeParams p;
      p.head_dim = head_dim;
      p.rotary_dim = rotary_dim;
      p.inv_freq = inv_freq.data();
      p.attention_factor = 0.75f;
      b->rope(x.data(), T, n_heads, pos.data(), p);
      size_t bad = 0;
      for (size_t t = 0; t < T; ++t) {
        for (uint32_t i = 0; i < half; ++i) {
          const double angle = double(float(pos[t]) * inv_freq[i]);  // the f32 product, exactly
          const double c = std::cos(angle) * 0.75, s = std::sin(angle) * 0.75;
          for (uint32_t h = 0; h < n_heads; ++h) {
            const size_t base = (t * n_heads + h) * head_dim;
            const double x1 = x0[base + i], x2 = x0[base + i + half];
            const double r1 = x1 * c - x2 * s, r2 = x2 * c + x1 * s;
            // cos/sin in f32 (≤ 1 ulp each) and × factor (1), two products (1), one sum (1).
            const double scale = std::fabs(x1) + std::fabs(x2);
            bad += !(std::fabs(x[base + i] - r1) <= 6 * u * scale + 1e-37);
            bad += !(std::fabs(x[base + i + half] - r2) <= 6 * u * scale + 1e-37);
          }
        }
        for (uint32_t h = 0; h < n_heads; ++h)  // dims past rotary_dim pass through untouched
          for (uint32_t d = rotary_dim; d < head_dim; ++d)
            bad += x[(t * n_heads + h) * head_dim + d] != x0[(t * n_heads + h) * head_dim + d];
      }
      CAPTURE(head_dim);
      CAPTURE(rotary_dim);
      CHECK(bad == 0);
    }
  RopeParams odd;
  odd.head_dim = 6;
  odd.rotary_dim = 5;
  std::vector<float> inv(3, 1.0f), x(6);
  odd.inv_freq = inv.data();
  const int32_t p0 = 0;
  CHECK_THROWS_AS(b->rope(x.data(), 1, 1, &p0, odd), Error);
}

namespace {

// Naive attention in double: for query t at position n_past + t, keys in (pos − window, pos].
// Also returns, per output, the bound of the derived error (see the test).
void reference_attention(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                         size_t n_past, size_t T, const AttentionParams& p, std::vector<double>& out,
                         std::vector<double>& tol) {
  const size_t hd = p.head_dim, nh = p.n_heads, nkv = p.n_kv_heads, group = nh / nkv;
  out.assign(T * nh * hd, 0.0);
  tol.assign(T * nh * hd, 0.0);
  for (size_t t = 0; t < T; ++t)
    for (size_t h = 0; h < nh; ++h) {
      const size_t pos = n_past + t, kvh = h / group;
      const size_t lo = (p.sliding_window && pos + 1 > p.sliding_window) ? pos + 1 - p.sliding_window : 0;
      std::vector<double> s, mag;
      for (size_t j = lo; j <= pos; ++j) {
        double d = 0, m = 0;
        for (size_t i = 0; i < hd; ++i) {
          d += double(q[(t * nh + h) * hd + i]) * k[(j * nkv + kvh) * hd + i];
          m += std::fabs(double(q[(t * nh + h) * hd + i]) * k[(j * nkv + kvh) * hd + i]);
        }
        s.push_back(d * p.scale);
        mag.push_back(m * std::fabs(p.scale));
      }
      const double mx = *std::max_element(s.begin(), s.end());
      double sum = 0;
      for (double& e : s) sum += (e = std::exp(e - mx));
      // Score error δ ≤ (hd/8 + 6)·u·Σ|q·k|·|scale| (8-lane dot, scale product); softmax adds
      // exp (2u), the running sum ((n + 1)u) and the division (u): each weight p_j is off by at
      // most p_j·(2δ + (n + 5)u), and the weighted sum of v another (n + 1)u of Σ p_j|v_j|.
      const double delta = (double(hd) / 8 + 6) * u * *std::max_element(mag.begin(), mag.end());
      const double n = double(s.size());
      for (size_t i = 0; i < hd; ++i) {
        double o = 0, a = 0;
        for (size_t j = lo; j <= pos; ++j) {
          const double pj = s[j - lo] / sum, vj = v[(j * nkv + kvh) * hd + i];
          o += pj * vj;
          a += pj * std::fabs(vj);
        }
        out[(t * nh + h) * hd + i] = o;
        tol[(t * nh + h) * hd + i] = (2 * delta + (2 * n + 8) * u) * a + 1e-30;
      }
    }
}

}  // namespace

TEST_CASE("attention: causal GQA with and without a sliding window, decode and prefill") {
  auto b = make_cpu_backend();
  struct Case {
    uint32_t nh, nkv, hd, window;
    size_t n_past, T;
  };
  const Case cases[] = {{1, 1, 1, 0, 0, 1},   {4, 4, 8, 0, 0, 17},  {8, 2, 64, 0, 40, 1},
                        {8, 2, 64, 0, 5, 8},  {6, 3, 16, 4, 0, 13}, {4, 1, 32, 16, 30, 3},
                        {2, 1, 128, 1, 9, 2}, {3, 3, 7, 100, 3, 4},
                        // decode with enough work for every thread: heads split across threads
                        // mid-GQA-group, with and without a window
                        {6, 3, 64, 0, 300, 1}, {4, 4, 128, 150, 400, 1}};
  for (const Case& c : cases) {
    const AttentionParams p = attention_params(c.nh, c.nkv, c.hd, c.window);
    const size_t capacity = c.n_past + c.T + 3;  // rows past n_past + T must not be read
    auto q = random_activations(c.T * c.nh * c.hd, 1, 2.0f);
    auto k = random_activations(capacity * c.nkv * c.hd, 2, 2.0f);
    auto v = random_activations(capacity * c.nkv * c.hd, 3);
    for (size_t i = (c.n_past + c.T) * c.nkv * c.hd; i < k.size(); ++i) k[i] = v[i] = std::nanf("");
    std::vector<float> out(c.T * c.nh * c.hd, 9.0f);
    b->attention(q.data(), k.data(), v.data(), c.n_past, c.T, p, out.data());
    std::vector<double> ref, tol;
    reference_attention(q, k, v, c.n_past, c.T, p, ref, tol);
    size_t bad = 0;
    for (size_t i = 0; i < out.size(); ++i) bad += !(std::fabs(out[i] - ref[i]) <= tol[i]);
    CAPTURE(c.nh);
    CAPTURE(c.nkv);
    CAPTURE(c.hd);
    CAPTURE(c.window);
    CAPTURE(c.n_past);
    CAPTURE(c.T);
    CHECK(bad == 0);
    // f16 caches: attention_f16 over the halves = attention over the halves widened to f32 (the
    // same arithmetic on the same values; decode widens row by row, prefill all at once).
    std::vector<uint16_t> k16(k.size()), v16(v.size());
    b->store_f16(k16.data(), k.data(), k.size());
    b->store_f16(v16.data(), v.data(), v.size());
    std::vector<float> kw(k.size()), vw(v.size());
    for (size_t i = 0; i < k.size(); ++i) {
      kw[i] = f16_to_f32(k16[i]);
      vw[i] = f16_to_f32(v16[i]);
      if (i < 3) CHECK(k16[i] == f32_to_f16(k[i]));  // stored rounded to nearest even, as the scalar conversion
    }
    std::vector<float> out16(out.size(), 9.0f), outw(out.size(), 7.0f);
    b->attention_f16(q.data(), k16.data(), v16.data(), c.n_past, c.T, p, out16.data());
    b->attention(q.data(), kw.data(), vw.data(), c.n_past, c.T, p, outw.data());
    CHECK(std::memcmp(out16.data(), outw.data(), out.size() * sizeof(float)) == 0);
  }
  AttentionParams bad_heads;
  bad_heads.n_heads = 3;
  bad_heads.n_kv_heads = 2;
  bad_heads.head_dim = 4;
  std::vector<float> buf(64);
  CHECK_THROWS_AS(b->attention(buf.data(), buf.data(), buf.data(), 0, 1, bad_heads, buf.data()), Error);
}

TEST_CASE("attention: the same bits on every instruction set, decode and batch-invariant prefill") {
  // attend_heads is one body compiled per ISA (AVX-512, AVX2, baseline) of elementwise IEEE
  // operations: each must give the portable build's bits. Head dims with and without a tail of
  // 8, key counts with and without a partial block of 8, f32 and f16 caches, 1 and 2 threads.
  const std::vector<cpu::Isa> isas = cpu_isas();
  MESSAGE("instruction sets compared: " << isas.size());
  struct Case {
    uint32_t nh, nkv, hd, window;
    size_t n_past, T;
  };
  const Case cases[] = {{9, 3, 64, 0, 0, 1},   {9, 3, 64, 0, 141, 1}, {9, 3, 64, 0, 13, 21}, {4, 2, 20, 0, 70, 1},
                        {4, 2, 20, 9, 30, 5},  {3, 1, 7, 0, 17, 3},   {8, 8, 128, 0, 300, 1}, {6, 3, 96, 40, 99, 2}};
  for (const Case& c : cases) {
    const AttentionParams p = attention_params(c.nh, c.nkv, c.hd, c.window);
    const size_t n_ctx = c.n_past + c.T;
    const auto q = random_activations(c.T * c.nh * c.hd, 11, 3.0f);
    const auto k = random_activations(n_ctx * c.nkv * c.hd, 12, 3.0f);
    const auto v = random_activations(n_ctx * c.nkv * c.hd, 13);
    std::vector<uint16_t> k16(k.size()), v16(v.size());
    std::vector<float> ref, ref16;
    for (cpu::Isa isa : isas)
      for (int threads : {1, 2}) {
        cpu::Options o;
        o.isa = isa;
        o.n_threads = threads;
        auto b = make_cpu_backend(o);
        b->store_f16(k16.data(), k.data(), k.size());
        b->store_f16(v16.data(), v.data(), v.size());
        std::vector<float> out(q.size(), 9.0f), out16(q.size(), 7.0f);
        b->attention(q.data(), k.data(), v.data(), c.n_past, c.T, p, out.data());
        b->attention_f16(q.data(), k16.data(), v16.data(), c.n_past, c.T, p, out16.data());
        if (ref.empty()) {
          ref = out, ref16 = out16;
          CHECK(std::memcmp(out.data(), out16.data(), out.size() * 4) != 0);  // the halves are other values
          continue;
        }
        CAPTURE(isa_name(isa));
        CAPTURE(threads);
        CAPTURE(c.hd);
        CAPTURE(c.n_past);
        CAPTURE(c.T);
        CHECK(std::memcmp(out.data(), ref.data(), out.size() * 4) == 0);
        CHECK(std::memcmp(out16.data(), ref16.data(), out.size() * 4) == 0);
      }
  }
}

TEST_CASE("elementwise ops: add, scale, relu, add_bias exact; silu_mul within its roundings") {
  auto b = make_cpu_backend();
  const size_t n = 100003;  // above the parallel threshold, odd
  const auto x0 = random_activations(n, 1, 4.0f), y = random_activations(n, 2);
  auto x = x0;
  b->add(x.data(), y.data(), n);
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) bad += x[i] != x0[i] + y[i];
  b->scale(x.data(), 0.5f, n);
  for (size_t i = 0; i < n; ++i) bad += x[i] != (x0[i] + y[i]) * 0.5f;
  b->relu(x.data(), n);
  for (size_t i = 0; i < n; ++i) bad += x[i] != std::max((x0[i] + y[i]) * 0.5f, 0.0f);
  CHECK(bad == 0);

  std::vector<float> out(n);
  b->silu_mul(x0.data(), y.data(), n, out.data());
  bad = 0;
  for (size_t i = 0; i < n; ++i) {
    const double g = x0[i], ref = g / (1.0 + std::exp(-g)) * y[i];
    // exp (exp8, within 1 ulp: 2u; no sensitivity to its argument, −g is exact), +1, division,
    // product: 5u.
    bad += !(std::fabs(out[i] - ref) <= 6 * u * std::fabs(ref) + 1e-37);
  }
  CHECK(bad == 0);

  const size_t T = 5, dim = 9;
  auto z = random_activations(T * dim, 3);
  const auto z0 = z, bias = random_activations(dim, 4);
  b->add_bias(z.data(), bias.data(), T, dim);
  bad = 0;
  for (size_t t = 0; t < T; ++t)
    for (size_t i = 0; i < dim; ++i) bad += z[t * dim + i] != z0[t * dim + i] + bias[i];
  CHECK(bad == 0);
}

TEST_CASE("silu_mul: the same bits on every instruction set, split and batch; within 6u of the exact formula") {
  // silu_mul is one body per ISA around exp8 (kernels/cpu/vec8.h), elementwise: each ISA, thread
  // count (for_ranges' split) and length (tails of 1-7 padded) must give the portable build's bits,
  // and a token computed alone the bits it gets within a batch.
  const std::vector<cpu::Isa> isas = cpu_isas();
  MESSAGE("instruction sets compared: " << isas.size());
  const size_t n = 40005;  // above silu_mul's parallel threshold (8192), not a multiple of 8
  auto gate = random_activations(n, 21, 6.0f);
  const auto up = random_activations(n, 22, 2.0f);
  const float inf = std::numeric_limits<float>::infinity();
  const float edges[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 20.0f, -20.0f, 86.9f, 87.5f, 88.5f, 89.0f, -86.9f,
                         -87.5f, -88.5f, -89.0f, 100.0f, -100.0f, inf, -inf, std::nanf("")};
  std::copy(std::begin(edges), std::end(edges), gate.begin() + 1000);
  std::vector<float> ref;
  for (cpu::Isa isa : isas)
    for (int threads : {1, 2, 3}) {
      cpu::Options o;
      o.isa = isa;
      o.n_threads = threads;
      auto b = make_cpu_backend(o);
      CAPTURE(isa_name(isa));
      CAPTURE(threads);
      std::vector<float> out(n, 9.0f);
      b->silu_mul(gate.data(), up.data(), n, out.data());
      if (ref.empty()) ref = out;
      CHECK(std::memcmp(out.data(), ref.data(), n * 4) == 0);
      // Tokens of dim elements alone (the same bits as in the batch) and short lengths 1-17.
      for (size_t dim : {size_t(576), size_t(1537), size_t(9001)}) {
        size_t differ = 0;
        for (size_t t = 0; (t + 1) * dim <= n; ++t) {
          std::vector<float> one(dim);
          b->silu_mul(gate.data() + t * dim, up.data() + t * dim, dim, one.data());
          differ += std::memcmp(one.data(), ref.data() + t * dim, dim * 4) != 0;
        }
        CAPTURE(dim);
        CHECK(differ == 0);
      }
      for (size_t len = 1; len <= 17; ++len) {
        std::vector<float> part(len, 9.0f);
        b->silu_mul(gate.data() + 995, up.data() + 995, len, part.data());
        CHECK(std::memcmp(part.data(), ref.data() + 995, len * 4) == 0);
      }
      std::vector<float> in_place = gate;  // out = gate
      b->silu_mul(in_place.data(), up.data(), n, in_place.data());
      CHECK(std::memcmp(in_place.data(), ref.data(), n * 4) == 0);
    }
  // Against the formula in double with std::exp: exp8 within 1 ulp (2u; −g is exact), +1, the
  // division and the product: 5u, +1 slack, as the f32 silu with glibc's expf. Where exp8
  // saturates (g < -88: e^-g = inf, while expf is finite up to 88.72) silu is -0 for a value below
  // 6e-37·|up|. The outputs that differ from that f32 expf formula's bits are counted for the log.
  size_t bad = 0, nan_ok = 0, differ_from_expf = 0;
  for (size_t i = 0; i < n; ++i) {
    const double g = gate[i], want = g / (1.0 + std::exp(-g)) * up[i];
    const float expf_formula = (gate[i] / (1.0f + std::exp(-gate[i]))) * up[i];
    differ_from_expf += std::memcmp(&expf_formula, &ref[i], 4) != 0;
    if (std::isnan(want)) {
      nan_ok += std::isnan(ref[i]);
      continue;
    }
    bad += !(ref[i] == want || std::fabs(ref[i] - want) <= 6 * u * std::fabs(want) + 6e-37 * std::fabs(up[i]));
  }
  MESSAGE("silu_mul outputs with other bits than (g / (1 + expf(-g)))·up: " << differ_from_expf << " of " << n);
  CHECK(bad == 0);
  CHECK(nan_ok == 2);  // NaN·up, and -inf / (1 + inf)
}

TEST_CASE("memory: alloc is zeroed, copies round-trip, foreign frees are refused") {
  auto b = make_cpu_backend();
  float* p = b->alloc(1000);
  CHECK(std::all_of(p, p + 1000, [](float f) { return f == 0.0f; }));
  const auto src = random_activations(1000, 5);
  std::vector<float> back(1000);
  b->upload(p, src.data(), 1000);
  float* q = b->alloc(1000);
  b->copy(q, p, 1000);
  b->download(back.data(), q, 1000);
  CHECK(back == src);
  float foreign = 0;
  CHECK_THROWS_AS(b->free(&foreign), Error);
  b->free(p);
  b->free(nullptr);
  CHECK(b->name().find(cpu::simd_level()) != std::string::npos);
  // q is released with the backend.
}

TEST_CASE("bandwidth probes report a positive rate") {
  CHECK(cpu::measure_read_bandwidth_gbps(size_t(8) << 20, 2) > 0.0);
  CHECK(cpu::measure_copy_bandwidth_gbps(size_t(8) << 20, 2) > 0.0);
}
