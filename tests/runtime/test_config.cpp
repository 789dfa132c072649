// parse_model_config: architectures, defaults, both RoPE config layouts, sliding windows, errors.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "endor/runtime.h"
#include "runtime_test_util.h"

using endor::Architecture;
using endor::ModelConfig;
using endor::parse_model_config;
using nlohmann::json;

namespace {

json tiny_llama() {
  return {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"hidden_size", 64},
          {"intermediate_size", 128}, {"num_hidden_layers", 2}, {"num_attention_heads", 4},
          {"vocab_size", 512}, {"max_position_embeddings", 128}};
}

std::string error_of(const json& cfg) {
  try {
    parse_model_config(cfg, "m.endor");
  } catch (const endor::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("architecture comes from architectures[0], else model_type") {
  json c = tiny_llama();
  CHECK(parse_model_config(c, "m").arch == Architecture::Llama);
  c["architectures"] = {"MistralForCausalLM"};
  c["model_type"] = "mistral";
  CHECK(parse_model_config(c, "m").model_type == "mistral");
  c.erase("architectures");
  c["model_type"] = "qwen2";
  CHECK(parse_model_config(c, "m").model_type == "qwen2");

  json opt = {{"architectures", {"OPTForCausalLM"}}, {"hidden_size", 64}, {"ffn_dim", 128},
              {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"vocab_size", 512},
              {"max_position_embeddings", 128}};
  const ModelConfig o = parse_model_config(opt, "m");
  CHECK(o.arch == Architecture::Opt);
  CHECK(o.head_dim == 16);
  CHECK(o.pre_layer_norm);
  CHECK(o.final_layer_norm);
  CHECK(o.word_embed_dim == 64);
  CHECK(o.tie_word_embeddings);
  CHECK(o.norm_eps == doctest::Approx(1e-5));
  opt["do_layer_norm_before"] = false;
  opt["word_embed_proj_dim"] = 32;
  const ModelConfig post = parse_model_config(opt, "m");
  CHECK_FALSE(post.pre_layer_norm);
  CHECK_FALSE(post.final_layer_norm);  // transformers builds no final norm for post-LN OPT
  CHECK(post.word_embed_dim == 32);
}

TEST_CASE("unknown or unsupported architectures are one clear error naming the file") {
  json c = tiny_llama();
  c["architectures"] = {"GPT2LMHeadModel"};
  const std::string e = error_of(c);
  CHECK(e.find("m.endor") == 0);
  CHECK(e.find("GPT2LMHeadModel") != std::string::npos);
  CHECK(e.find('\n') == std::string::npos);
  c.erase("architectures");
  c["model_type"] = "gpt2";
  CHECK(error_of(c).find("gpt2") != std::string::npos);
  c.erase("model_type");
  CHECK(error_of(c).find("no \"architectures\"") != std::string::npos);
  CHECK(error_of(json::array()).find("not a JSON object") != std::string::npos);
}

TEST_CASE("missing and inconsistent fields are errors") {
  json c = tiny_llama();
  c.erase("hidden_size");
  CHECK(error_of(c).find("hidden_size") != std::string::npos);
  c = tiny_llama();
  c["num_key_value_heads"] = 3;
  CHECK(error_of(c).find("num_key_value_heads") != std::string::npos);
  c = tiny_llama();
  c["vocab_size"] = -5;
  CHECK(error_of(c).find("vocab_size") != std::string::npos);
  c = tiny_llama();
  c["hidden_act"] = "gelu";
  CHECK(error_of(c).find("gelu") != std::string::npos);
  c = tiny_llama();
  c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  CHECK(error_of(c).find("yarn") != std::string::npos);
}

TEST_CASE("Llama defaults, GQA and explicit head_dim") {
  json c = tiny_llama();
  ModelConfig m = parse_model_config(c, "m");
  CHECK(m.n_kv_heads == 4);
  CHECK(m.head_dim == 16);
  CHECK(m.norm_eps == doctest::Approx(1e-6));
  CHECK_FALSE(m.tie_word_embeddings);
  CHECK_FALSE(m.qkv_bias);
  CHECK(m.sliding_window == std::vector<uint32_t>{0, 0});
  c["num_key_value_heads"] = 2;
  c["head_dim"] = 24;
  c["attention_bias"] = true;
  c["mlp_bias"] = true;
  c["eos_token_id"] = json::array({7, 9});
  m = parse_model_config(c, "m");
  CHECK(m.n_kv_heads == 2);
  CHECK(m.head_dim == 24);
  CHECK(m.inv_freq.size() == 12);
  CHECK(m.qkv_bias);
  CHECK(m.o_bias);
  CHECK(m.mlp_bias);
  CHECK(m.eos_token_ids == std::vector<int32_t>{7, 9});
}

TEST_CASE("default RoPE frequencies equal transformers' float32 computation") {
  // Reference: 1.0 / (500000 ** (torch.arange(0, 16, 2).float() / 16)) in torch float32.
  const float expected[8] = {1.000000000e+00f, 1.939227581e-01f, 3.760603070e-02f, 7.292665076e-03f,
                             1.414213446e-03f, 2.742481884e-04f, 5.318295734e-05f, 1.031338525e-05f};
  json c = tiny_llama();
  c["rope_theta"] = 500000.0;
  const ModelConfig a = parse_model_config(c, "m");
  c.erase("rope_theta");
  c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 500000.0}};
  const ModelConfig b = parse_model_config(c, "m");
  for (int i = 0; i < 8; ++i) {
    CHECK(a.inv_freq[i] == doctest::Approx(expected[i]).epsilon(2e-7));
    CHECK(b.inv_freq[i] == a.inv_freq[i]);
  }
}

