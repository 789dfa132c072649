// Test helpers: write safetensors files byte by byte (so tests can also write broken ones) and
// small Llama-shaped checkpoints with random weights in any float dtype.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "endor/format.h"

namespace endor::test {

struct RawTensor {
  std::string name, dtype;  // dtype as spelled in safetensors ("F16", ...)
  std::vector<uint64_t> shape;
  std::vector<uint8_t> bytes;
};

inline std::string make_temp_dir(const std::string& tag) {
  std::string templ = "/tmp/endor-" + tag + "-XXXXXX";
  if (!::mkdtemp(templ.data())) throw std::runtime_error("mkdtemp failed");
  return templ;
}

inline void remove_tree(const std::string& dir) {
  const std::string cmd = "rm -rf '" + dir + "'";
  if (std::system(cmd.c_str()) != 0) {
  }
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// 8-byte little-endian length, the JSON header padded with spaces to a multiple of 8, the data.
inline std::string safetensors_file(const std::string& header_json, const std::string& data) {
  std::string h = header_json;
  while (h.size() % 8 != 0) h += ' ';
  std::string out(8, '\0');
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((n >> (8 * i)) & 0xFF);
  return out + h + data;
}

// A well-formed safetensors image of the tensors, in the given order.
inline std::string safetensors_file(const std::vector<RawTensor>& tensors,
                                    const nlohmann::json& metadata = nlohmann::json()) {
  nlohmann::json h = nlohmann::json::object();
  if (!metadata.is_null()) h["__metadata__"] = metadata;
  std::string data;
  for (const RawTensor& t : tensors) {
    h[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data.append(t.bytes.begin(), t.bytes.end());
  }
  return safetensors_file(h.dump(), data);
}

// Values (f32) as raw bytes of a float dtype.
inline std::vector<uint8_t> encode_values(const std::vector<float>& v, const std::string& dtype) {
  std::vector<uint8_t> out;
  for (float x : v) {
    if (dtype == "F32") {
      uint8_t b[4];
      std::memcpy(b, &x, 4);
      out.insert(out.end(), b, b + 4);
    } else {
      const uint16_t h = dtype == "F16" ? f32_to_f16(x) : f32_to_bf16(x);
      out.push_back(uint8_t(h & 0xFF));
      out.push_back(uint8_t(h >> 8));
    }
  }
  return out;
}

// Uniform in (-scale, scale) from a xorshift stream seeded by rng: fast enough for 100 MB files.
inline std::vector<float> random_values(uint64_t n, std::mt19937& rng, float scale) {
  uint64_t s = (uint64_t(rng()) << 32) | rng() | 1;
  std::vector<float> v(n);
  for (float& x : v) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    x = (float(s >> 40) / float(1 << 24) * 2.0f - 1.0f) * scale;
  }
  return v;
}

struct LlamaDims {
  uint64_t vocab = 96, hidden = 64, intermediate = 128, layers = 2, heads = 4, kv_heads = 2;
  bool tied = false;
  bool prefix = true;  // "model." on the keys
  std::string dtype = "F16";
};

// config.json + model.safetensors of a random Llama; returns the checkpoint folder (created).
inline void write_llama_checkpoint(const std::string& dir, const LlamaDims& d, uint32_t seed = 1) {
  ::mkdir(dir.c_str(), 0755);
  nlohmann::json cfg = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"},
                        {"vocab_size", d.vocab}, {"hidden_size", d.hidden},
                        {"intermediate_size", d.intermediate}, {"num_hidden_layers", d.layers},
                        {"num_attention_heads", d.heads}, {"num_key_value_heads", d.kv_heads},
                        {"max_position_embeddings", 128}, {"rms_norm_eps", 1e-5},
                        {"tie_word_embeddings", d.tied}};
  write_bytes(dir + "/config.json", cfg.dump(2));
  std::mt19937 rng(seed);
  const std::string p = d.prefix ? "model." : "";
  const uint64_t hd = d.hidden / d.heads, kv = d.kv_heads * hd;
  std::vector<RawTensor> ts;
  auto add = [&](const std::string& name, std::vector<uint64_t> shape, float scale) {
    uint64_t n = 1;
    for (uint64_t s : shape) n *= s;
    ts.push_back({name, d.dtype, shape, encode_values(random_values(n, rng, scale), d.dtype)});
  };
  add(p + "embed_tokens.weight", {d.vocab, d.hidden}, 0.1f);
  for (uint64_t i = 0; i < d.layers; ++i) {
    const std::string l = p + "layers." + std::to_string(i) + ".";
    add(l + "input_layernorm.weight", {d.hidden}, 1.0f);
    add(l + "self_attn.q_proj.weight", {d.hidden, d.hidden}, 0.2f);
    add(l + "self_attn.k_proj.weight", {kv, d.hidden}, 0.2f);
    add(l + "self_attn.v_proj.weight", {kv, d.hidden}, 0.2f);
    add(l + "self_attn.o_proj.weight", {d.hidden, d.hidden}, 0.2f);
    add(l + "post_attention_layernorm.weight", {d.hidden}, 1.0f);
    add(l + "mlp.gate_proj.weight", {d.intermediate, d.hidden}, 0.2f);
    add(l + "mlp.up_proj.weight", {d.intermediate, d.hidden}, 0.2f);
    add(l + "mlp.down_proj.weight", {d.hidden, d.intermediate}, 0.2f);
  }
  add(p + "norm.weight", {d.hidden}, 1.0f);
  if (!d.tied) add("lm_head.weight", {d.vocab, d.hidden}, 0.1f);
  write_bytes(dir + "/model.safetensors", safetensors_file(ts, {{"format", "pt"}}));
}

}  // namespace endor::test
