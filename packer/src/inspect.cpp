// inspect: what a container holds (tensors, encodings, sizes against dense, tiers, provenance).
#include <cstdio>
#include <map>
#include <optional>
#include <sstream>

#include "detail.h"
#include "endor/inspect.h"
#include "endor/safetensors.h"

namespace endor {

namespace {

uint32_t source_dtype_bytes(const std::string& dtype, ValueType fallback) {
  for (SafetensorsDType t : {SafetensorsDType::F16, SafetensorsDType::BF16, SafetensorsDType::F32, SafetensorsDType::F64})
    if (dtype == to_string(t)) return dtype_bytes(t);
  const uint32_t bits = value_bits(fallback);
  return bits >= 8 ? bits / 8 : 1;
}

std::string shape_string(const nlohmann::json& shape) {
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "x" : "") + std::to_string(shape[i].get<uint64_t>());
  return s;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// An MoE's experts per decoder block: how many, their stored bytes and the share of their weights not
// stored (the registry says which tensors are experts); empty for a dense model or a config the
// registry does not parse (config: nullopt).
nlohmann::json experts_per_block(const Manifest& m, const std::optional<ModelConfig>& config) {
  nlohmann::json out = nlohmann::json::array();
  if (!config || !config->moe()) return out;
  const ModelTensors specs(*config);
  const uint32_t L = specs.config().n_layers;
  std::vector<uint64_t> bytes(L, 0), numel(L, 0), nnz(L, 0);
  for (const TensorInfo& t : m.tensors) {
    const TensorSpec* s = specs.find(t.name);
    if (!s || s->expert < 0 || s->layer >= L) continue;
    bytes[s->layer] += t.size;
    numel[s->layer] += t.numel();
    nnz[s->layer] += t.nnz;
  }
  for (uint32_t l = 0; l < L; ++l)
    out.push_back({{"block", l}, {"experts", specs.config().n_experts}, {"top_k", specs.config().top_k}, {"bytes", bytes[l]},
                   {"sparsity", numel[l] ? 1.0 - double(nnz[l]) / double(numel[l]) : 0.0}});
  return out;
}

}  // namespace

nlohmann::json inspect_container(const ContainerReader& reader, bool verify) {
  if (verify) reader.verify_all();
  const Manifest& m = reader.manifest();
  nlohmann::json r;
  r["file"] = reader.path();
  r["file_bytes"] = reader.file_bytes();
  r["format_version"] = std::to_string(m.version_major) + "." + std::to_string(m.version_minor);
  r["verified"] = verify;
  r["provenance"] = m.provenance;
  std::optional<ModelConfig> config;  // as the model registry reads config.json (the runtime's reading of it)
  if (m.config.is_object()) {
    try {
      config = parse_model_config(m.config, reader.path());
      r["model"] = {{"model_type", config->model_type}, {"num_hidden_layers", config->n_layers},
                    {"hidden_size", config->hidden}, {"vocab_size", config->vocab}};
    } catch (const Error&) {  // a config this build does not run: say only its model_type
      if (m.config.contains("model_type")) r["model"] = {{"model_type", m.config["model_type"]}};
    }
  }

  std::map<std::string, nlohmann::json> tiers;
  for (const char* t : {"gpu", "cpu", "disk"}) tiers[t] = {{"groups", 0}, {"bytes", 0}, {"dense_bytes", 0}};
  uint64_t total_bytes = 0, total_dense = 0, files_bytes = 0, stored = 0, numel_all = 0;
  nlohmann::json tensors = nlohmann::json::array(), groups = nlohmann::json::array(), files = nlohmann::json::array();
  for (const GroupInfo& g : m.groups) {
    uint64_t g_dense = 0;
    for (uint32_t ti : g.tensors) {
      const TensorInfo& t = m.tensors[ti];
      const uint64_t numel = t.numel();
      const uint64_t dense = numel * source_dtype_bytes(t.source_dtype, t.value_type);
      g_dense += dense;
      stored += t.nnz;
      numel_all += numel;
      tensors.push_back({{"name", t.name},
                         {"group", g.name},
                         {"tier", to_string(g.tier)},
                         {"shape", t.shape},
                         {"encoding", to_string(t.encoding)},
                         {"value_type", to_string(t.dtype())},
                         {"group_size", t.group_size},
                         {"source_dtype", t.source_dtype},
                         {"numel", numel},
                         {"nnz", t.nnz},
                         {"sparsity", numel ? 1.0 - double(t.nnz) / double(numel) : 0.0},
                         {"bytes", t.size},
                         {"dense_bytes", dense},
                         {"ratio", dense ? double(t.size) / double(dense) : 0.0}});
    }
    for (uint32_t fi : g.files) {
      files.push_back({{"name", m.files[fi].name}, {"bytes", m.files[fi].size}, {"group", g.name}});
      files_bytes += m.files[fi].size;
    }
    nlohmann::json& tier = tiers[to_string(g.tier)];
    tier["groups"] = tier["groups"].get<uint64_t>() + 1;
    tier["bytes"] = tier["bytes"].get<uint64_t>() + g.size;
    tier["dense_bytes"] = tier["dense_bytes"].get<uint64_t>() + g_dense;
    total_bytes += g.size;
    total_dense += g_dense;
    groups.push_back({{"name", g.name}, {"tier", to_string(g.tier)}, {"bytes", g.size}, {"dense_bytes", g_dense},
                      {"tensors", g.tensors.size()}, {"files", g.files.size()}});
  }
  for (auto& [name, t] : tiers) {
    const uint64_t d = t["dense_bytes"].get<uint64_t>();
    t["ratio"] = d ? double(t["bytes"].get<uint64_t>()) / double(d) : 0.0;
  }
  r["tensors"] = tensors;
  r["experts"] = experts_per_block(m, config);
  r["files"] = files;
  r["groups"] = groups;
  r["tiers"] = tiers;
  r["total"] = {{"tensors", m.tensors.size()},
                {"groups_bytes", total_bytes},
                {"dense_bytes", total_dense},
                {"files_bytes", files_bytes},
                {"sparsity", numel_all ? 1.0 - double(stored) / double(numel_all) : 0.0},
                {"ratio", total_dense ? double(total_bytes - files_bytes) / double(total_dense) : 0.0}};
  return r;
}

std::string render_inspect_text(const nlohmann::json& r) {
  std::ostringstream o;
  o << r["file"].get<std::string>() << ": Endor container v" << r["format_version"].get<std::string>() << ", "
    << format_bytes(r["file_bytes"].get<uint64_t>()) << " (" << r["file_bytes"].get<uint64_t>() << " bytes)\n";
  if (r.contains("model")) {
    const nlohmann::json& mdl = r["model"];
    o << "model: " << mdl.value("model_type", std::string("?"));
    if (mdl.contains("num_hidden_layers")) o << ", " << mdl["num_hidden_layers"].dump() << " layers";
    if (mdl.contains("hidden_size")) o << ", hidden " << mdl["hidden_size"].dump();
    if (mdl.contains("vocab_size")) o << ", vocab " << mdl["vocab_size"].dump();
    o << "\n";
  }
  // Column widths from the data.
  size_t name_w = 6, shape_w = 5;
  for (const nlohmann::json& t : r["tensors"]) {
    name_w = std::max(name_w, t["name"].get<std::string>().size());
    shape_w = std::max(shape_w, shape_string(t["shape"]).size());
  }
  char line[1024];
  std::snprintf(line, sizeof line, "\n%-*s  %-*s  %-6s  %-9s  %-4s  %8s  %12s  %8s\n", int(name_w), "tensor",
                int(shape_w), "shape", "enc", "type", "tier", "sparsity", "bytes", "vs dense");
  o << line;
  for (const nlohmann::json& t : r["tensors"]) {
    std::string type = t["value_type"].get<std::string>();
    if (t["group_size"].get<uint32_t>() > 0) type += "/g" + std::to_string(t["group_size"].get<uint32_t>());
    std::snprintf(line, sizeof line, "%-*s  %-*s  %-6s  %-9s  %-4s  %7.2f%%  %12llu  %7.2f%%\n", int(name_w),
                  t["name"].get<std::string>().c_str(), int(shape_w), shape_string(t["shape"]).c_str(),
                  t["encoding"].get<std::string>().c_str(), type.c_str(), t["tier"].get<std::string>().c_str(),
                  100.0 * t["sparsity"].get<double>(), (unsigned long long)t["bytes"].get<uint64_t>(),
                  100.0 * t["ratio"].get<double>());
    o << line;
  }
  if (r.contains("experts") && !r["experts"].empty()) {
    o << "\nexperts per block (top-" << r["experts"][0]["top_k"].get<uint32_t>() << " of "
      << r["experts"][0]["experts"].get<uint32_t>() << " routed per token):";
    for (const nlohmann::json& b : r["experts"])
      o << "\n  block " << b["block"].get<uint32_t>() << ": " << b["experts"].get<uint32_t>() << " experts, "
        << format_bytes(b["bytes"].get<uint64_t>()) << ", " << fmt("%.2f%%", 100.0 * b["sparsity"].get<double>()) << " not stored";
    o << "\n";
  }
  if (!r["files"].empty()) {
    o << "\nfiles:";
    for (const nlohmann::json& f : r["files"])
      o << " " << f["name"].get<std::string>() << " (" << format_bytes(f["bytes"].get<uint64_t>()) << ")";
    o << "\n";
  }
  o << "\ntier   groups  stored        dense (source dtype)  ratio\n";
  for (const char* tier : {"gpu", "cpu", "disk"}) {
    const nlohmann::json& t = r["tiers"][tier];
    if (t["groups"].get<uint64_t>() == 0) continue;
    std::snprintf(line, sizeof line, "%-5s  %6llu  %-12s  %-20s  %s\n", tier, (unsigned long long)t["groups"].get<uint64_t>(),
                  format_bytes(t["bytes"].get<uint64_t>()).c_str(), format_bytes(t["dense_bytes"].get<uint64_t>()).c_str(),
                  t["dense_bytes"].get<uint64_t>() ? fmt("%.2f%%", 100.0 * t["ratio"].get<double>()).c_str() : "-");
    o << line;
  }
  const nlohmann::json& tot = r["total"];
  std::snprintf(line, sizeof line, "total  %llu tensors, %s of tensor data vs %s dense in the source dtype = %.2f%%, %.2f%% of weights not stored\n",
                (unsigned long long)tot["tensors"].get<uint64_t>(),
                format_bytes(tot["groups_bytes"].get<uint64_t>() - tot["files_bytes"].get<uint64_t>()).c_str(),
                format_bytes(tot["dense_bytes"].get<uint64_t>()).c_str(), 100.0 * tot["ratio"].get<double>(),
                100.0 * tot["sparsity"].get<double>());
  o << line;
  if (r["provenance"].is_object()) {
    o << "\nprovenance:\n";
    for (auto it = r["provenance"].begin(); it != r["provenance"].end(); ++it) {
      std::string v = it.value().is_string() ? it.value().get<std::string>() : it.value().dump();
      o << "  " << it.key() << ": " << v << "\n";
    }
  }
  if (r["verified"].get<bool>())
    o << "\nverify: OK (" << r["groups"].size() << " group checksums and every bitmap index checked)\n";
  return o.str();
}

}  // namespace endor
