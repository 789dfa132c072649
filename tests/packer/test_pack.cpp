// Packing real transformers-made checkpoints (tests/fixtures/models) and generated ones:
// checkpoint reading and shape checks, bit-exact pruning/quantization against the fixtures'
// reference variants, the size formula, tiers, provenance, atomic output.
#include <doctest/doctest.h>
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>

#include "endor/checkpoint.h"
#include "endor/pack.h"
#include "endor/prune.h"
#include "endor/safetensors.h"
#include "synthetic_checkpoint.h"

using namespace endor;
using endor::test::make_temp_dir;
using endor::test::read_bytes;
using endor::test::remove_tree;
using endor::test::write_bytes;

namespace {

std::string fixture(const std::string& name) { return std::string(ENDOR_SOURCE_DIR) + "/tests/fixtures/models/" + name; }

std::vector<float> decode(const ContainerReader& r, const std::string& name) {
  const std::optional<TensorView> v = r.find_tensor(name);
  REQUIRE_MESSAGE(v.has_value(), "tensor missing: " << name);
  validate_bitmap(*v, name);
  std::vector<float> out(v->layout.rows * v->layout.cols);
  decode_rows_f32(*v, 0, v->layout.rows, out.data());
  return out;
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d))
      if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") names.push_back(e->d_name);
    ::closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// f32 values of one tensor in a safetensors file (reference data of the fixtures).
std::vector<float> read_reference(const std::string& path, const std::string& name) {
  const auto f = SafetensorsFile::open(path);
  const SafetensorsEntry* e = f->header().find(name);
  REQUIRE_MESSAGE(e != nullptr, name << " not in " << path);
  std::vector<float> v(e->numel());
  convert_to_f32(e->dtype, f->data(*e), v.size(), v.data());
  return v;
}

bool bits_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

uint64_t align(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// SPEC.md §6.2 written out independently: bitmap, index, values, (scales, mins), each section
// at the next multiple of 16, no padding after the last.
uint64_t spec_tensor_bytes(const TensorInfo& t) {
  const uint64_t rows = t.shape.size() == 1 ? 1 : t.shape[0];
  const uint64_t cols = t.numel() / rows;
  std::vector<uint64_t> sections;
  if (t.encoding == Encoding::Bitmap) {
    sections.push_back(rows * ((cols + 63) / 64) * 8);
    sections.push_back(rows * ((cols + 4095) / 4096) * 4);
  }
  const uint64_t nnz = t.nnz;
  switch (t.value_type) {
    case ValueType::F16:
    case ValueType::BF16: sections.push_back(nnz * 2); break;
    case ValueType::F32: sections.push_back(nnz * 4); break;
    case ValueType::I8:
      sections.push_back(nnz);
      sections.push_back(rows * 4);
      break;
    case ValueType::I4: {
      const uint64_t groups = (cols + t.group_size - 1) / t.group_size;
      sections.push_back((nnz + 1) / 2);
      sections.push_back(rows * groups * 2);
      sections.push_back(rows * groups * 2);
      break;
    }
  }
  uint64_t cursor = 0, end = 0;
  for (uint64_t s : sections) {
    cursor = align(cursor, 16);
    cursor += s;
    if (s > 0) end = cursor;
  }
  return end;
}

PackOptions prune_options(double sparsity) {
  PackOptions o;
  o.command = "prune";
  o.prune.sparsity = sparsity;
  o.tool_version = "test";
  return o;
}

}  // namespace

TEST_CASE("every fixture opens: canonical names, execution order, shapes, files") {
  for (const char* name : {"opt-tiny", "opt-noprefix", "opt-postln-proj", "llama-tiny", "llama-gqa-bf16", "llama3-rope",
                           "mistral-tiny", "qwen2-tiny", "llama-sharded"}) {
    const std::string name_s = name;
    CAPTURE(name_s);
    const auto ck = Checkpoint::open(fixture(name));
    const auto& ts = ck->tensors();
    REQUIRE(!ts.empty());
    CHECK(ts.front().role.group == TensorRole::Group::Embed);
    CHECK(ts.back().role.group == TensorRole::Group::Head);
    uint32_t last_layer = 0;
    for (const CheckpointTensor& t : ts) {
      CHECK((t.name.rfind("model.", 0) == 0 || t.name == "lm_head.weight"));
      if (t.role.group == TensorRole::Group::Layer) {
        CHECK(t.role.layer >= last_layer);
        last_layer = t.role.layer;
        const bool linear = t.shape.size() == 2;
        CHECK(t.role.prunable == linear);
      } else {
        CHECK_FALSE(t.role.prunable);
      }
    }
    CHECK(last_layer == ck->shape().layers - 1);
    const bool has_head = std::any_of(ts.begin(), ts.end(), [](const CheckpointTensor& t) { return t.name == "lm_head.weight"; });
    CHECK(has_head == !ck->shape().tied_head);
    CHECK(ck->generation_config().is_object());
    CHECK(ck->config() == nlohmann::json::parse(read_bytes(fixture(name) + "/config.json")));
    REQUIRE(!ck->files().empty());
    CHECK(ck->files()[0].name == "tokenizer.json");
  }
}

