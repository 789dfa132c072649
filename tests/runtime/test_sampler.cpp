// Sampler properties: greedy ties, top-k = 1 is greedy, seeds reproduce, top-p keeps the minimal
// prefix, and sampled frequencies follow softmax(logits / T).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <vector>

#include "endor/kernels.h"
#include "endor/runtime.h"

using endor::Sampler;
using endor::SamplerOptions;

namespace {

std::vector<float> random_logits(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

SamplerOptions sampling(float t, uint32_t k, float p, uint64_t seed) {
  SamplerOptions o;
  o.temperature = t;
  o.top_k = k;
  o.top_p = p;
  o.seed = seed;
  return o;
}

}  // namespace

TEST_CASE("temperature 0 is argmax with ties going to the lowest id") {
  Sampler greedy(SamplerOptions{});
  const std::vector<float> a = {0.5f, 3.0f, -1.0f, 3.0f, 2.9f};
  CHECK(greedy.sample(a.data(), a.size()) == 1);
  const std::vector<float> b = {-2.0f, -2.0f, -2.0f};
  CHECK(greedy.sample(b.data(), b.size()) == 0);
  const std::vector<float> c = random_logits(1000, 3);
  size_t best = 0;
  for (size_t i = 0; i < c.size(); ++i)
    if (c[i] > c[best]) best = i;
  CHECK(greedy.sample(c.data(), c.size()) == static_cast<int32_t>(best));
}

TEST_CASE("top-k = 1 equals greedy at any temperature, ties included") {
  Sampler greedy(SamplerOptions{});
  for (uint64_t seed = 0; seed < 20; ++seed) {
    std::vector<float> v = random_logits(257, seed);
    if (seed % 2) v[200] = v[10] = 50.0f;  // a tie at the top: lowest id wins
    Sampler top1(sampling(1.5f, 1, 1.0f, seed));
    CHECK(top1.sample(v.data(), v.size()) == greedy.sample(v.data(), v.size()));
  }
}

TEST_CASE("a fixed seed reproduces the sequence; another seed changes it") {
  const std::vector<float> v = random_logits(500, 11);
  auto draw = [&](uint64_t seed) {
    Sampler s(sampling(1.0f, 0, 1.0f, seed));
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) out.push_back(s.sample(v.data(), v.size()));
    return out;
  };
  CHECK(draw(42) == draw(42));
  CHECK(draw(42) != draw(43));
}

TEST_CASE("top-p keeps the smallest prefix whose mass reaches p") {
  // Probabilities 0.5, 0.3, 0.15, 0.05 (log-probabilities as logits, temperature 1).
  const std::vector<float> v = {std::log(0.15f), std::log(0.5f), std::log(0.05f), std::log(0.3f)};
  auto seen = [&](float top_p) {
    Sampler s(sampling(1.0f, 0, top_p, 7));
    std::map<int32_t, int> counts;
    for (int i = 0; i < 4000; ++i) counts[s.sample(v.data(), v.size())]++;
    return counts;
  };
  auto only_1 = seen(0.45f);  // 0.5 alone reaches 0.45
  CHECK(only_1.size() == 1);
  CHECK(only_1.count(1) == 1);
  auto two = seen(0.7f);     // 0.5 < 0.7 <= 0.8
  CHECK(two.size() == 2);
  CHECK(two.count(1) == 1);
  CHECK(two.count(3) == 1);
  // Renormalised over the kept pair: P(id 1) = 0.5 / 0.8 = 0.625; 4000 draws, sd ~ 0.0077.
  CHECK(std::abs(two[1] / 4000.0 - 0.625) < 0.035);
  auto three = seen(0.81f);  // needs the third: 0.95
  CHECK(three.size() == 3);
  CHECK(three.count(2) == 0);
  CHECK(seen(1.0f).size() == 4);
}

TEST_CASE("sampled frequencies follow softmax(logits / temperature) within top-k") {
  const std::vector<float> v = {1.0f, 0.0f, 2.0f, -1.0f, 1.5f, -3.0f};
  const float t = 0.7f;
  const uint32_t k = 4;  // keeps ids 2, 4, 0, 1
  Sampler s(sampling(t, k, 1.0f, 99));
  const int n = 20000;
  std::vector<int> counts(v.size(), 0);
  for (int i = 0; i < n; ++i) counts[s.sample(v.data(), v.size())]++;
  double z = 0;
  for (int id : {2, 4, 0, 1}) z += std::exp(v[id] / t);
  for (int id : {2, 4, 0, 1}) {
    const double p = std::exp(v[id] / t) / z;
    const double sd = std::sqrt(p * (1 - p) / n);
    CHECK(std::abs(counts[id] / double(n) - p) < 5 * sd);
  }
  CHECK(counts[3] == 0);
  CHECK(counts[5] == 0);
}

TEST_CASE("bad sampler settings are errors") {
  CHECK_THROWS_AS(Sampler(sampling(-1.0f, 0, 1.0f, 0)), endor::Error);
  CHECK_THROWS_AS(Sampler(sampling(1.0f, 0, 0.0f, 0)), endor::Error);
  CHECK_THROWS_AS(Sampler(sampling(1.0f, 0, 1.5f, 0)), endor::Error);
}

