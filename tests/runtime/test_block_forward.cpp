// Model::embed + forward_block over every layer + head reproduce Model::forward's logits (the
// block-level API the calibration driver uses runs the same block code), the hook sees every
// Linear's input in execution order, and replace_block_weight changes what the block computes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "endor/runtime.h"
#include "runtime_test_util.h"

using namespace endor;
using endor::test::TempDir;

namespace {

struct Loaded {
  std::unique_ptr<ContainerReader> reader;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Model> model;
};

Loaded load(const std::string& path) {
  Loaded l;
  l.reader = ContainerReader::open(path);
  l.backend = make_backend("cpu", 1);
  l.model = load_model(*l.reader, *l.backend);
  return l;
}

std::string pack_fixture(const TempDir& dir, const std::string& model) {
  const std::string out = dir.file(model + ".endor");
  const std::string cmd = test::endor_pack() + " convert --dtype f32 " + test::fixture_dir(model) + " -o " +
                          out + " >" + dir.file("pack.log") + " 2>&1";
  REQUIRE_MESSAGE(test::run_command(cmd) == 0, test::read_text(dir.file("pack.log")));
  return out;
}

void check_blocks_match_forward(Model& m) {
  const ModelConfig& c = m.config();
  const size_t n = std::min<size_t>(7, c.max_positions);
  std::vector<int32_t> ids(n);
  for (size_t i = 0; i < n; ++i) ids[i] = int32_t((i * 5 + 3) % c.vocab);
  auto cache = m.make_cache(n);
  std::vector<float> want;
  m.forward(ids.data(), n, *cache, true, want);

  std::vector<float> hidden(n * c.hidden);
  m.embed(ids.data(), n, hidden.data());
  std::vector<std::string> seen;
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    size_t expert_rows = 0;  // an MoE block: the rows its experts' gates see, n·top_k in all
    m.forward_block(l, hidden.data(), n, [&](uint32_t layer, const std::string& name, const float* x,
                                             size_t rows, size_t in) {
      CHECK(layer == l);
      CHECK(x != nullptr);
      const bool expert = name.find(".experts.") != std::string::npos;
          if (expert) {  // only the tokens routed to it
        CHECK(rows >= 1);
        CHECK(rows <= n);
        if (name.find("gate_proj") != std::string::npos || name.find(".w1") != std::string::npos) expert_rows += rows;
      } else {
        CHECK(rows == n);
      }
      CHECK((in == c.hidden || in == c.intermediate || in == c.moe_intermediate ||
             in == size_t(c.n_heads) * c.head_dim));
      if (l == 0) seen.push_back(name);
    });
    if (c.moe()) CHECK(expert_rows == n * c.top_k);
  }
  if (c.moe()) {  // the experts that received tokens, in block_linear_names' order
    const std::vector<std::string> all = m.block_linear_names();
    size_t at = 0;
    for (const std::string& name : seen) {
      while (at < all.size() && all[at] != name) ++at;
      INFO(name, " is out of order or unknown");
      CHECK(at < all.size());
    }
    CHECK(seen.size() > 4 + 3);  // q, k, v, o and more than one expert
  } else {
    CHECK(seen == m.block_linear_names());
  }
  std::vector<float> got;
  m.head(hidden.data(), n, got);
  REQUIRE(got.size() == want.size());
  // The same kernels in the same order: identical up to float reassociation (none expected).
  double max_diff = 0;
  for (size_t i = 0; i < got.size(); ++i) max_diff = std::max(max_diff, double(std::fabs(got[i] - want[i])));
  CHECK(max_diff <= 1e-5);
}

}  // namespace

TEST_CASE("embed + forward_block over all layers + head == forward (Llama, MoE and OPT fixtures)") {
  TempDir dir;
  for (const char* model :
       {"llama-tiny", "qwen2-tiny", "qwen3-tiny", "qwen3-moe-tiny", "mixtral-tiny", "opt-tiny", "opt-postln-proj"}) {
    CAPTURE(model);
    Loaded l = load(pack_fixture(dir, model));
    check_blocks_match_forward(*l.model);
  }
}

