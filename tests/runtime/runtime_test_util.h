// Shared helpers of the runtime tests: temporary directories, .npy reading, fixture lookup,
// packing with the endor-pack CLI, and small synthetic Llama containers written in C++.
#pragma once

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "endor/format.h"

namespace endor::test {

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string templ = std::string(base && *base ? base : "/tmp") + "/endor-runtime-test-XXXXXX";
    if (!::mkdtemp(templ.data())) throw std::runtime_error("mkdtemp failed");
    path_ = templ;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A float32 C-order .npy of 2 dimensions (what numpy.save writes for [tokens, vocab]).
struct NpyMatrix {
  size_t rows = 0, cols = 0;
  std::vector<float> data;
  const float* row(size_t r) const { return data.data() + r * cols; }
};

inline NpyMatrix read_npy_f32(const std::string& path) {
  const std::string bytes = read_text(path);
  if (bytes.size() < 10 || std::memcmp(bytes.data(), "\x93NUMPY", 6) != 0)
    throw std::runtime_error(path + ": not a .npy file");
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t header_len = 0, pos = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
    pos = 10;
  } else {
    header_len = 0;
    for (int i = 0; i < 4; ++i) header_len |= size_t(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
    pos = 12;
  }
  const std::string header = bytes.substr(pos, header_len);
  if (header.find("'descr': '<f4'") == std::string::npos || header.find("'fortran_order': False") == std::string::npos)
    throw std::runtime_error(path + ": expected little-endian float32 in C order: " + header);
  const size_t open = header.find("'shape': (");
  if (open == std::string::npos) throw std::runtime_error(path + ": no shape");
  NpyMatrix m;
  if (std::sscanf(header.c_str() + open, "'shape': (%zu, %zu)", &m.rows, &m.cols) != 2)
    throw std::runtime_error(path + ": expected a 2-D shape: " + header);
  const size_t data_at = pos + header_len;
  if (bytes.size() != data_at + m.rows * m.cols * 4) throw std::runtime_error(path + ": size mismatch");
  m.data.resize(m.rows * m.cols);
  std::memcpy(m.data.data(), bytes.data() + data_at, m.data.size() * 4);
  return m;
}

// Runs a shell command; returns its exit status (-1 when it did not exit normally).
inline int run_command(const std::string& cmd) {
  const int rc = std::system(cmd.c_str());
  if (rc == -1 || !WIFEXITED(rc)) return -1;
  return WEXITSTATUS(rc);
}

// Runs a command capturing stdout and stderr into files of `dir`; returns the exit status.
struct CommandResult {
  int status = -1;
  std::string out, err;
};
inline CommandResult run_capture(const std::string& cmd, const TempDir& dir) {
  const std::string out = dir.file("stdout.txt"), err = dir.file("stderr.txt");
  CommandResult r;
  r.status = run_command(cmd + " >" + out + " 2>" + err);
  r.out = read_text(out);
  r.err = read_text(err);
  return r;
}

// A usage error as every program reports one (endor/cli_common.h): exit 2, nothing on stdout, one
// line on stderr "error: ... (see COMMAND --help)" holding `what`.
inline bool is_usage_error(const CommandResult& r, const std::string& command, const std::string& what) {
  const std::string tail = " (see " + command + " --help)\n";
  return r.status == 2 && r.out.empty() && r.err.rfind("error: ", 0) == 0 && r.err.find('\n') == r.err.size() - 1 &&
         r.err.find(what) != std::string::npos && r.err.size() > tail.size() &&
         r.err.compare(r.err.size() - tail.size(), tail.size(), tail) == 0;
}

inline std::string fixture_dir(const std::string& model) {
  return std::string(ENDOR_SOURCE_DIR) + "/tests/fixtures/models/" + model;
}
// One OpenMP thread: the fixtures are tiny, and on a busy shared machine spinning barriers cost
// seconds per run.
inline std::string endor_pack() {
  return std::string("OMP_NUM_THREADS=1 ") + ENDOR_BINARY_DIR + "/packer/endor-pack";
}
// ENDOR_INFER_BINARY: the emulated CUDA suites (tests/cuemu) run their own endor-infer build.
#ifndef ENDOR_INFER_BINARY
#define ENDOR_INFER_BINARY ENDOR_BINARY_DIR "/runtime/endor-infer"
#endif
inline std::string endor_infer() { return ENDOR_INFER_BINARY; }

inline nlohmann::json read_json(const std::string& path) { return nlohmann::json::parse(read_text(path)); }

// ---- synthetic Llama containers ---------------------------------------------------------------
// Hidden 32, 2 layers, 4 heads / 2 kv heads, intermediate 48, vocab 64, context 16, weights
// N(0, 0.1²) from `seed`, dense f32. `edit` may change the config and/or the tensor list before
// writing (drop a tensor, change a shape) to make the error cases.
struct SyntheticTensor {
  std::string name;
  std::vector<uint64_t> shape;
  std::string group;
};

inline nlohmann::json synthetic_llama_config() {
  return {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"hidden_size", 32},
          {"intermediate_size", 48}, {"num_hidden_layers", 2}, {"num_attention_heads", 4},
          {"num_key_value_heads", 2}, {"vocab_size", 64}, {"max_position_embeddings", 16},
          {"rms_norm_eps", 1e-6}, {"rope_theta", 10000.0}, {"tie_word_embeddings", false},
          {"bos_token_id", 1}, {"eos_token_id", 2}};
}

