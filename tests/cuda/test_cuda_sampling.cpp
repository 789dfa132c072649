// Backend::sample on the GPU against the reference sample_logits on the host: the same id for the
// same logits and the same draw u01, at the vocab sizes of Llama 2 (32000), SmolLM2 (49152) and
// Llama 3 (128256) and at edge sizes, on rows with ties at the top and at the top-k boundary, with
// NaN, -inf and ±0, for greedy and temperature 0.7 with top-k 1/40/1024 (the device's limit) and
// off / 1025 (the host fallback), top-p 0.9/1, and draws 0, near 1 and random. The two picks run
// the same arithmetic in the same order (double exp under emulation is the host's; on a GPU its
// exp may differ by an ulp, which moves a pick only when u lands within that of a boundary).
#include <set>

#include "cuda_test_util.h"

using namespace endor;
using namespace endor::cudatest;

namespace {

enum class Row { Normal, Ties, Specials };

std::vector<float> sampling_row(size_t vocab, Row kind, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> v(vocab);
  for (float& x : v) x = normal(rng);
  if (kind == Row::Ties)  // a grid of 0.5: hundreds of equal logits at the top and around any k-th
    for (float& x : v) x = std::round(x * 2.0f) / 2.0f;
  if (kind == Row::Specials) {
    // Everything ≤ 0, the maximum 0 held by +0 and -0 at several ids; NaN and -inf sprinkled.
    for (float& x : v) x = -std::round(std::fabs(x) * 4.0f) / 4.0f;
    std::uniform_int_distribution<size_t> pick(0, vocab - 1);
    for (size_t i = 0; i < vocab / 50 + 1; ++i) v[pick(rng)] = std::numeric_limits<float>::quiet_NaN();
    for (size_t i = 0; i < vocab / 50 + 1; ++i) v[pick(rng)] = -std::numeric_limits<float>::infinity();
    for (size_t i = 0; i < 4; ++i) v[pick(rng)] = (i % 2) ? -0.0f : 0.0f;
  }
  return v;
}

SamplingParams params(float temperature, uint32_t top_k, float top_p) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  return p;
}

}  // namespace

GPU_TEST_CASE("cuda sample: the device's pick equals the reference sample_logits") {
  REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  SamplingScratch scratch;
  std::mt19937_64 draws(2026);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  size_t n_checked = 0, n_moved = 0;
  uint64_t seed = 100;
  for (size_t vocab : {size_t(1), size_t(7), size_t(1000), size_t(32000), size_t(49152), size_t(128256)})
    for (Row kind : {Row::Normal, Row::Ties, Row::Specials}) {
      CAPTURE(vocab);
      CAPTURE(int(kind));
      const std::vector<float> logits = sampling_row(vocab, kind, ++seed);
      DeviceFloats d(*gpu, logits);
      std::vector<SamplingParams> settings = {params(0.0f, 0, 1.0f)};
      for (uint32_t k : {1u, 40u, 1024u, 0u, 1025u})
        for (float top_p : {0.9f, 1.0f}) settings.push_back(params(0.7f, k, top_p));
      for (const SamplingParams& p : settings) {
        CAPTURE(p.temperature);
        CAPTURE(p.top_k);
        CAPTURE(p.top_p);
        std::set<int32_t> picks;
        for (double u : {0.0, 1.0 - 0x1.0p-53, uniform(draws), uniform(draws), uniform(draws), uniform(draws)}) {
          CAPTURE(u);
          const int32_t want = sample_logits(logits.data(), vocab, p, u, scratch);
          const int32_t got = gpu->sample(d.get(), vocab, p, u);
          CHECK(got == want);
          picks.insert(got);
          ++n_checked;
        }
        n_moved += picks.size() > 1;
      }
    }
  // The draws matter: across the sampled settings the pick moved with u.
  MESSAGE(n_checked << " picks compared; " << n_moved << " settings picked more than one id");
  CHECK(n_moved > 20);
}

GPU_TEST_CASE("cuda sample: bad parameters are the reference's one-line errors") {
  REQUIRE_GPU();
  auto gpu = make_cuda_backend();
  const std::vector<float> logits = sampling_row(64, Row::Normal, 1);
  DeviceFloats d(*gpu, logits);
  CHECK_THROWS_WITH_AS(gpu->sample(d.get(), 0, params(0.0f, 0, 1.0f), 0.5), "sampler: empty vocabulary", Error);
  CHECK_THROWS_WITH_AS(gpu->sample(d.get(), 64, params(-1.0f, 0, 1.0f), 0.5),
                       doctest::Contains("temperature must be >= 0"), Error);
  CHECK_THROWS_WITH_AS(gpu->sample(d.get(), 64, params(0.7f, 40, 0.0f), 0.5), doctest::Contains("top-p must be in"),
                       Error);
}