TEST_CASE("replace_block_weight changes the block's output; bad names, layers and shapes throw") {
  TempDir dir;
  const nlohmann::json cfg = test::synthetic_llama_config();
  const std::string path = dir.file("m.endor");
  test::write_synthetic_container(path, cfg, test::synthetic_llama_tensors(cfg), 11);
  Loaded l = load(path);
  Model& m = *l.model;
  const size_t n = 5, H = m.config().hidden;
  std::vector<int32_t> ids = {1, 7, 9, 3, 4};
  std::vector<float> base(n * H);
  m.embed(ids.data(), n, base.data());

  std::vector<float> before = base;
  m.forward_block(0, before.data(), n, {});
  // o_proj all zero: the attention branch adds nothing.
  const uint64_t q_dim = uint64_t(m.config().n_heads) * m.config().head_dim;
  std::vector<float> zeros(H * q_dim, 0.0f);
  EncodeOptions eo;
  eo.encoding = Encoding::Dense;
  eo.value_type = ValueType::F32;
  EncodedTensor enc = encode_tensor(zeros.data(), {H, q_dim}, eo);
  TensorInfo info;
  info.name = "o";
  info.shape = {H, q_dim};
  info.encoding = Encoding::Dense;
  info.value_type = ValueType::F32;
  info.nnz = H * q_dim;
  TensorView view{&info, enc.layout, enc.bytes.data()};
  m.replace_block_weight(0, "self_attn.o_proj", view);
  std::vector<float> after = base;
  m.forward_block(0, after.data(), n, {});
  CHECK(after != before);
  // Deterministic, and the attention branch's input (q/k/v) is unchanged by the replacement
  // while the MLP's input now equals the block input's norm path without attention.
  std::vector<float> again = base;
  m.forward_block(0, again.data(), n, {});
  CHECK(again == after);
  CHECK_THROWS_AS(m.replace_block_weight(0, "fc1", view), Error);
  CHECK_THROWS_AS(m.replace_block_weight(9, "self_attn.o_proj", view), Error);
  CHECK_THROWS_AS(m.replace_block_weight(0, "self_attn.k_proj", view), Error);  // k is [kv_dim, H]
}

TEST_CASE("MoE blocks: each expert's hook rows are exactly the tokens whose top-k router choice names it") {
  TempDir dir;
  for (const char* model : {"qwen3-moe-tiny", "mixtral-tiny"}) {
    CAPTURE(model);
    Loaded l = load(pack_fixture(dir, model));
    Model& m = *l.model;
    const ModelConfig& c = m.config();
    REQUIRE(c.moe());
    const size_t n = 9, H = c.hidden, E = c.n_experts;
    std::vector<int32_t> ids(n);
    for (size_t i = 0; i < n; ++i) ids[i] = int32_t((i * 37 + 11) % c.vocab);
    std::vector<float> hidden(n * H);
    m.embed(ids.data(), n, hidden.data());
    for (uint32_t layer = 0; layer < c.n_layers; ++layer) {
      // The router, decoded from the file: [E, H].
      const ModelTensors specs(c);
      const std::optional<TensorView> router = l.reader->find_tensor(specs.get(Module::Router, layer).name);
      REQUIRE(router);
      CHECK(router->info->value_type == ValueType::F32);
      std::vector<float> wr(E * H);
      decode_rows_f32(*router, 0, E, wr.data());
      std::vector<std::vector<std::vector<float>>> rows_of(E);  // expert -> its gate's input rows
      m.forward_block(layer, hidden.data(), n, [&](uint32_t, const std::string& name, const float* x, size_t rows,
                                                   size_t in) {
        for (uint32_t e = 0; e < E; ++e)
          if (specs.block_prefix(layer) + name + ".weight" == specs.get(Module::Gate, layer, false, int32_t(e)).name)
            for (size_t r = 0; r < rows; ++r) rows_of[e].emplace_back(x + r * in, x + (r + 1) * in);
      });
      // Every distinct row seen: its top_k experts by router logit (softmax is monotonic) are
      // exactly the experts whose gate saw it.
      std::vector<std::vector<float>> distinct;
      for (const auto& rows : rows_of)
        for (const auto& r : rows)
          if (std::find(distinct.begin(), distinct.end(), r) == distinct.end()) distinct.push_back(r);
      CHECK(distinct.size() == n);
      for (const std::vector<float>& r : distinct) {
        std::vector<std::pair<double, uint32_t>> score(E);
        for (uint32_t e = 0; e < E; ++e) {
          double s = 0;
          for (size_t j = 0; j < H; ++j) s += double(wr[e * H + j]) * r[j];
          score[e] = {-s, e};
        }
        std::sort(score.begin(), score.end());
        for (uint32_t j = 0; j < E; ++j) {
          const uint32_t e = score[j].second;
          const bool seen = std::find(rows_of[e].begin(), rows_of[e].end(), r) != rows_of[e].end();
          CHECK(seen == (j < c.top_k));
        }
      }
    }
  }
}