inline std::vector<SyntheticTensor> synthetic_llama_tensors(const nlohmann::json& c) {
  const uint64_t H = c["hidden_size"], I = c["intermediate_size"], V = c["vocab_size"];
  const uint64_t nh = c["num_attention_heads"], nkv = c["num_key_value_heads"];
  const uint64_t hd = H / nh, L = c["num_hidden_layers"];
  std::vector<SyntheticTensor> t = {{"model.embed_tokens.weight", {V, H}, "embed"}};
  for (uint64_t i = 0; i < L; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".", g = "layers." + std::to_string(i);
    t.push_back({p + "input_layernorm.weight", {H}, g});
    t.push_back({p + "self_attn.q_proj.weight", {nh * hd, H}, g});
    t.push_back({p + "self_attn.k_proj.weight", {nkv * hd, H}, g});
    t.push_back({p + "self_attn.v_proj.weight", {nkv * hd, H}, g});
    t.push_back({p + "self_attn.o_proj.weight", {H, nh * hd}, g});
    t.push_back({p + "post_attention_layernorm.weight", {H}, g});
    t.push_back({p + "mlp.gate_proj.weight", {I, H}, g});
    t.push_back({p + "mlp.up_proj.weight", {I, H}, g});
    t.push_back({p + "mlp.down_proj.weight", {H, I}, g});
  }
  t.push_back({"model.norm.weight", {H}, "head"});
  t.push_back({"lm_head.weight", {V, H}, "head"});
  return t;
}

// `copies` maps a tensor name to an earlier one whose values it repeats (e.g. an lm_head equal to
// the embedding).
inline void write_synthetic_container(const std::string& path, const nlohmann::json& config,
                                      const std::vector<SyntheticTensor>& tensors, uint64_t seed,
                                      ValueType vt = ValueType::F32,
                                      const std::map<std::string, std::string>& copies = {}) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::map<std::string, std::vector<float>> written;
  ContainerWriter w(path);
  std::string open;
  for (const SyntheticTensor& t : tensors) {
    if (t.group != open) {
      if (!open.empty()) w.end_group();
      w.begin_group(t.group, Tier::Cpu);
      open = t.group;
    }
    uint64_t n = 1;
    for (uint64_t d : t.shape) n *= d;
    std::vector<float> values(n);
    for (float& v : values) v = t.shape.size() == 1 ? 1.0f + 0.1f * normal(rng) : 0.1f * normal(rng);
    if (copies.count(t.name)) values = written.at(copies.at(t.name));
    written[t.name] = values;
    EncodeOptions eo;
    eo.encoding = Encoding::Dense;
    eo.value_type = vt;
    EncodedTensor e = encode_tensor(values.data(), t.shape, eo);
    TensorInfo info;
    info.name = t.name;
    info.shape = t.shape;
    info.encoding = Encoding::Dense;
    info.value_type = vt;
    info.nnz = n;
    info.source_dtype = "F32";
    w.add_tensor(info, e.bytes.data(), e.bytes.size());
  }
  if (!open.empty()) w.end_group();
  w.commit(config, nullptr, {{"tool", "runtime tests"}});
}

}  // namespace endor::test
