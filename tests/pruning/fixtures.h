// Loading the committed reference fixtures (tools/make_pruning_fixtures.py) for the tests.
#pragma once

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "endor/pruning.h"
#include "npy.h"

namespace fixtures {

inline std::string path(const std::string& name) {
  return std::string(ENDOR_SOURCE_DIR) + "/tests/fixtures/pruning/" + name;
}

inline const nlohmann::json& cases() {
  static const nlohmann::json j = [] {
    std::ifstream f(path("cases.json"));
    if (!f) throw std::runtime_error("cannot open " + path("cases.json"));
    return nlohmann::json::parse(f);
  }();
  return j;
}

template <typename T>
std::vector<T> load(const std::string& name) {
  return npy::read(path(name + ".npy")).as<T>();
}

inline bool exists(const std::string& name) { return std::ifstream(path(name + ".npy")).good(); }

struct Layer {
  size_t n_out = 0, n_in = 0, tokens_per_sample = 0;
  std::vector<size_t> batch_samples;  // samples per add_batch call, in order
  std::vector<float> w, x, scaler, h;  // W [n_out, n_in], X [samples, tokens, n_in], [n_in], [n_in, n_in]
};

inline Layer layer(const std::string& name) {
  const auto& j = cases()["layers"][name];
  Layer l;
  l.n_out = j["n_out"];
  l.n_in = j["n_in"];
  l.tokens_per_sample = j["tokens_per_sample"];
  l.batch_samples = j["batch_samples"].get<std::vector<size_t>>();
  l.w = load<float>(name + "_W");
  l.x = load<float>(name + "_X");
  l.scaler = load<float>(name + "_wanda_scaler");
  l.h = load<float>(name + "_H");
  return l;
}

inline endor::pruning::SparsityTarget target(const nlohmann::json& c) {
  if (c.contains("m")) return endor::pruning::SparsityTarget::n_of_m(c["n"], c["m"]);
  return endor::pruning::SparsityTarget::unstructured(c["ratio"].get<double>());
}

}  // namespace fixtures