TEST_CASE("OPT without the model. prefix reads as the same tensors as with it") {
  const auto a = Checkpoint::open(fixture("opt-tiny"));
  const auto b = Checkpoint::open(fixture("opt-noprefix"));
  REQUIRE(a->tensors().size() == b->tensors().size());
  for (size_t i = 0; i < a->tensors().size(); ++i) {
    CHECK(a->tensors()[i].name == b->tensors()[i].name);
    CHECK(b->tensors()[i].source_name.rfind("decoder.", 0) == 0);
  }
  CHECK(classify_tensor("model.decoder.layers.12.fc1.weight", {8, 4}).layer == 12);
  CHECK(classify_tensor("model.decoder.embed_positions.weight", {8, 4}).group == TensorRole::Group::Embed);
  CHECK(classify_tensor("model.decoder.project_in.weight", {8, 4}).group == TensorRole::Group::Embed);
  CHECK(classify_tensor("model.decoder.project_out.weight", {8, 4}).group == TensorRole::Group::Head);
  CHECK_FALSE(classify_tensor("model.layers.0.self_attn.q_proj.bias", {8}).prunable);
  CHECK_FALSE(classify_tensor("model.layers.0.input_layernorm.weight", {8}).prunable);
  CHECK(canonical_tensor_name(ModelFamily::Llama, "layers.0.mlp.up_proj.weight") == "model.layers.0.mlp.up_proj.weight");
  CHECK(canonical_tensor_name(ModelFamily::Llama, "lm_head.weight") == "lm_head.weight");
}

