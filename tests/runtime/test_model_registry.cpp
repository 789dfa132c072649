// The model registry (model-registry/): one family table per architecture gives every tensor's
// canonical name, shape, group, order, requiredness, prunability and llama.cpp name; the one
// config.json parser decides the family from architectures[0] and model_type together.
#include <doctest/doctest.h>

#include <set>
#include <string>

#include "endor/model_registry.h"
#include "endor/format.h"

using namespace endor;
using nlohmann::json;

namespace {

json llama_config() {
  return {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"hidden_size", 64},
          {"intermediate_size", 128}, {"num_hidden_layers", 2}, {"num_attention_heads", 4},
          {"num_key_value_heads", 2}, {"vocab_size", 512}, {"max_position_embeddings", 128}};
}

json opt_config() {
  return {{"architectures", {"OPTForCausalLM"}}, {"model_type", "opt"}, {"hidden_size", 64}, {"ffn_dim", 128},
          {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"vocab_size", 512},
          {"max_position_embeddings", 128}};
}

std::string error_of(const json& cfg) {
  try {
    parse_model_config(cfg, "m/config.json", "");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::vector<std::string> names(const ModelTensors& t) {
  std::vector<std::string> out;
  for (const TensorSpec& s : t.all()) out.push_back(s.name);
  return out;
}

}  // namespace

TEST_CASE("registry: the family needs architectures[0] and model_type to agree") {
  CHECK(parse_model_config(llama_config(), "m").model_type == "llama");
  json c = llama_config();
  c["model_type"] = "qwen2";  // a Llama class with a Qwen2 model_type: which one runs?
  std::string e = error_of(c);
  CHECK(e.find("m/config.json: architectures[0] names a llama model but model_type is 'qwen2'") == 0);
  c["model_type"] = "gpt2";
  CHECK(error_of(c).find("unsupported architecture 'gpt2' (model_type; supported: opt, llama, mistral, qwen2, qwen3, qwen3_moe, mixtral)") !=
        std::string::npos);
  c = llama_config();
  c["architectures"] = {"GPT2LMHeadModel"};
  CHECK(error_of(c).find("unsupported architecture \"GPT2LMHeadModel\"") != std::string::npos);
  c.erase("architectures");
  c["model_type"] = "mistral";  // model_type alone is enough
  CHECK(parse_model_config(c, "m").model_type == "mistral");
  c = llama_config();
  c.erase("model_type");        // and so is architectures[0]
  CHECK(parse_model_config(c, "m").model_type == "llama");
  // With a source named, errors say which file: "<path>: <source>: <what>".
  c["hidden_size"] = 0;
  try {
    parse_model_config(c, "x.endor");
    FAIL("no error");
  } catch (const Error& err) {
    CHECK(std::string(err.what()).find("x.endor: config.json: \"hidden_size\"") == 0);
  }
}

TEST_CASE("registry: Llama tensors, their order, shapes, groups and llama.cpp names") {
  const ModelConfig c = parse_model_config(llama_config(), "m");
  const ModelTensors t(c);
  const std::vector<std::string> n = names(t);
  // Embed group, block 0 (bias before weight within a module, execution order), ..., head group.
  REQUIRE(n.size() == 1 + 2 * 16 + 2);
  CHECK(n[0] == "model.embed_tokens.weight");
  CHECK(n[1] == "model.layers.0.input_layernorm.weight");
  CHECK(n[2] == "model.layers.0.self_attn.q_proj.bias");
  CHECK(n[3] == "model.layers.0.self_attn.q_proj.weight");
  CHECK(n[16] == "model.layers.0.mlp.down_proj.weight");
  CHECK(n[33] == "model.norm.weight");
  CHECK(n[34] == "lm_head.weight");
  const TensorSpec& k = t.get(Module::K, 1);
  CHECK(k.name == "model.layers.1.self_attn.k_proj.weight");
  CHECK(k.shape == std::vector<uint64_t>{32, 64});  // 2 kv heads x 16
  CHECK(k.linear);
  CHECK(k.required);
  CHECK(k.group == TensorRole::Group::Layer);
  CHECK(k.layer == 1);
  CHECK(k.gguf_name == "blk.1.attn_k.weight");
  CHECK_FALSE(t.get(Module::K, 1, true).required);          // attention_bias false: optional, checked when present
  CHECK(t.get(Module::K, 1, true).gguf_name.empty());       // llama.cpp's llama has no such bias here
  CHECK_FALSE(t.get(Module::AttnNorm, 0).linear);
  CHECK(t.get(Module::LmHead).required);                    // untied
  CHECK(t.get(Module::LmHead).gguf_name == "output.weight");
  CHECK(t.find_gguf("blk.0.ffn_down.weight") == &t.get(Module::Down, 0));
  CHECK(t.find_gguf("blk.2.ffn_down.weight") == nullptr);   // past num_hidden_layers
  CHECK_FALSE(t.has(Module::QNorm));
  CHECK(t.block_prefix(3) == "model.layers.3.");
  std::vector<std::string> linears;
  for (const BlockLinear& l : t.block_linears()) linears.push_back(l.name);
  CHECK(linears == std::vector<std::string>{"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                            "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"});
  // A name the family does not list sorts with its module, or after every known one.
  CHECK(t.rank_in_group("model.layers.0.mlp.up_proj.lora_A") == t.get(Module::Up, 0).rank);
  CHECK(t.rank_in_group("model.layers.0.mystery.weight") > t.get(Module::Down, 0).rank);

  json tied = llama_config();
  tied["tie_word_embeddings"] = true;
  CHECK_FALSE(ModelTensors(parse_model_config(tied, "m")).get(Module::LmHead).required);
  json qwen2 = llama_config();
  qwen2["architectures"] = {"Qwen2ForCausalLM"};
  qwen2["model_type"] = "qwen2";
  const ModelTensors q2(parse_model_config(qwen2, "m"));
  CHECK(q2.get(Module::V, 0, true).required);  // Qwen2: q/k/v biases, with llama.cpp names
  CHECK(q2.get(Module::V, 0, true).gguf_name == "blk.0.attn_v.bias");
  CHECK(q2.get(Module::O, 0, true).gguf_name.empty());
}

TEST_CASE("registry: OPT tensors follow the config's options") {
  json o = opt_config();
  const ModelTensors t(parse_model_config(o, "m"));
  CHECK(t.get(Module::PositionEmbed).shape == std::vector<uint64_t>{130, 64});  // learned positions, offset 2
  CHECK(t.get(Module::O, 1).name == "model.decoder.layers.1.self_attn.out_proj.weight");
  CHECK(t.get(Module::MlpNorm, 0, true).name == "model.decoder.layers.0.final_layer_norm.bias");
  CHECK(t.get(Module::FinalNorm).name == "model.decoder.final_layer_norm.weight");
  CHECK(t.get(Module::FinalNorm).group == TensorRole::Group::Head);
  CHECK_FALSE(t.has(Module::ProjectIn));
  CHECK(t.get(Module::LmHead).name == "lm_head.weight");
  CHECK_FALSE(t.get(Module::LmHead).required);  // OPTConfig ties by default
  for (const TensorSpec& s : t.all()) CHECK(s.gguf_name.empty());
  CHECK_FALSE(gguf_family(parse_model_config(o, "m")));
  CHECK(t.block_linears().back().name == "fc2");
  CHECK(t.block_prefix(0) == "model.decoder.layers.0.");

  o["word_embed_proj_dim"] = 32;
  o["do_layer_norm_before"] = false;
  o["enable_bias"] = false;
  const ModelTensors p(parse_model_config(o, "m"));
  CHECK(p.get(Module::ProjectIn).shape == std::vector<uint64_t>{64, 32});
  CHECK(p.get(Module::ProjectIn).group == TensorRole::Group::Embed);
  CHECK(p.get(Module::ProjectOut).group == TensorRole::Group::Head);
  CHECK(p.get(Module::TokenEmbed).shape == std::vector<uint64_t>{512, 32});
  CHECK_FALSE(p.get(Module::FinalNorm).required);  // post-LN OPT has none
  CHECK_FALSE(p.get(Module::Fc1, 0, true).required);
}

TEST_CASE("registry: GGUF families") {
  CHECK(gguf_family("llama")->permute_qk);
  CHECK_FALSE(gguf_family("qwen2")->permute_qk);
  CHECK(gguf_family("qwen2")->hf_architecture == "Qwen2ForCausalLM");
  CHECK_FALSE(gguf_family("gpt2"));
  json mistral = llama_config();
  mistral["architectures"] = {"MistralForCausalLM"};
  mistral["model_type"] = "mistral";
  CHECK(gguf_family(parse_model_config(mistral, "m"))->arch == "llama");
  CHECK(gguf_family_names().find("llama, qwen2") == 0);
}

TEST_CASE("registry: canonical names and roles") {
  CHECK(canonical_tensor_name(Architecture::Opt, "decoder.layers.0.fc1.weight") == "model.decoder.layers.0.fc1.weight");
  CHECK(canonical_tensor_name(Architecture::Llama, "norm.weight") == "model.norm.weight");
  CHECK(canonical_tensor_name(Architecture::Llama, "lm_head.weight") == "lm_head.weight");
  CHECK(is_rotary_buffer("model.layers.0.self_attn.rotary_emb.inv_freq"));
  CHECK_FALSE(is_rotary_buffer("model.layers.0.self_attn.q_proj.weight"));
  const TensorRole embed = classify_tensor("model.embed_tokens.weight", {512, 64});
  CHECK(embed.group == TensorRole::Group::Embed);
  CHECK(embed.embedding);
  CHECK(embed.head_matrix);
  const TensorRole pos = classify_tensor("model.decoder.embed_positions.weight", {130, 64});
  CHECK(pos.embedding);
  CHECK_FALSE(pos.head_matrix);  // --quant-head leaves OPT's position table alone
  CHECK(classify_tensor("lm_head.weight", {512, 64}).head_matrix);
  CHECK_FALSE(classify_tensor("model.decoder.project_in.weight", {64, 32}).embedding);
}

TEST_CASE("registry: Qwen3 has per-head q/k norms, its own head_dim and llama.cpp's qwen3 names") {
  json q = llama_config();
  q["architectures"] = {"Qwen3ForCausalLM"};
  q["model_type"] = "qwen3";
  q["head_dim"] = 24;  // not 64 / 4
  const ModelConfig c = parse_model_config(q, "m");
  CHECK(c.arch == Architecture::Llama);
  CHECK(c.qk_norm);
  CHECK_FALSE(c.qkv_bias);
  CHECK(c.head_dim == 24);
  const ModelTensors t(c);
  const TensorSpec& qn = t.get(Module::QNorm, 1);
  CHECK(qn.name == "model.layers.1.self_attn.q_norm.weight");
  CHECK(qn.shape == std::vector<uint64_t>{24});
  CHECK(qn.required);
  CHECK_FALSE(qn.linear);  // a norm: never pruned
  CHECK(qn.gguf_name == "blk.1.attn_q_norm.weight");
  CHECK(t.get(Module::KNorm, 0).gguf_name == "blk.0.attn_k_norm.weight");
  CHECK(t.get(Module::Q, 0).shape == std::vector<uint64_t>{96, 64});
  CHECK(t.get(Module::O, 0).shape == std::vector<uint64_t>{64, 96});
  // Execution order: the norms follow q/k/v and come before o_proj.
  CHECK(t.get(Module::V, 0).rank < qn.rank);
  CHECK(t.get(Module::KNorm, 0).rank < t.get(Module::O, 0).rank);
  CHECK(t.block_linears().size() == 7);
  CHECK(gguf_family(c)->arch == "qwen3");
  CHECK_FALSE(gguf_family(c)->permute_qk);
  CHECK(gguf_family("qwen3")->hf_architecture == "Qwen3ForCausalLM");

  q.erase("head_dim");  // Qwen3Config's default is 128, whatever hidden / heads is
  CHECK(parse_model_config(q, "m").head_dim == 128);
  q["use_sliding_window"] = true;
  q["sliding_window"] = 8;
  q["max_window_layers"] = 1;
  CHECK(parse_model_config(q, "m").sliding_window == std::vector<uint32_t>{0, 8});
}

namespace {
json qwen3_moe_config() {
  json q = llama_config();
  q["architectures"] = {"Qwen3MoeForCausalLM"};
  q["model_type"] = "qwen3_moe";
  q["num_experts"] = 5;
  q["num_experts_per_tok"] = 3;
  q["moe_intermediate_size"] = 40;
  q["norm_topk_prob"] = true;
  q["decoder_sparse_step"] = 1;
  q["mlp_only_layers"] = json::array();
  return q;
}
}  // namespace

TEST_CASE("registry: Qwen3-MoE lists a router and every expert's gate/up/down as block Linears") {
  const ModelConfig c = parse_model_config(qwen3_moe_config(), "m");
  CHECK(c.moe());
  CHECK(c.n_experts == 5);
  CHECK(c.top_k == 3);
  CHECK(c.moe_intermediate == 40);
  CHECK(c.norm_topk_prob);
  CHECK(c.qk_norm);
  CHECK(c.head_dim == 16);  // Qwen3MoeAttention: hidden / heads when head_dim is absent
  const ModelTensors t(c);
  const TensorSpec& router = t.get(Module::Router, 1);
  CHECK(router.name == "model.layers.1.mlp.gate.weight");
  CHECK(router.shape == std::vector<uint64_t>{5, 64});
  CHECK(router.required);
  CHECK_FALSE(router.linear);  // never pruned
  CHECK(router.gguf_name == "blk.1.ffn_gate_inp.weight");
  const TensorSpec& up3 = t.get(Module::Up, 1, false, 3);
  CHECK(up3.name == "model.layers.1.mlp.experts.3.up_proj.weight");
  CHECK(up3.shape == std::vector<uint64_t>{40, 64});
  CHECK(up3.expert == 3);
  CHECK(up3.linear);
  CHECK(t.get(Module::Down, 0, false, 4).shape == std::vector<uint64_t>{64, 40});
  CHECK(t.find("model.layers.0.mlp.gate_proj.weight") == nullptr);  // no dense MLP
  CHECK_THROWS_AS(t.get(Module::Gate, 0), Error);
  // Execution order: attention, the router, then expert by expert (gate, up, down).
  CHECK(t.get(Module::O, 0).rank < router.rank);
  CHECK(router.rank < t.get(Module::Gate, 0, false, 0).rank);
  CHECK(t.get(Module::Down, 0, false, 0).rank < t.get(Module::Gate, 0, false, 1).rank);
  CHECK(t.get(Module::Down, 0, false, 3).rank < t.get(Module::Gate, 0, false, 4).rank);
  // Block Linears: q, k, v, o, then 5 x (gate, up, down); the router is not one.
  const std::vector<BlockLinear>& lin = t.block_linears();
  REQUIRE(lin.size() == 4 + 15);
  CHECK(lin[4].name == "mlp.experts.0.gate_proj");
  CHECK(lin[4].expert == 0);
  CHECK(lin[18].name == "mlp.experts.4.down_proj");
  CHECK(lin[18].rows == 64);
  CHECK(lin[18].cols == 40);
  // llama.cpp's names: the router, and each expert a slice of its Linear's stacked tensor.
  REQUIRE(gguf_family(c));
  CHECK(gguf_family(c)->arch == "qwen3moe");
  CHECK(up3.gguf_name == "blk.1.ffn_up_exps.weight");
  CHECK(t.find_gguf("blk.1.ffn_up_exps.weight") == nullptr);  // not one tensor of the model
  const std::vector<const TensorSpec*> ups = t.find_gguf_stacked("blk.1.ffn_up_exps.weight");
  REQUIRE(ups.size() == 5);
  for (int e = 0; e < 5; ++e) CHECK(ups[e] == &t.get(Module::Up, 1, false, e));
  CHECK(t.find_gguf_stacked("blk.1.attn_q.weight").empty());
  CHECK(t.find_gguf("blk.1.ffn_gate_inp.weight") == &router);
  // The router is neither prunable nor quantized by name either (checkpoint tensors are classified by name).
  const TensorRole role = classify_tensor("model.layers.0.mlp.gate.weight", {5, 64});
  CHECK(role.router);
  CHECK_FALSE(role.prunable);
  CHECK(classify_tensor("model.layers.0.mlp.experts.2.gate_proj.weight", {40, 64}).prunable);
  CHECK_FALSE(classify_tensor("model.layers.0.mlp.gate_proj.weight", {40, 64}).router);
  CHECK(classify_tensor("model.layers.0.block_sparse_moe.gate.weight", {8, 64}).router);
}

TEST_CASE("registry: Qwen3-MoE configs the runtime cannot run are refused in one line") {
  json q = qwen3_moe_config();
  q.erase("num_experts");
  q["num_local_experts"] = 5;  // transformers 5 writes this name
  CHECK(parse_model_config(q, "m").n_experts == 5);
  q["num_experts_per_tok"] = 6;
  CHECK(error_of(q) == "m/config.json: num_experts_per_tok 6 is more than num_local_experts 5");
  q = qwen3_moe_config();
  q["decoder_sparse_step"] = 2;
  CHECK(error_of(q).find("m/config.json: decoder_sparse_step 2 mixes dense and MoE blocks") == 0);
  q = qwen3_moe_config();
  q["mlp_only_layers"] = {0};
  CHECK(error_of(q).find("m/config.json: mlp_only_layers [0] mixes dense and MoE blocks") == 0);
  q = qwen3_moe_config();
  q.erase("moe_intermediate_size");
  CHECK(error_of(q) == "m/config.json: missing \"moe_intermediate_size\"");
  q = qwen3_moe_config();
  q.erase("norm_topk_prob");
  CHECK_FALSE(parse_model_config(q, "m").norm_topk_prob);  // Qwen3MoeConfig's default
  q["use_sliding_window"] = true;
  CHECK(error_of(q).find("use_sliding_window true is not supported for qwen3_moe") != std::string::npos);
}

TEST_CASE("registry: Mixtral's block_sparse_moe experts w1/w3/w2, always renormalized top-k") {
  json m = llama_config();
  m["architectures"] = {"MixtralForCausalLM"};
  m["model_type"] = "mixtral";
  m["num_local_experts"] = 4;
  m["num_experts_per_tok"] = 2;
  m["sliding_window"] = 16;
  const ModelConfig c = parse_model_config(m, "m");
  CHECK(c.n_experts == 4);
  CHECK(c.top_k == 2);
  CHECK(c.moe_intermediate == 128);  // intermediate_size is each expert's
  CHECK(c.norm_topk_prob);
  CHECK_FALSE(c.qk_norm);
  CHECK(c.sliding_window == std::vector<uint32_t>{16, 16});  // as Mistral: every layer
  const ModelTensors t(c);
  CHECK(t.get(Module::Router, 0).name == "model.layers.0.block_sparse_moe.gate.weight");
  CHECK(t.get(Module::Gate, 1, false, 2).name == "model.layers.1.block_sparse_moe.experts.2.w1.weight");
  CHECK(t.get(Module::Up, 1, false, 2).name == "model.layers.1.block_sparse_moe.experts.2.w3.weight");
  CHECK(t.get(Module::Down, 1, false, 2).name == "model.layers.1.block_sparse_moe.experts.2.w2.weight");
  CHECK(t.get(Module::Down, 1, false, 2).shape == std::vector<uint64_t>{64, 128});
  CHECK(t.block_linears().size() == 4 + 12);
  // llama.cpp writes Mixtral as llama (q/k permuted), w1/w3/w2 stacked as ffn_gate/up/down_exps.
  REQUIRE(gguf_family(c));
  CHECK(gguf_family(c)->arch == "llama");
  CHECK(t.get(Module::Gate, 1, false, 2).gguf_name == "blk.1.ffn_gate_exps.weight");
  CHECK(t.find_gguf_stacked("blk.1.ffn_down_exps.weight").size() == 4);
  CHECK(t.get(Module::Router, 0).gguf_name == "blk.0.ffn_gate_inp.weight");
  m["num_experts_per_tok"] = 5;
  CHECK(error_of(m) == "m/config.json: num_experts_per_tok 5 is more than num_local_experts 4");
  m["num_experts_per_tok"] = 0;
  CHECK(error_of(m).find("\"num_experts_per_tok\" must be an integer in [1, 16777216]") != std::string::npos);
}