TEST_CASE("Llama-3 rope_scaling matches transformers in both config layouts") {
  // Reference: transformers 5.23 ROPE_INIT_FUNCTIONS["llama3"] for head_dim 16, theta 5e5,
  // factor 8, low 1, high 4, original 64 (frequency 0 kept, 1 smoothed, 2..7 divided by 8).
  const float expected[8] = {1.000000000e+00f, 7.940301299e-02f, 4.700753838e-03f, 9.115831344e-04f,
                             1.767766807e-04f, 3.428102355e-05f, 6.647869668e-06f, 1.289173156e-06f};
  const json scaling = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                        {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 64}};
  json hub = tiny_llama();
  hub["rope_theta"] = 500000.0;
  hub["rope_scaling"] = scaling;
  json v5 = tiny_llama();
  v5["rope_parameters"] = scaling;
  v5["rope_parameters"]["rope_theta"] = 500000.0;
  const ModelConfig a = parse_model_config(hub, "m"), b = parse_model_config(v5, "m");
  REQUIRE(a.inv_freq.size() == 8);
  for (int i = 0; i < 8; ++i) {
    CHECK(a.inv_freq[i] == doctest::Approx(expected[i]).epsilon(1e-6));
    CHECK(b.inv_freq[i] == a.inv_freq[i]);
  }
}

TEST_CASE("sliding windows: Mistral on every layer, Qwen2 by layer_types or max_window_layers") {
  json c = tiny_llama();
  c["architectures"] = {"MistralForCausalLM"};
  c["model_type"] = "mistral";
  c["sliding_window"] = 4;
  CHECK(parse_model_config(c, "m").sliding_window == std::vector<uint32_t>{4, 4});
  c["sliding_window"] = nullptr;
  CHECK(parse_model_config(c, "m").sliding_window == std::vector<uint32_t>{0, 0});

  json q = tiny_llama();
  q["architectures"] = {"Qwen2ForCausalLM"};
  q["model_type"] = "qwen2";
  q["sliding_window"] = 8;
  q["use_sliding_window"] = false;
  q["max_window_layers"] = 1;
  ModelConfig m = parse_model_config(q, "m");
  CHECK(m.qkv_bias);
  CHECK_FALSE(m.o_bias);
  CHECK(m.sliding_window == std::vector<uint32_t>{0, 0});
  q["use_sliding_window"] = true;
  CHECK(parse_model_config(q, "m").sliding_window == std::vector<uint32_t>{0, 8});
  q["layer_types"] = {"sliding_attention", "full_attention"};
  CHECK(parse_model_config(q, "m").sliding_window == std::vector<uint32_t>{8, 0});
}