TEST_CASE("shapes and config.json disagree: clear one-line errors") {
  const std::string dir = make_temp_dir("shape");
  auto copy_fixture = [&](const std::string& name) {
    const std::string dst = dir + "/" + name;
    REQUIRE(std::system(("cp -r '" + fixture(name) + "' '" + dst + "'").c_str()) == 0);
    return dst;
  };
  auto edit_config = [&](const std::string& ck, const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json c = nlohmann::json::parse(read_bytes(ck + "/config.json"));
    edit(c);
    write_bytes(ck + "/config.json", c.dump());
  };
  auto error_of = [](const std::string& ck) -> std::string {
    try {
      Checkpoint::open(ck);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  const std::string hidden = copy_fixture("llama-tiny");
  edit_config(hidden, [](nlohmann::json& c) { c["intermediate_size"] = 100; });
  std::string msg = error_of(hidden);
  CAPTURE(msg);
  // The first Linear of the MLP in file order (down_proj [64, 128]) disagrees.
  CHECK(msg.find(hidden + "/model.safetensors: tensor 'model.layers.0.mlp.") == 0);
  CHECK(msg.find("but config.json (model_type llama, hidden_size 64") != std::string::npos);
  CHECK((msg.find("implies [64, 100]") != std::string::npos || msg.find("implies [100, 64]") != std::string::npos));
  CHECK(msg.find('\n') == std::string::npos);

  const std::string tied = copy_fixture("llama-gqa-bf16");
  edit_config(tied, [](nlohmann::json& c) { c["tie_word_embeddings"] = false; });
  CHECK(error_of(tied).find("'lm_head.weight' is missing") != std::string::npos);

  const std::string layers = copy_fixture("opt-tiny");
  edit_config(layers, [](nlohmann::json& c) { c["num_hidden_layers"] = 1; });
  CHECK(error_of(layers).find("belongs to layer 1 but config.json has num_hidden_layers 1") != std::string::npos);
  edit_config(layers, [](nlohmann::json& c) { c["num_hidden_layers"] = 3; });
  CHECK(error_of(layers).find("is missing") != std::string::npos);

  const std::string arch = copy_fixture("mistral-tiny");
  edit_config(arch, [](nlohmann::json& c) { c["model_type"] = "gpt2"; });
  CHECK(error_of(arch).find("unsupported architecture 'gpt2'") != std::string::npos);
  write_bytes(arch + "/config.json", "{\"model_type\": ");
  CHECK(error_of(arch).find(arch + "/config.json: not valid JSON") == 0);

  const std::string vocab = copy_fixture("qwen2-tiny");
  edit_config(vocab, [](nlohmann::json& c) { c["vocab_size"] = 500; });
  CHECK(error_of(vocab).find("embed_tokens.weight' has shape [512, 64]") != std::string::npos);

  CHECK(error_of(dir + "/nope").find("no such checkpoint folder") != std::string::npos);
  CHECK(error_of(dir).find("no config.json") != std::string::npos);
  remove_tree(dir);
}

TEST_CASE("sharded checkpoint: the index decides, shards are validated") {
  const auto ck = Checkpoint::open(fixture("llama-sharded"));
  const auto single = Checkpoint::open(fixture("llama-tiny"));
  CHECK(ck->tensors().size() == single->tensors().size());
  CHECK(ck->input_paths().size() >= 5);

  const std::string dir = make_temp_dir("shards");
  const std::string c = dir + "/ck";
  REQUIRE(std::system(("cp -r '" + fixture("llama-sharded") + "' '" + c + "'").c_str()) == 0);
  nlohmann::json index = nlohmann::json::parse(read_bytes(c + "/model.safetensors.index.json"));
  index["weight_map"]["model.norm.weight"] = "../escape.safetensors";
  write_bytes(c + "/model.safetensors.index.json", index.dump());
  CHECK_THROWS_WITH_AS(Checkpoint::open(c), doctest::Contains("not a file in this folder"), Error);
  index["weight_map"]["model.norm.weight"] = "model-00009-of-00009.safetensors";
  write_bytes(c + "/model.safetensors.index.json", index.dump());
  CHECK_THROWS_WITH_AS(Checkpoint::open(c), doctest::Contains("model-00009-of-00009.safetensors: shard named by"), Error);
  remove_tree(dir);
}

TEST_CASE("prune 50% per row matches the fixtures' reference variants bit for bit") {
  // variant_weights/mag50.safetensors: transformers-side pruning + f16/int8/int4 (group 32).
  for (const char* name : {"llama-tiny", "qwen2-tiny", "opt-postln-proj"}) {
    const std::string name_s = name;
    CAPTURE(name_s);
    const std::string ref = fixture(name) + "/variant_weights/mag50.safetensors";
    const auto ref_file = SafetensorsFile::open(ref);
    const std::string dir = make_temp_dir("variants");
    for (const char* variant : {"mag50_f16", "mag50_int8", "mag50_int4"}) {
      const std::string variant_s = variant;
      CAPTURE(variant_s);
      PackOptions o = prune_options(0.5);
      o.dtype = Dtype::F16;
      if (std::string(variant) == "mag50_int8") o.quant = Dtype::Int8;
      if (std::string(variant) == "mag50_int4") {
        o.quant = Dtype::Int4;
        o.group_size = 32;
      }
      const std::string out = dir + "/" + variant + ".endor";
      pack_checkpoint(fixture(name), out, o);
      const auto r = ContainerReader::open(out);
      r->verify_all();
      int checked = 0;
      for (const SafetensorsEntry& e : ref_file->header().tensors) {
        const std::string key = e.name;
        if (key.rfind(std::string(variant) + ":", 0) != 0) continue;
        const std::string tensor = key.substr(key.find(':') + 1);
        CAPTURE(tensor);
        CHECK(bits_equal(decode(*r, tensor), read_reference(ref, key)));
        ++checked;
      }
      CHECK(checked >= 1);
    }
    remove_tree(dir);
  }
}

TEST_CASE("--quant-head: the embedding and lm_head quantized within one step of their grid, never pruned") {
  // llama-tiny: untied head; qwen2-tiny: tied (one matrix); opt-tiny: its position embedding stays.
  for (const char* name : {"llama-tiny", "qwen2-tiny", "opt-tiny"})
    for (Quantization qh : {Dtype::Int8, Dtype::Int4}) {
      const std::string name_s = name;
      CAPTURE(name_s);
      CAPTURE(to_string(qh));
      const std::string dir = make_temp_dir("quant-head");
      PackOptions plain = prune_options(0.5);
      plain.dtype = Dtype::F32;
      PackOptions o = plain;
      o.quant_head = qh;
      o.group_size = 32;
      pack_checkpoint(fixture(name), dir + "/plain.endor", plain);
      pack_checkpoint(fixture(name), dir + "/q.endor", o);
      const auto rp = ContainerReader::open(dir + "/plain.endor");
      const auto rq = ContainerReader::open(dir + "/q.endor");
      rq->verify_all();
      CHECK(rq->manifest().provenance.value("quant_head", std::string()) == to_string(qh));
      int heads = 0;
      for (const TensorInfo& t : rq->manifest().tensors) {
        CAPTURE(t.name);
        const bool head = t.name == "lm_head.weight" ||
                          (t.name.size() >= 19 && t.name.compare(t.name.size() - 19, 19, "embed_tokens.weight") == 0);
        if (!head) {
          // Everything else exactly as without the option.
          CHECK(bits_equal(decode(*rq, t.name), decode(*rp, t.name)));
          continue;
        }
        ++heads;
        CHECK(t.value_type == (qh == Dtype::Int8 ? ValueType::I8 : ValueType::I4));
        CHECK(t.encoding == Encoding::Dense);  // not pruned
        const std::vector<float> w = decode(*rp, t.name), wq = decode(*rq, t.name);
        REQUIRE(w.size() == wq.size());
        const uint64_t cols = t.shape[1], rows = w.size() / cols;
        // int8: half a step of the row's scale max|w|/127; int4: one step of the 32-column group's
        // grid, (max(mx, 0) − min(mn, 0))/15 rounded up to 7 bits (int4_grid). Tolerances from the grids.
        size_t bad = 0;
        for (uint64_t r = 0; r < rows; ++r) {
          const uint64_t gs = qh == Dtype::Int8 ? cols : 32;
          for (uint64_t g0 = 0; g0 < cols; g0 += gs) {
            const uint64_t g1 = std::min(cols, g0 + gs);
            float mn = w[r * cols + g0], mx = mn, amax = 0;
            for (uint64_t c = g0; c < g1; ++c) {
              mn = std::min(mn, w[r * cols + c]);
              mx = std::max(mx, w[r * cols + c]);
              amax = std::max(amax, std::fabs(w[r * cols + c]));
            }
            const float tol = qh == Dtype::Int8 ? amax / 127.0f * 0.501f + 1e-7f : (std::max(mx, 0.0f) - std::min(mn, 0.0f)) / 15.0f * 1.02f + 1e-6f;
            for (uint64_t c = g0; c < g1; ++c) bad += !(std::fabs(wq[r * cols + c] - w[r * cols + c]) <= tol);
          }
        }
        CHECK(bad == 0);
        // Quantized for real: some value moved.
        CHECK_FALSE(bits_equal(w, wq));
      }
      CHECK(heads == (name_s == "llama-tiny" ? 2 : 1));
      remove_tree(dir);
    }
}

TEST_CASE("convert keeps values: same dtype bit-identical, f32 -> f16 rounded to nearest even") {
  const std::string dir = make_temp_dir("convert");
  pack_checkpoint(fixture("llama-gqa-bf16"), dir + "/a.endor", PackOptions());
  const auto ck = Checkpoint::open(fixture("llama-gqa-bf16"));
  const auto r = ContainerReader::open(dir + "/a.endor");
  for (const CheckpointTensor& t : ck->tensors()) {
    const TensorInfo* info = r->manifest().find_tensor(t.name);
    REQUIRE(info != nullptr);
    CHECK(info->value_type == ValueType::BF16);
    CHECK(info->source_dtype == "BF16");
    std::vector<float> src(t.numel());
    ck->read_rows_f32(t, 0, t.rows(), src.data());
    CHECK(bits_equal(decode(*r, t.name), src));
  }
  PackOptions f16;
  f16.dtype = Dtype::F16;
  pack_checkpoint(fixture("llama-tiny"), dir + "/b.endor", f16);
  const auto ck32 = Checkpoint::open(fixture("llama-tiny"));
  const auto r16 = ContainerReader::open(dir + "/b.endor");
  for (const CheckpointTensor& t : ck32->tensors()) {
    std::vector<float> src(t.numel());
    ck32->read_rows_f32(t, 0, t.rows(), src.data());
    for (float& x : src) x = f16_to_f32(f32_to_f16(x));
    const std::vector<float> got = decode(*r16, t.name);
    CHECK(bits_equal(got, src));
    // The row-chunked dense conversion writes exactly what encode_tensor would.
    std::vector<float> raw(t.numel());
    ck32->read_rows_f32(t, 0, t.rows(), raw.data());
    EncodeOptions eo;
    eo.encoding = r16->manifest().find_tensor(t.name)->encoding;
    eo.value_type = ValueType::F16;
    const EncodedTensor enc = encode_tensor(raw.data(), t.shape, eo);
    const TensorView v = *r16->find_tensor(t.name);
    CHECK(std::memcmp(enc.bytes.data(), v.data, enc.bytes.size()) == 0);
  }
  remove_tree(dir);
}

TEST_CASE("container carries config verbatim, generation config, tokenizer files, provenance") {
  const std::string dir = make_temp_dir("meta");
  PackOptions o = prune_options(0.5);
  o.quant = Dtype::Int4;
  o.group_size = 64;
  o.skip_regex = "mlp\\.down";
  pack_checkpoint(fixture("qwen2-tiny"), dir + "/q.endor", o);
  const auto r = ContainerReader::open(dir + "/q.endor");
  const Manifest& m = r->manifest();
  CHECK(m.config == nlohmann::json::parse(read_bytes(fixture("qwen2-tiny") + "/config.json")));
  CHECK(m.generation_config == nlohmann::json::parse(read_bytes(fixture("qwen2-tiny") + "/generation_config.json")));
  const auto tok = r->file("tokenizer.json");
  REQUIRE(tok.has_value());
  // The same JSON value, keys in their order, without the source's indentation.
  const std::string source_tok = read_bytes(fixture("qwen2-tiny") + "/tokenizer.json");
  CHECK(std::string(*tok) == nlohmann::ordered_json::parse(source_tok).dump());
  CHECK(tok->size() < source_tok.size());
  const nlohmann::json& p = m.provenance;
  CHECK(p["method"] == "magnitude");
  CHECK(p["sparsity"] == 0.5);
  CHECK(p["pattern"] == "unstructured");
  CHECK(p["scope"] == "row");
  CHECK(p["quant"] == "int4");
  CHECK(p["group_size"] == 64);
  CHECK(p["dtype"] == "source");
  CHECK(p["tool"]["name"] == "endor-pack");
  CHECK(p["source"] == "qwen2-tiny");  // the folder's name, never the packer's path to it
  CHECK(p["created_utc"].get<std::string>().size() == 20);
  // Groups in execution order, files last on the cpu tier.
  REQUIRE(m.groups.size() == 5);
  CHECK(m.groups[0].name == "embed");
  CHECK(m.groups[1].name == "layers.0");
  CHECK(m.groups[2].name == "layers.1");
  CHECK(m.groups[3].name == "head");
  CHECK(m.groups[4].name == "files");
  CHECK(m.groups[4].tier == Tier::Cpu);
  // --skip: down_proj neither pruned nor quantized; the other Linears int4 bitmap; biases untouched.
  for (const TensorInfo& t : m.tensors) {
    CAPTURE(t.name);
    const bool linear = t.name.find("layers.") != std::string::npos && t.shape.size() == 2;
    if (linear && t.name.find("down_proj") == std::string::npos) {
      CHECK(t.value_type == ValueType::I4);
      CHECK(t.group_size == 64);
      CHECK(t.encoding == Encoding::Bitmap);
    } else {
      CHECK(t.value_type == ValueType::F32);
      CHECK(t.encoding == Encoding::Dense);
    }
  }
  remove_tree(dir);
}

TEST_CASE("choose_encoding: int4 keeps a pruned tensor's zeros in a bitmap, stores an unpruned one dense") {
  const std::vector<uint64_t> shape{64, 256};
  const uint64_t n = 64 * 256;
  CHECK(choose_encoding(shape, Dtype::Int4, 128, n) == Encoding::Dense);
  CHECK(choose_encoding(shape, Dtype::Int4, 128, n - 10) == Encoding::Dense);        // a checkpoint's own zeros
  CHECK(choose_encoding(shape, Dtype::Int4, 128, n - n / 100 + 1) == Encoding::Dense);  // just under 1 %
  CHECK(choose_encoding(shape, Dtype::Int4, 128, n - n / 100 - 1) == Encoding::Bitmap);  // just over 1 %
  CHECK(choose_encoding(shape, Dtype::Int4, 128, n / 2) == Encoding::Bitmap);
  CHECK(choose_encoding(shape, Dtype::Int4, 128, 0) == Encoding::Bitmap);
  // int8 and the float types: the smaller encoding (a bitmap costs 1 bit a column).
  CHECK(choose_encoding(shape, Dtype::Int8, 0, n - 10) == Encoding::Dense);
  CHECK(choose_encoding(shape, Dtype::Int8, 0, n / 2) == Encoding::Bitmap);
  CHECK(choose_encoding(shape, Dtype::F16, 0, n / 2) == Encoding::Bitmap);
}

TEST_CASE("size formula: f16/bf16 at 50% is 9/16 of the pruned Linears plus the rest, within 2%") {
  for (const char* dtype : {"F16", "BF16"}) {
    const std::string dtype_s = dtype;
    CAPTURE(dtype_s);
    const std::string dir = make_temp_dir("size");
    endor::test::LlamaDims d;
    d.vocab = 1024;  // the bytebpe fixture tokenizer's 1001 ids fit
    d.hidden = 512;
    d.intermediate = 1024;
    d.layers = 1;  // keeps the sanitizer build quick; index/padding overheads stay under 2 %
    d.heads = 8;
    d.kv_heads = 4;
    d.dtype = dtype;
    endor::test::write_llama_checkpoint(dir + "/ck", d);
    const std::string tokenizer =
        read_bytes(std::string(ENDOR_SOURCE_DIR) + "/tests/fixtures/tokenizers/bytebpe/tokenizer.json");
    write_bytes(dir + "/ck/tokenizer.json", tokenizer);
    pack_checkpoint(dir + "/ck", dir + "/out.endor", prune_options(0.5));
    const auto r = ContainerReader::open(dir + "/out.endor");
    r->verify_all();
    uint64_t linear_dense = 0, other = 0, linears = 0;
    for (const TensorInfo& t : r->manifest().tensors) {
      CAPTURE(t.name);
      CHECK(t.size == spec_tensor_bytes(t));  // the exact spec formula, per tensor
      const bool linear = t.name.find("layers.") != std::string::npos && t.shape.size() == 2;
      if (!linear) {
        other += t.numel() * 2;
        CHECK(t.encoding == Encoding::Dense);
        continue;
      }
      ++linears;
      linear_dense += t.numel() * 2;
      CHECK(t.encoding == Encoding::Bitmap);
      const std::vector<float> w = decode(*r, t.name);
      const uint64_t cols = t.shape[1];
      uint64_t rows_below_half = 0;
      for (uint64_t row = 0; row < t.shape[0]; ++row)
        rows_below_half += std::count(w.begin() + long(row * cols), w.begin() + long((row + 1) * cols), 0.0f) < long(cols / 2);
      CHECK(rows_below_half == 0);
    }
    CHECK(linears == 7);
    const double expected = 9.0 / 16.0 * double(linear_dense) + double(other) + double(tokenizer.size());
    const double actual = double(r->file_bytes());
    MESSAGE("file bytes / (9/16 linear + other + files) = " << actual / expected);
    CHECK(std::fabs(actual / expected - 1.0) < 0.02);
    // The data region is exactly the blobs laid out by the alignment rules.
    uint64_t cursor = r->header().data_offset;
    for (const GroupInfo& g : r->manifest().groups) {
      cursor = align(cursor, 4096);
      CHECK(g.offset == cursor);
      for (uint32_t ti : g.tensors) {
        cursor = align(cursor, 64);
        CHECK(r->manifest().tensors[ti].offset == cursor);
        cursor += r->manifest().tensors[ti].size;
      }
      for (uint32_t fi : g.files) {
        cursor = align(cursor, 64);
        cursor += r->manifest().files[fi].size;
      }
    }
    CHECK(cursor <= r->header().manifest_offset);
    CHECK(r->header().manifest_offset - cursor < 4096);
    CHECK(r->file_bytes() == r->header().manifest_offset + r->header().manifest_bytes);
    remove_tree(dir);
  }
}

TEST_CASE("N:M, matrix scope, and --sparsity 0 keeping an already-pruned checkpoint's zeros") {
  const std::string dir = make_temp_dir("nm");
  endor::test::LlamaDims d;
  endor::test::write_llama_checkpoint(dir + "/ck", d);
  PackOptions nm = prune_options(0.0);
  nm.prune.n = 2;
  nm.prune.m = 4;
  pack_checkpoint(dir + "/ck", dir + "/nm.endor", nm);
  const auto r = ContainerReader::open(dir + "/nm.endor");
  for (const TensorInfo& t : r->manifest().tensors) {
    if (t.shape.size() != 2 || t.name.find("layers.") == std::string::npos) continue;
    CHECK(t.nnz == t.numel() / 2);
    const std::vector<float> w = decode(*r, t.name);
    for (size_t i = 0; i < w.size(); i += 4) CHECK(std::count(w.begin() + long(i), w.begin() + long(i + 4), 0.0f) >= 2);
  }
  CHECK(r->manifest().provenance["pattern"] == "2:4");
  CHECK(r->manifest().provenance["sparsity"] == 0.5);

  PackOptions matrix = prune_options(0.6);
  matrix.prune.scope = PruneScope::Matrix;
  pack_checkpoint(dir + "/ck", dir + "/mx.endor", matrix);
  const auto rm = ContainerReader::open(dir + "/mx.endor");
  const TensorInfo* q = rm->manifest().find_tensor("model.layers.0.self_attn.q_proj.weight");
  REQUIRE(q != nullptr);
  CHECK(double(q->numel() - q->nnz) >= 0.6 * double(q->numel()));
  CHECK(rm->manifest().provenance["scope"] == "matrix");

  // Re-pack the 2:4 output's values as a checkpoint: --sparsity 0 keeps exactly those zeros.
  const auto ck = Checkpoint::open(dir + "/ck");
  std::vector<endor::test::RawTensor> ts;
  for (const CheckpointTensor& t : ck->tensors())
    ts.push_back({t.name, "F16", t.shape, endor::test::encode_values(decode(*r, t.name), "F16")});
  ::mkdir((dir + "/pruned").c_str(), 0755);
  write_bytes(dir + "/pruned/config.json", read_bytes(dir + "/ck/config.json"));
  write_bytes(dir + "/pruned/model.safetensors", endor::test::safetensors_file(ts));
  PackOptions keep = prune_options(0.0);
  pack_checkpoint(dir + "/pruned", dir + "/keep.endor", keep);
  const auto rk = ContainerReader::open(dir + "/keep.endor");
  for (const TensorInfo& t : r->manifest().tensors) {
    CAPTURE(t.name);
    const TensorInfo* k = rk->manifest().find_tensor(t.name);
    REQUIRE(k != nullptr);
    CHECK(k->encoding == t.encoding);
    CHECK(k->nnz == t.nnz);
    CHECK(bits_equal(decode(*rk, t.name), decode(*r, t.name)));
  }
  remove_tree(dir);
}

TEST_CASE("tier budgets are applied to the packed groups") {
  const std::string dir = make_temp_dir("tiers");
  PackOptions all;
  pack_checkpoint(fixture("llama-tiny"), dir + "/all.endor", all);
  const auto r = ContainerReader::open(dir + "/all.endor");
  const auto& g = r->manifest().groups;
  REQUIRE(g.size() == 5);
  for (size_t i = 0; i < 4; ++i) CHECK(g[i].tier == Tier::Gpu);
  PackOptions budget;
  budget.budget.gpu_bytes = g[0].size + g[3].size + g[1].size;  // embed, head, layers.0
  budget.budget.cpu_bytes = 0;
  pack_checkpoint(fixture("llama-tiny"), dir + "/b.endor", budget);
  const auto rb = ContainerReader::open(dir + "/b.endor");
  const auto& gb = rb->manifest().groups;
  CHECK(gb[0].tier == Tier::Gpu);
  CHECK(gb[1].tier == Tier::Gpu);
  CHECK(gb[2].tier == Tier::Disk);
  CHECK(gb[3].tier == Tier::Gpu);
  CHECK(gb[4].tier == Tier::Cpu);
  remove_tree(dir);
}

TEST_CASE("pack_checkpoint follows the prune spec, not the subcommand's name") {
  const std::string dir = make_temp_dir("command");
  endor::test::LlamaDims d;
  d.dtype = "F32";
  endor::test::write_llama_checkpoint(dir + "/ck", d);
  // A spec the data-free pruner cannot run is refused under any command name (it was checked only
  // under "prune"), before anything is written.
  for (const char* command : {"convert", "prune", "compare"}) {
    PackOptions o = prune_options(0.0);
    o.command = command;
    o.prune.sparsity_ramp = 0.1;
    CHECK_THROWS_WITH_AS(pack_checkpoint(dir + "/ck", dir + "/bad.endor", o), doctest::Contains("--sparsity-ramp"), Error);
    CHECK(!std::ifstream(dir + "/bad.endor").good());
  }
  // An active spec prunes whatever the name: the same tensors pruned under "convert" as under "prune".
  PackOptions as_prune = prune_options(0.5), as_convert = prune_options(0.5);
  as_convert.command = "convert";
  const PackSummary a = pack_checkpoint(dir + "/ck", dir + "/a.endor", as_prune);
  const PackSummary b = pack_checkpoint(dir + "/ck", dir + "/b.endor", as_convert);
  CHECK(a.pruned_tensors > 0);
  CHECK(b.pruned_tensors == a.pruned_tensors);
}

TEST_CASE("failures leave no output and no temporary file; the input is untouched") {
  const std::string dir = make_temp_dir("atomic");
  endor::test::LlamaDims d;
  d.dtype = "F32";
  endor::test::write_llama_checkpoint(dir + "/ck", d);
  // An infinite weight makes int4 quantization fail half-way through the pack.
  std::string bytes = read_bytes(dir + "/ck/model.safetensors");
  const auto ck = Checkpoint::open(dir + "/ck");
  const CheckpointTensor* down = nullptr;
  for (const CheckpointTensor& t : ck->tensors())
    if (t.name == "model.layers.1.mlp.down_proj.weight") down = &t;
  REQUIRE(down != nullptr);
  const float inf = INFINITY;
  const size_t data_start = bytes.size() - size_t(ck->source_bytes());
  const size_t pos = data_start + size_t(down->entry->begin);
  std::memcpy(&bytes[pos], &inf, 4);
  ::mkdir((dir + "/bad").c_str(), 0755);
  write_bytes(dir + "/bad/config.json", read_bytes(dir + "/ck/config.json"));
  write_bytes(dir + "/bad/model.safetensors", bytes);
  const std::string before = read_bytes(dir + "/bad/model.safetensors");
  ::mkdir((dir + "/out").c_str(), 0755);
  PackOptions o = prune_options(0.5);
  o.quant = Dtype::Int4;
  std::map<std::string, int> registered;  // path -> registrations minus releases
  std::vector<std::string> order;
  PackCallbacks cb;
  cb.on_temp_file = [&](const std::string& p, bool exists) {
    registered[p] += exists ? 1 : -1;
    order.push_back(p);
  };
  CHECK_THROWS_WITH_AS(pack_checkpoint(dir + "/bad", dir + "/out/x.endor", o, cb),
                       doctest::Contains("model.layers.1.mlp.down_proj.weight"), Error);
  CHECK(list_dir(dir + "/out").empty());
  REQUIRE(order.size() >= 2);
  CHECK(order.front().find(dir + "/out/x.endor.tmp-") == 0);
  for (const auto& [path, n] : registered) CHECK_MESSAGE(n == 0, path);  // the CLI's record is cleared too
  CHECK(read_bytes(dir + "/bad/model.safetensors") == before);

  CHECK_THROWS_AS(pack_checkpoint(dir + "/ck", dir + "/missing-dir/x.endor", PackOptions()), Error);
  CHECK_THROWS_WITH_AS(pack_checkpoint(dir + "/ck", dir + "/ck/model.safetensors", PackOptions()),
                       doctest::Contains("input file"), Error);
  CHECK_THROWS_WITH_AS(pack_checkpoint(dir + "/ck", dir + "/out", PackOptions()), doctest::Contains("is a folder"), Error);
  CHECK(list_dir(dir + "/out").empty());
  CHECK(list_dir(dir + "/ck") == std::vector<std::string>{"config.json", "model.safetensors"});
  remove_tree(dir);
}

TEST_CASE("a tokenizer.json the runtime cannot load, or with ids past the vocab, is refused at pack time") {
  const std::string dir = make_temp_dir("tokenizer");
  endor::test::LlamaDims d;  // vocab smaller than the bytebpe fixture's 1001 ids
  endor::test::write_llama_checkpoint(dir + "/ck", d);
  ::mkdir((dir + "/out").c_str(), 0755);
  const std::string good =
      read_bytes(std::string(ENDOR_SOURCE_DIR) + "/tests/fixtures/tokenizers/bytebpe/tokenizer.json");
  const struct {
    std::string bytes, expected;
  } cases[] = {
      {std::string(5000, 'x'), "tokenizer.json"},
      {"{\"model\": {\"type\": \"Unigram\"}}", "tokenizer.json"},
      {good, "model's vocab is " + std::to_string(d.vocab)},
  };
  for (const auto& c : cases) {
    CAPTURE(c.expected);
    write_bytes(dir + "/ck/tokenizer.json", c.bytes);
    CHECK_THROWS_WITH_AS(pack_checkpoint(dir + "/ck", dir + "/out/x.endor", PackOptions()),
                         doctest::Contains(c.expected.c_str()), Error);
    CHECK(list_dir(dir + "/out").empty());
    CHECK(read_bytes(dir + "/ck/tokenizer.json") == c.bytes);
  }
  remove_tree(dir);
}

// Issue 36: whether an error already names the checkpoint is the error's typed where(), not a
// search of its text. A pruning/encoding error is told which tensor of which checkpoint it is
// about; one that names a file of the checkpoint (its reader's FileError) goes as it is.
TEST_CASE("prepare_tensor: an error names the checkpoint and the tensor once") {
  struct Throwing final : Pruner {
    std::function<void()> raise;
    void prune(const std::string&, float*, uint64_t, uint64_t) override { raise(); }
  };
  const std::unique_ptr<Checkpoint> ck = Checkpoint::open(fixture("llama-tiny"));
  const CheckpointTensor& t = ck->tensors().front();
  const std::string dir = ck->dir();
  PackOptions o;
  TensorTreatment tr;
  tr.prune = true;
  tr.dtype = Dtype::F32;
  Throwing pruner;
  std::string where;
  auto error_of = [&]() -> std::string {
    try {
      prepare_tensor(*ck, t, tr, &pruner, o);
    } catch (const FileError& e) {
      where = e.where();
      return e.what();
    } catch (const Error& e) {
      where = "(not a FileError)";
      return e.what();
    }
    return "";
  };
  pruner.raise = [] { throw Error("the pruner broke"); };
  CHECK(error_of() == dir + ": tensor '" + t.source_name + "': the pruner broke");
  CHECK(where == dir + ": tensor '" + t.source_name + "'");
  pruner.raise = [&] { throw FileError(dir + "/model.safetensors", "bytes went missing"); };
  CHECK(error_of() == dir + "/model.safetensors: bytes went missing");
  CHECK(where == dir + "/model.safetensors");
  // The folder's name in the text of an error about another file does not count.
  pruner.raise = [&] { throw FileError("calib.txt", "shorter than " + dir); };
  CHECK(error_of() == dir + ": tensor '" + t.source_name + "': calib.txt: shorter than " + dir);
}