TEST_CASE("generation_config decides greedy vs sampling like transformers' generate()") {
  CHECK(endor::default_sampler_options(nullptr, 5).temperature == 0.0f);
  CHECK(endor::default_sampler_options({{"do_sample", false}, {"temperature", 0.6}}, 5).temperature == 0.0f);
  const SamplerOptions o = endor::default_sampler_options(
      {{"do_sample", true}, {"temperature", 0.6}, {"top_p", 0.9}}, 5);
  CHECK(o.temperature == doctest::Approx(0.6));
  CHECK(o.top_p == doctest::Approx(0.9));
  CHECK(o.top_k == 50);  // GenerationConfig's default
  CHECK(o.seed == 5);
}

TEST_CASE("without top-k every candidate is ordered by (logit desc, id asc), as a comparison sort orders them") {
  // sample_logits orders a whole vocabulary with a radix sort of the logits' bits; the contract is
  // the comparison (NaN as -inf, -0 equal to +0, ties by id). Vocabularies with many ties, signed
  // zeros, infinities and NaNs, and a Qwen3-sized one.
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (size_t n : {size_t(1), size_t(7), size_t(1000), size_t(151936)}) {
    for (uint64_t seed = 0; seed < 3; ++seed) {
      std::vector<float> v = random_logits(n, seed + 100 * n);
      std::mt19937_64 rng(seed);
      const float specials[] = {0.0f, -0.0f, inf, -inf, nan, 1.0f, -1.0f, 1e-40f, -1e-40f};
      for (float& x : v)
        if (rng() % 4 == 0) x = specials[rng() % 9];
        else if (rng() % 3 == 0) x = std::round(x);  // ties between ordinary values
      endor::SamplingScratch scratch;
      endor::SamplingParams p;
      p.temperature = 0.8f;
      endor::sample_logits(v.data(), v.size(), p, 0.5, scratch);
      std::vector<uint32_t> expect(n);
      for (size_t i = 0; i < n; ++i) expect[i] = uint32_t(i);
      auto key = [&](uint32_t i) { return std::isnan(v[i]) ? -inf : v[i]; };
      std::sort(expect.begin(), expect.end(),
                [&](uint32_t a, uint32_t b) { return key(a) > key(b) || (key(a) == key(b) && a < b); });
      REQUIRE(scratch.order.size() == n);
      CHECK(scratch.order == expect);
    }
  }
}

namespace {

// The greedy pick as sample_logits computed it before it was vectorised: the reference.
int32_t scalar_greedy(const std::vector<float>& l) {
  size_t best = 0;
  for (size_t i = 1; i < l.size(); ++i)
    if (l[i] > l[best] || std::isnan(l[best])) best = i;
  return static_cast<int32_t>(best);
}

int32_t greedy_pick(const std::vector<float>& l) {
  endor::SamplingScratch scratch;
  return endor::sample_logits(l.data(), l.size(), endor::SamplingParams{}, 0.5, scratch);
}

}  // namespace

TEST_CASE("greedy: the vector argmax picks what the scalar loop picked (ties, NaN, infinities, tails)") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  REQUIRE(endor::SamplingParams{}.temperature == 0.0f);
  // The contract's corners: the lowest id among ties, -0 tying with +0, leading NaNs skipped, a
  // later NaN never winning, every logit -inf (id 0), every logit NaN (the last id).
  for (size_t n : {size_t(1), size_t(7), size_t(8), size_t(17), size_t(33), size_t(100)}) {
    CAPTURE(n);
    std::vector<float> v(n, nan);
    CHECK(greedy_pick(v) == int32_t(n - 1));
    CHECK(greedy_pick(v) == scalar_greedy(v));
    std::fill(v.begin(), v.end(), -inf);
    CHECK(greedy_pick(v) == 0);
    v[n / 2] = nan;
    CHECK(greedy_pick(v) == scalar_greedy(v));
    v.assign(n, 1.0f);
    CHECK(greedy_pick(v) == 0);
    v[0] = nan;
    CHECK(greedy_pick(v) == (n > 1 ? 1 : 0));
    v.assign(n, -1.0f);
    v[n - 1] = -0.0f;
    if (n > 2) v[n - 2] = 0.0f;
    CHECK(greedy_pick(v) == scalar_greedy(v));
    v[n - 1] = inf;
    CHECK(greedy_pick(v) == int32_t(n - 1));
  }
  // Random vocabularies (sizes not multiples of 8, 16 or 32, and SmolLM2's 49152) with many ties,
  // signed zeros, infinities and NaNs, NaN in front or not.
  for (size_t n : {size_t(2), size_t(31), size_t(32), size_t(47), size_t(255), size_t(1001), size_t(49152)}) {
    for (uint64_t seed = 0; seed < 20; ++seed) {
      std::vector<float> v = random_logits(n, seed + 31 * n);
      std::mt19937_64 rng(seed);
      const float specials[] = {0.0f, -0.0f, -inf, nan, 1.0f, 5.0f, -5.0f, inf};
      const unsigned rate = 2 + unsigned(seed % 5);  // 1 in 2 .. 1 in 6 logits special
      for (float& x : v)
        if (rng() % rate == 0) x = specials[rng() % (seed % 2 ? 7 : 8)];  // odd seeds: no +inf
        else x = std::round(x);                                          // ties
      if (seed % 3 == 0) v[0] = nan;
      if (seed % 7 == 0) std::fill(v.begin(), v.end() - 1, nan);
      CAPTURE(n);
      CAPTURE(seed);
      CHECK(greedy_pick(v) == scalar_greedy(v));
    }
  }
}
