// GGUF import: the parser against a table of corrupt files, the dequantizers against gguf-py
// (random blocks of every readable quantized type, and a file llama.cpp's llama-quantize made:
// tools/make_gguf_quant_fixtures.py), whole-model weights against transformers' GGUF loader
// (tests/fixtures/gguf, made by tools/make_gguf_fixtures.py), and tokenizers built from tokenizer.ggml.* against the real
// tokenizers' reference encodings (tests/fixtures/tokenizers).
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "endor/gguf.h"
#include "endor/checkpoint.h"
#include "endor/pack.h"
#include "endor/tokenizer.h"
#include "gguf_builder.h"

using namespace endor;

namespace {

std::string fixture(const std::string& rel) { return std::string(ENDOR_SOURCE_DIR) + "/tests/fixtures/" + rel; }

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in, "cannot open " << path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string read_zst(const std::string& path) {
  const std::string z = read_file(path);
  const unsigned long long n = ZSTD_getFrameContentSize(z.data(), z.size());
  REQUIRE(n != ZSTD_CONTENTSIZE_ERROR);
  REQUIRE(n != ZSTD_CONTENTSIZE_UNKNOWN);
  std::string out(size_t(n), '\0');
  REQUIRE(ZSTD_decompress(out.data(), out.size(), z.data(), z.size()) == n);
  return out;
}

bool exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/endor-gguf-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() { (void)std::system(("rm -rf '" + path + "'").c_str()); }
};

void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

// All values of a checkpoint tensor as f32, in Hugging Face layout.
std::vector<float> values(const Checkpoint& ck, const CheckpointTensor& t) {
  std::vector<float> v(t.numel());
  ck.read_rows_f32(t, 0, t.rows(), v.data());
  return v;
}

}  // namespace

TEST_CASE("gguf: the tiny llama equals transformers' GGUF loader bit for bit (dequantized, q/k un-permuted)") {
  const auto g = Checkpoint::open(fixture("gguf/tiny-llama.gguf"));
  const auto h = Checkpoint::open(fixture("gguf/tiny-llama-hf"));
  REQUIRE(g->tensors().size() == h->tensors().size());
  for (size_t i = 0; i < g->tensors().size(); ++i) {
    const CheckpointTensor &a = g->tensors()[i], &b = h->tensors()[i];
    CAPTURE(a.name);
    REQUIRE(a.name == b.name);  // same names, same execution order
    REQUIRE(a.shape == b.shape);
    const std::vector<float> x = values(*g, a), y = values(*h, b);
    CHECK(std::memcmp(x.data(), y.data(), x.size() * 4) == 0);
  }
  // The types of the source and the default stored dtype (f16 for quantized, source otherwise).
  const auto find = [&](const std::string& name) -> const CheckpointTensor& {
    for (const CheckpointTensor& t : g->tensors())
      if (t.name == name) return t;
    FAIL("no tensor " << name);
    return g->tensors()[0];
  };
  CHECK(find("model.layers.0.self_attn.q_proj.weight").source_type == "Q4_1");
  CHECK(!find("model.layers.0.self_attn.q_proj.weight").direct);
  CHECK(find("model.layers.0.self_attn.o_proj.weight").direct);  // F16, not permuted: borrowed
  PackOptions o;
  CHECK(plan_treatment(find("model.embed_tokens.weight"), o).dtype == Dtype::F16);
  CHECK(plan_treatment(find("model.layers.0.mlp.gate_proj.weight"), o).dtype == Dtype::BF16);
  CHECK(plan_treatment(find("model.norm.weight"), o).dtype == Dtype::F32);

  // Packed in f32 and bf16 the stored blobs are identical too.
  for (ValueType vt : {ValueType::F32, ValueType::BF16}) {
    o.dtype = dtype_of(vt);
    for (size_t i = 0; i < g->tensors().size(); ++i) {
      const CheckpointTensor &a = g->tensors()[i], &b = h->tensors()[i];
      const PreparedTensor pa = prepare_tensor(*g, a, plan_treatment(a, o), nullptr, o);
      const PreparedTensor pb = prepare_tensor(*h, b, plan_treatment(b, o), nullptr, o);
      CAPTURE(a.name);
      REQUIRE(pa.n_bytes == pb.n_bytes);
      CHECK(std::memcmp(pa.data, pb.data, pa.n_bytes) == 0);
    }
  }
}

TEST_CASE("gguf: config.json from the metadata has the values transformers gives") {
  const auto g = Checkpoint::open(fixture("gguf/tiny-llama.gguf"));
  const nlohmann::json hf = nlohmann::json::parse(read_file(fixture("gguf/tiny-llama-hf/config.json")));
  for (const char* key : {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                          "num_key_value_heads", "head_dim", "max_position_embeddings", "rms_norm_eps", "vocab_size",
                          "tie_word_embeddings", "bos_token_id", "eos_token_id", "model_type", "architectures"}) {
    CAPTURE(key);
    CHECK(g->config().at(key) == hf.at(key));
  }
  CHECK(g->config().at("rope_theta") == hf.at("rope_parameters").at("rope_theta"));
  // The tokenizer files, as a Hugging Face folder's: loadable by the runtime's tokenizer.
  bool has_tok = false, has_cfg = false;
  for (const AuxFile& f : g->files()) {
    if (f.name == "tokenizer.json") {
      has_tok = true;
      const Tokenizer t = Tokenizer::from_json(f.content, "tokenizer.json");
      CHECK(t.vocab_size() == 1000);
      CHECK(t.is_special(0));
      CHECK(t.decode(t.encode("Hello world, the GGUF file.")) == "Hello world, the GGUF file.");
    }
    if (f.name == "tokenizer_config.json") {
      has_cfg = true;
      const nlohmann::json c = nlohmann::json::parse(f.content);
      CHECK(c.at("add_bos_token") == false);
      CHECK(c.at("bos_token") == "<|endoftext|>");
      CHECK(c.at("chat_template").get<std::string>().find("<|im_start|>") != std::string::npos);
    }
  }
  CHECK(has_tok);
  CHECK(has_cfg);
}

TEST_CASE("gguf: dequantizers give gguf-py's values bit for bit on the tiny llama (F32, F16, BF16, Q8_0, Q4_0, Q4_1)") {
  const auto f = GgufFile::open(fixture("gguf/tiny-llama.gguf"));
  const nlohmann::json expected = nlohmann::json::parse(read_file(fixture("gguf/expected.json")));
  CHECK(expected.size() == 6);
  for (auto it = expected.begin(); it != expected.end(); ++it) {
    CAPTURE(it.key());
    const GgufTensorInfo* t = f->header().tensor(it.value().at("tensor").get<std::string>());
    REQUIRE(t != nullptr);
    CHECK(ggml_type_name(t->type) == it.key());
    std::vector<float> out(64);
    ggml_dequantize(t->type, f->data(*t), 64, out.data());
    for (size_t i = 0; i < 64; ++i) {
      uint32_t bits;
      std::memcpy(&bits, &out[i], 4);
      CHECK(bits == it.value().at("bits")[i].get<uint32_t>());
    }
  }
  // Q4_1 by hand: d = 0.5, m = -1, nibbles: element j = j % 16 (low), 15 - j % 16 (high).
  uint8_t blk[20];
  const uint16_t d = f32_to_f16(0.5f), m = f32_to_f16(-1.0f);
  std::memcpy(blk, &d, 2);
  std::memcpy(blk + 2, &m, 2);
  for (int j = 0; j < 16; ++j) blk[4 + j] = uint8_t(j | ((15 - j) << 4));
  float out[32];
  ggml_dequantize(GgmlType::Q4_1, blk, 32, out);
  for (int j = 0; j < 16; ++j) {
    CHECK(out[j] == 0.5f * float(j) - 1.0f);
    CHECK(out[16 + j] == 0.5f * float(15 - j) - 1.0f);
  }
  float out256[256];
  uint8_t iq2[66] = {};
  CHECK_THROWS_WITH_AS(ggml_dequantize(GgmlType::IQ2_XXS, iq2, 256, out256), doctest::Contains("IQ2_XXS"), Error);
}

namespace {

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

std::vector<float> dequantized(const GgufFile& f, const GgufTensorInfo& t) {
  std::vector<float> v(t.numel());
  ggml_dequantize(t.type, f.data(t), t.numel(), v.data());
  return v;
}

}  // namespace

TEST_CASE("gguf: Q5_0, Q5_1, IQ4_NL, K-quants and IQ4_XS dequantize as gguf-py does, bit for bit, on random blocks") {
  // quant-blocks.gguf (tools/make_gguf_quant_fixtures.py): per type T, tensor T of random blocks
  // and two edge blocks (all 0x00 with f16 max scales, all 0xFF with subnormal ones), and
  // T.expected, gguf.quants.dequantize of it.
  const auto f = GgufFile::open(fixture("gguf/quant-blocks.gguf"));
  int types = 0;
  for (const GgufTensorInfo& t : f->header().tensors) {
    if (t.name.find('.') != std::string::npos) continue;
    CAPTURE(t.name);
    ++types;
    CHECK(ggml_type_name(t.type) == t.name);
    CHECK(ggml_type_readable(t.type));
    const GgufTensorInfo* e = f->header().tensor(t.name + ".expected");
    REQUIRE(e != nullptr);
    REQUIRE(e->type == GgmlType::F32);
    REQUIRE(e->numel() == t.numel());
    const std::vector<float> got = dequantized(*f, t), want = dequantized(*f, *e);
    size_t mismatches = 0, first = got.size();
    for (size_t i = 0; i < got.size(); ++i)
      if (bits_of(got[i]) != bits_of(want[i])) {
        if (first == got.size()) first = i;
        ++mismatches;
      }
    CHECK_MESSAGE(mismatches == 0, mismatches << " of " << got.size() << " values differ, first at " << first << ": "
                                             << (first < got.size() ? got[first] : 0.f) << " vs gguf-py "
                                             << (first < got.size() ? want[first] : 0.f));
  }
  CHECK(types == 12);  // Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 IQ4_NL Q2_K Q3_K Q4_K Q5_K Q6_K IQ4_XS
}

TEST_CASE("gguf: a file llama-quantize made, one tensor per quantized type, reads as gguf-py dequantizes it") {
  // llama-mix.gguf: a one-layer llama quantized by llama.cpp's llama-quantize with a type per
  // tensor; llama-mix.json: gguf-py's dequantization of each tensor, as an XXH64 of its f32 bytes
  // and its first 64 values (tools/make_gguf_quant_fixtures.py).
  const auto f = GgufFile::open(fixture("gguf/llama-mix.gguf"));
  const nlohmann::json expected = nlohmann::json::parse(read_file(fixture("gguf/llama-mix.json"))).at("tensors");
  CHECK(expected.size() == f->header().tensors.size());
  std::set<std::string> types;
  for (const GgufTensorInfo& t : f->header().tensors) {
    CAPTURE(t.name);
    REQUIRE(expected.contains(t.name));
    const nlohmann::json& e = expected.at(t.name);
    CHECK(ggml_type_name(t.type) == e.at("type").get<std::string>());
    types.insert(ggml_type_name(t.type));
    REQUIRE(t.numel() == e.at("elements").get<uint64_t>());
    const std::vector<float> v = dequantized(*f, t);
    for (size_t i = 0; i < 64 && i < v.size(); ++i) CHECK(bits_of(v[i]) == e.at("first_bits")[i].get<uint32_t>());
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(XXH64(v.data(), v.size() * 4, 0)));
    CHECK(std::string(hex) == e.at("xxh64").get<std::string>());
  }
  for (const char* t : {"Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q5_0", "Q5_1", "IQ4_NL", "IQ4_XS"}) {
    CAPTURE(t);
    CHECK(types.count(t) == 1);
  }

  // The same file as a checkpoint: Hugging Face names and layout (q/k rows un-permuted), and packs.
  const auto ck = Checkpoint::open(fixture("gguf/llama-mix.gguf"));
  const GgufTensorInfo* q = f->header().tensor("blk.0.attn_q.weight");
  const GgufTensorInfo* up = f->header().tensor("blk.0.ffn_up.weight");
  REQUIRE(q != nullptr);
  REQUIRE(up != nullptr);
  const std::vector<float> q_gguf = dequantized(*f, *q), up_gguf = dequantized(*f, *up);
  bool found_q = false, found_up = false;
  for (const CheckpointTensor& t : ck->tensors()) {
    if (t.name == "model.layers.0.self_attn.q_proj.weight") {
      found_q = true;
      CHECK(t.source_type == "Q4_K");
      const std::vector<float> hf = values(*ck, t);
      const uint64_t rows = t.rows(), cols = t.cols();
      bool same = true;
      for (uint64_t r = 0; r < rows; ++r)
        same = same && std::memcmp(&hf[r * cols], &q_gguf[gguf_unpermuted_row(r, rows, 2) * cols], cols * 4) == 0;
      CHECK(same);
    } else if (t.name == "model.layers.0.mlp.up_proj.weight") {
      found_up = true;
      CHECK(t.source_type == "IQ4_NL");
      CHECK(values(*ck, t) == up_gguf);
    }
  }
  CHECK(found_q);
  CHECK(found_up);
  TempDir dir;
  pack_checkpoint(fixture("gguf/llama-mix.gguf"), dir.path + "/mix.endor", PackOptions{});
  CHECK(exists(dir.path + "/mix.endor"));
}

TEST_CASE("gguf: q/k row un-permutation is transformers' reshape(heads, d, 2).swapaxes(1, 2)") {
  // rows 8, 2 heads: d = 2; HF row (head h, half s, i) comes from GGUF row h*4 + 2*i + s.
  const uint64_t expect[8] = {0, 2, 1, 3, 4, 6, 5, 7};
  for (uint64_t r = 0; r < 8; ++r) CHECK(gguf_unpermuted_row(r, 8, 2) == expect[r]);
}

TEST_CASE("gguf: corrupt or unsupported files give one line naming the file, and no output") {
  TempDir dir;
  const std::string out = dir.path + "/out.endor";
  for (const gguf_test::CorruptCase& c : gguf_test::corrupt_cases()) {
    CAPTURE(c.name);
    const std::string path = dir.path + "/bad.gguf";
    write_bytes(path, c.bytes);
    std::string msg;
    try {
      // Through the parser directly when the magic is there (the fuzz target's entry point)...
      if (c.bytes.size() >= 4) {
        try {
          (void)parse_gguf(c.bytes.data(), c.bytes.size(), path);
        } catch (const Error&) {
        }
      }
      // ...and through the packer, which must not leave an output file.
      PackOptions o;
      pack_checkpoint(path, out, o);
    } catch (const Error& e) {
      msg = e.what();
    }
    CHECK_MESSAGE(msg.find(c.fragment) != std::string::npos, "message: " << msg);
    CHECK(msg.find('\n') == std::string::npos);
    CHECK(msg.rfind(path, 0) == 0);  // starts with the file
    CHECK(!exists(out));
    CHECK(!exists(out + ".tmp-" + std::to_string(::getpid())));
  }
  // The valid base of the table packs.
  write_bytes(dir.path + "/good.gguf", gguf_test::tiny_llama().build());
  pack_checkpoint(dir.path + "/good.gguf", out, PackOptions{});
  CHECK(exists(out));
}

namespace {

// A GGUF holding only the tokenizer of a real tokenizer.json, as llama.cpp's convert writes it:
// tokens by id (vocab, then added tokens), token types (added special = control, added plain =
// user-defined, SentencePiece <0xXX> = byte), merges (byte-level) or scores (SentencePiece: the
// file has none; transformers rebuilds merges from the scores).
std::vector<uint8_t> tokenizer_gguf(const nlohmann::json& tj, const std::string& model, const std::string& pre,
                                    bool add_bos, int64_t bos) {
  std::vector<std::string> tokens;
  for (auto it = tj["model"]["vocab"].begin(); it != tj["model"]["vocab"].end(); ++it) {
    const size_t id = it.value().get<size_t>();
    if (tokens.size() <= id) tokens.resize(id + 1);
    tokens[id] = it.key();
  }
  std::vector<int32_t> types(tokens.size(), 1);
  for (const auto& a : tj["added_tokens"]) {
    const size_t id = a["id"].get<size_t>();
    if (tokens.size() <= id) {
      tokens.resize(id + 1);
      types.resize(id + 1, 1);
    }
    tokens[id] = a["content"].get<std::string>();
    types[id] = a["special"].get<bool>() ? 3 : 4;
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i].empty()) tokens[i] = "[PAD" + std::to_string(i) + "]";  // unused ids
    if (model == "llama" && tokens[i].size() == 6 && tokens[i].rfind("<0x", 0) == 0) types[i] = 6;
  }
  gguf_test::Builder b;
  b.kv_str("general.architecture", "llama");
  b.kv_str("tokenizer.ggml.model", model);
  b.kv_str("tokenizer.ggml.pre", pre);
  b.kv_strs("tokenizer.ggml.tokens", tokens);
  b.kv_i32s("tokenizer.ggml.token_type", types);
  if (model == "gpt2") {
    std::vector<std::string> merges;
    for (const auto& m : tj["model"]["merges"])
      merges.push_back(m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>());
    b.kv_strs("tokenizer.ggml.merges", merges);
  } else {
    // SentencePiece scores rank a token by the merge that makes it: -(rank of the first merge of
    // the file giving it); tokens no merge makes rank last (their scores only order merges).
    std::map<std::string, size_t> first_rank;
    size_t rank = 0;
    for (const auto& m : tj["model"]["merges"]) {
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      first_rank.emplace(s.substr(0, sp) + s.substr(sp + 1), rank++);
    }
    std::vector<float> scores(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) {
      const auto it = first_rank.find(tokens[i]);
      scores[i] = it == first_rank.end() ? -1e9f : -float(it->second);
    }
    b.kv_f32s("tokenizer.ggml.scores", scores);
  }
  if (bos >= 0) b.kv_u32("tokenizer.ggml.bos_token_id", uint32_t(bos));
  b.kv_bool("tokenizer.ggml.add_bos_token", add_bos);
  return b.build();
}

}  // namespace

TEST_CASE("gguf: tokenizers built from tokenizer.ggml.* encode the real tokenizers' reference texts") {
  const nlohmann::json refs = nlohmann::json::parse(read_zst(fixture("tokenizers/reference-encodings.json.zst")));
  struct Family {
    const char* name;
    const char* model;
    const char* pre;
    bool add_bos;
    int64_t bos;
  };
  for (const Family& f : {Family{"llama2", "llama", "default", true, 1}, Family{"llama3", "gpt2", "llama-bpe", false, 128000},
                          Family{"qwen3", "gpt2", "qwen2", false, -1}}) {
    CAPTURE(f.name);
    const nlohmann::json tj = nlohmann::json::parse(read_zst(fixture(std::string("tokenizers/") + f.name + ".tokenizer.json.zst")));
    const std::vector<uint8_t> bytes = tokenizer_gguf(tj, f.model, f.pre, f.add_bos, f.bos);
    const GgufHeader h = parse_gguf(bytes.data(), bytes.size(), std::string(f.name) + ".gguf");
    const nlohmann::json built = gguf_tokenizer_json(h, "test");
    if (std::string(f.model) == "llama") CHECK(built["model"]["merges"].size() == tj["model"]["merges"].size());
    const Tokenizer tok = Tokenizer::from_json(built.dump(), f.name);
    const nlohmann::json& cases = refs.at(f.name);
    REQUIRE(cases.size() >= 20);
    for (const auto& c : cases) {
      const std::string text = c.at("text").get<std::string>();
      CAPTURE(text);
      CHECK(tok.encode(text, true) == c.at("ids").get<std::vector<int32_t>>());
    }
  }
}

TEST_CASE("gguf: SentencePiece merges from scores are transformers' generate_merges") {
  // Expected: transformers.tokenization_utils_base.generate_merges(vocab, dict(zip(tokens, scores))).
  gguf_test::Builder b;
  const std::vector<std::string> tokens = {"<unk>", "a", "b", "c", "ab", "bc", "abc", "\u2581", "\u2581a",
                                           "\u2581ab", "ca", "cab", "\u00e9", "\u00e9a"};
  b.kv_str("tokenizer.ggml.model", "llama");
  b.kv_strs("tokenizer.ggml.tokens", tokens);
  b.kv_f32s("tokenizer.ggml.scores", {0, 0, 0, 0, -1, -2, -3, 0, -4, -5, -2, -6, 0, -1});
  b.kv_i32s("tokenizer.ggml.token_type", {2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1});
  b.kv_u32("tokenizer.ggml.unknown_token_id", 0);
  b.kv_u32("tokenizer.ggml.bos_token_id", 0);
  const std::vector<uint8_t> bytes = b.build();
  const nlohmann::json t = gguf_tokenizer_json(parse_gguf(bytes.data(), bytes.size(), "m.gguf"), "m.gguf");
  const nlohmann::json expected = nlohmann::json::parse(R"([["a","b"],["\u00e9","a"],["b","c"],["c","a"],["ab","c"],
      ["a","bc"],["\u2581","a"],["\u2581a","b"],["\u2581","ab"],["ca","b"],["c","ab"]])");
  CHECK(t["model"]["merges"] == expected);
  CHECK(t["model"]["byte_fallback"] == true);
  CHECK(t["model"]["unk_token"] == "<unk>");
  CHECK(t["added_tokens"].size() == 1);  // <unk> (type 2) is special
}

TEST_CASE("gguf: qwen2 maps q/k/v biases and is not un-permuted; llama refuses biases") {
  gguf_test::Builder b = gguf_test::tiny_llama("", "", "qwen2", "qwen2");
  b.tensor_f32("blk.0.attn_q.bias", {32});
  b.tensor_f32("blk.0.attn_k.bias", {16});
  b.tensor_f32("blk.0.attn_v.bias", {16});
  TempDir dir;
  write_bytes(dir.path + "/q.gguf", b.build());
  const auto ck = Checkpoint::open(dir.path + "/q.gguf");
  CHECK(ck->config().at("model_type") == "qwen2");
  CHECK(ck->config().at("architectures")[0] == "Qwen2ForCausalLM");
  size_t biases = 0;
  for (const CheckpointTensor& t : ck->tensors()) {
    if (t.name.find(".bias") != std::string::npos) ++biases;
    CHECK(t.direct);  // F32 and no permutation for qwen2
  }
  CHECK(biases == 3);
  const nlohmann::json tok = nlohmann::json::parse(ck->files()[0].content);
  CHECK(tok.at("normalizer").at("type") == "NFC");
  pack_checkpoint(dir.path + "/q.gguf", dir.path + "/q.endor", PackOptions{});
  const auto r = ContainerReader::open(dir.path + "/q.endor");
  CHECK(r->find_tensor("model.layers.0.self_attn.k_proj.bias").has_value());

  gguf_test::Builder l = gguf_test::tiny_llama();
  l.tensor_f32("blk.0.attn_q.bias", {32});
  write_bytes(dir.path + "/l.gguf", l.build());
  CHECK_THROWS_WITH_AS(Checkpoint::open(dir.path + "/l.gguf"), doctest::Contains("bias is not supported for llama"), Error);
}

namespace {

// Bit for bit, except that Q4_0's −0 (d < 0, q = 8: d·(q − 8)) is +0 once held as q·S + M.
bool same_value(float got, float want) { return bits_of(got) == bits_of(want) || (got == 0.0f && want == 0.0f); }

// Elements of packed tensor v that decode to another value than the checkpoint's tensor t (same_value).
size_t decoded_differences(const TensorView& v, const Checkpoint& ck, const CheckpointTensor& t) {
  std::vector<float> got(t.numel());
  decode_rows_f32(v, 0, t.rows(), got.data());
  const std::vector<float> want = values(ck, t);
  size_t diff = 0;
  for (size_t i = 0; i < got.size(); ++i) diff += !same_value(got[i], want[i]);
  return diff;
}

// decode_rows_f32 of an encoded tensor (the container's definition of its values).
std::vector<float> decoded(const EncodedTensor& e) {
  TensorInfo info;
  info.shape = {e.layout.rows, e.layout.cols};
  info.value_type = e.layout.value_type;
  info.encoding = e.layout.encoding;
  info.group_size = e.layout.group_size;
  info.int4_params = e.layout.int4_params;
  info.nnz = e.layout.nnz;
  TensorView v{&info, e.layout, e.bytes.data()};
  std::vector<float> out(e.layout.rows * e.layout.cols);
  decode_rows_f32(v, 0, e.layout.rows, out.data());
  return out;
}

// `rows` rows of `blocks_per_row` random blocks of a 4-bit type, scales finite f16 in [2^-20, 8].
std::vector<uint8_t> random_blocks(GgmlType type, uint64_t rows, uint64_t blocks_per_row, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> b(rows * blocks_per_row * ggml_block_bytes(type));
  for (uint8_t& x : b) x = uint8_t(rng());
  std::uniform_real_distribution<float> mag(-20.0f, 3.0f);
  const auto f16 = [&](bool sign) { return f32_to_f16((sign && (rng() & 1) ? -1.0f : 1.0f) * std::exp2(mag(rng))); };
  for (uint64_t k = 0; k < rows * blocks_per_row; ++k) {
    uint8_t* blk = b.data() + k * ggml_block_bytes(type);
    const uint16_t d = f16(type != GgmlType::Q4_K), m = f16(true);
    std::memcpy(blk, &d, 2);
    if (type != GgmlType::Q4_0) std::memcpy(blk + 2, &m, 2);  // Q4_1's m, Q4_K's dmin
  }
  return b;
}

}  // namespace

TEST_CASE("gguf: Q4_0, Q4_1 and Q4_K blocks kept as int4 / int4k decode to gguf-py's values bit for bit (−0 as +0)") {
  struct Case {
    GgmlType type;
    Int4Params params;
    uint64_t blocks_per_row;
  };
  for (const Case& c : {Case{GgmlType::Q4_0, Int4Params::F16, 5}, Case{GgmlType::Q4_1, Int4Params::F16, 3},
                        Case{GgmlType::Q4_K, Int4Params::Coded6, 2}}) {
    const std::string type = ggml_type_name(c.type);
    CAPTURE(type);
    const uint64_t rows = 8, cols = c.blocks_per_row * ggml_block_elements(c.type);
    const std::vector<uint8_t> blocks = random_blocks(c.type, rows, c.blocks_per_row, 7);
    std::vector<float> want(rows * cols);
    ggml_dequantize(c.type, blocks.data(), rows * cols, want.data());  // gguf-py's values (tests above)
    for (uint32_t heads : {0u, 2u}) {
      CAPTURE(heads);
      const std::optional<EncodedTensor> e = gguf_exact_int4(c.type, blocks.data(), rows, cols, heads, c.params, 32);
      REQUIRE(e.has_value());
      CHECK(e->layout.value_type == ValueType::I4);
      CHECK(e->layout.int4_params == c.params);
      CHECK(e->layout.encoding == Encoding::Dense);
      const std::vector<float> got = decoded(*e);
      size_t diff = 0;
      for (uint64_t r = 0; r < rows; ++r) {
        const uint64_t src = heads ? gguf_unpermuted_row(r, rows, heads) : r;
        for (uint64_t i = 0; i < cols; ++i) diff += !same_value(got[r * cols + i], want[src * cols + i]);
      }
      CHECK(diff == 0);
    }
    // Another group size or parameter form cannot hold the blocks exactly.
    CHECK_FALSE(gguf_exact_int4(c.type, blocks.data(), rows, cols, 0, c.params, 64).has_value());
    CHECK_FALSE(gguf_exact_int4(c.type, blocks.data(), rows, cols, 0,
                                c.params == Int4Params::F16 ? Int4Params::Coded6 : Int4Params::F16, 32)
                    .has_value());
  }
  // Other types are not int4 grids; a Q4_0 scale whose −8·d leaves f16 has no exact minimum.
  const std::vector<uint8_t> q5 = random_blocks(GgmlType::Q4_0, 1, 1, 3);
  CHECK_FALSE(gguf_exact_int4(GgmlType::Q5_0, q5.data(), 1, 32, 0, Int4Params::F16, 32).has_value());
  CHECK_FALSE(gguf_exact_int4(GgmlType::Q8_0, q5.data(), 1, 32, 0, Int4Params::F16, 32).has_value());
  std::vector<uint8_t> big = random_blocks(GgmlType::Q4_0, 1, 1, 4);
  const uint16_t d_max = f32_to_f16(65504.0f);
  std::memcpy(big.data(), &d_max, 2);
  CHECK_FALSE(gguf_exact_int4(GgmlType::Q4_0, big.data(), 1, 32, 0, Int4Params::F16, 32).has_value());
}

TEST_CASE("gguf: packing a Q4_K / Q4_0 / Q4_1 tensor to int4k / int4 at groups of 32 keeps the file's grid") {
  // llama-mix.gguf's q_proj is Q4_K (rows permuted by llama.cpp's convert); the tiny llama holds
  // Q4_0 and Q4_1 tensors. Packed with the matching encoding, every such tensor decodes to the
  // checkpoint's (gguf-py's) values bit for bit; other types are rounded onto Endor's grid.
  struct Source {
    std::string file;
    Quantization quant;
  };
  for (const Source& s : {Source{"gguf/llama-mix.gguf", Dtype::Int4k}, Source{"gguf/tiny-llama.gguf", Dtype::Int4}}) {
    CAPTURE(s.file);
    TempDir dir;
    PackOptions o;
    o.command = "prune";
    o.quant = s.quant;
    o.group_size = 32;
    const PackSummary sum = pack_checkpoint(fixture(s.file), dir.path + "/q.endor", o);
    const auto ck = Checkpoint::open(fixture(s.file));
    const auto reader = ContainerReader::open(dir.path + "/q.endor");
    uint64_t kept = 0;
    for (const CheckpointTensor& t : ck->tensors()) {
      const bool grid = (s.quant == Dtype::Int4k && t.source_type == "Q4_K") ||
                        (s.quant == Dtype::Int4 && (t.source_type == "Q4_0" || t.source_type == "Q4_1"));
      if (!grid || !t.role.prunable) continue;
      CAPTURE(t.name);
      ++kept;
      const std::optional<TensorView> v = reader->find_tensor(t.name);
      REQUIRE(v.has_value());
      CHECK(decoded_differences(*v, *ck, t) == 0);
    }
    CHECK(kept >= 1);
    CHECK(sum.source_grid_tensors == kept);
  }
}

TEST_CASE("gguf: int4 / int4k tensors written as Q4_1 / Q4_K blocks dequantize to their decoded values bit for bit") {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  const auto matrix = [&](uint64_t rows, uint64_t cols, double zeros) {
    std::vector<float> w(rows * cols);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    for (float& x : w) x = u(rng) < zeros ? 0.0f : normal(rng);
    return w;
  };
  const auto reversed = [](uint64_t rows) { return [rows](uint64_t r) { return rows - 1 - r; }; };
  struct Case {
    Int4Params params;
    uint64_t rows, cols;
    uint32_t group;
    double zeros;
    bool exact;           // a block type holds it
    GgmlType type;
  };
  for (const Case& c : {Case{Int4Params::F16, 6, 96, 32, 0.0, true, GgmlType::Q4_1},
                        Case{Int4Params::F16, 4, 256, 128, 0.0, true, GgmlType::Q4_1},
                        Case{Int4Params::F16, 5, 128, 64, 0.5, true, GgmlType::Q4_1},  // bitmap: zero codes
                        Case{Int4Params::Coded6, 8, 512, 32, 0.0, true, GgmlType::Q4_K},
                        Case{Int4Params::Coded6, 3, 1024, 64, 0.0, true, GgmlType::Q4_K},
                        Case{Int4Params::F16, 4, 96, 16, 0.0, false, GgmlType::F32},      // groups of 16: no block
                        Case{Int4Params::Coded6, 4, 576, 32, 0.0, false, GgmlType::F32},  // 576 = 2.25 blocks
                        Case{Int4Params::Coded6, 2, 256, 64, 0.0, false, GgmlType::F32}}) {  // super-blocks span rows
    CAPTURE(c.cols);
    CAPTURE(c.group);
    const std::vector<float> w = matrix(c.rows, c.cols, c.zeros);
    EncodeOptions eo;
    eo.value_type = ValueType::I4;
    eo.group_size = c.group;
    eo.int4_params = c.params;
    eo.encoding = c.zeros > 0 ? Encoding::Bitmap : Encoding::Dense;
    const EncodedTensor e = encode_tensor(w.data(), {c.rows, c.cols}, eo);
    const std::vector<float> x = decoded(e);
    TensorInfo info;
    info.shape = {c.rows, c.cols};
    TensorView v{&info, e.layout, e.bytes.data()};
    const std::optional<GgufBlocks> b = gguf_blocks_exact(v, x.data(), reversed(c.rows));
    REQUIRE(b.has_value() == c.exact);
    if (!c.exact) continue;
    CHECK(b->type == c.type);
    REQUIRE(b->bytes.size() == c.rows * c.cols / ggml_block_elements(c.type) * ggml_block_bytes(c.type));
    std::vector<float> back(c.rows * c.cols);
    ggml_dequantize(c.type, b->bytes.data(), back.size(), back.data());
    size_t diff = 0;
    for (uint64_t r = 0; r < c.rows; ++r)
      diff += std::memcmp(&back[(c.rows - 1 - r) * c.cols], &x[r * c.cols], c.cols * 4) != 0;
    CHECK(diff == 0);
    // ... and read back as int4 / int4k at groups of 32, the blocks decode the same again.
    const std::optional<EncodedTensor> again =
        gguf_exact_int4(c.type, b->bytes.data(), c.rows, c.cols, 0, c.params, 32);
    REQUIRE(again.has_value());
    const std::vector<float> y = decoded(*again);
    for (uint64_t r = 0; r < c.rows; ++r) CHECK(std::memcmp(&y[(c.rows - 1 - r) * c.cols], &x[r * c.cols], c.cols * 4) == 0);
  }
}

TEST_CASE("gguf: Q8_0 blocks kept as int8g decode to gguf-py's values bit for bit; int8g goes back out as Q8_0") {
  // Random Q8_0 blocks: f16 d of either sign, codes in [−127, 127].
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> mag(-20.0f, 3.0f);
  const uint64_t rows = 6, cols = 96, bpr = cols / 32;
  std::vector<uint8_t> blocks(rows * bpr * ggml_block_bytes(GgmlType::Q8_0));
  for (uint64_t k = 0; k < rows * bpr; ++k) {
    uint8_t* blk = blocks.data() + k * ggml_block_bytes(GgmlType::Q8_0);
    const uint16_t d = f32_to_f16(((rng() & 1) ? -1.0f : 1.0f) * std::exp2(mag(rng)));
    std::memcpy(blk, &d, 2);
    for (int j = 0; j < 32; ++j) blk[2 + j] = uint8_t(int8_t(int(rng() % 255) - 127));
  }
  std::vector<float> want(rows * cols);
  ggml_dequantize(GgmlType::Q8_0, blocks.data(), want.size(), want.data());
  for (uint32_t heads : {0u, 2u}) {
    CAPTURE(heads);
    const std::optional<EncodedTensor> e = gguf_exact_int8g(GgmlType::Q8_0, blocks.data(), rows, cols, heads, 32);
    REQUIRE(e.has_value());
    CHECK(e->layout.value_type == ValueType::I8G);
    CHECK(e->layout.group_size == 32);
    const std::vector<float> got = decoded(*e);
    size_t diff = 0;
    for (uint64_t r = 0; r < rows; ++r) {
      const uint64_t src = heads ? gguf_unpermuted_row(r, rows, heads) : r;
      diff += std::memcmp(&got[r * cols], &want[src * cols], cols * 4) != 0;  // −0 included: q·d either way
    }
    CHECK(diff == 0);
  }
  CHECK_FALSE(gguf_exact_int8g(GgmlType::Q8_0, blocks.data(), rows, cols, 0, 64).has_value());
  CHECK_FALSE(gguf_exact_int8g(GgmlType::Q4_0, blocks.data(), rows, 32, 0, 32).has_value());
  std::vector<uint8_t> bad = blocks;
  bad[2 + 7] = 0x80;  // code −128: not an Endor int8 code
  CHECK_FALSE(gguf_exact_int8g(GgmlType::Q8_0, bad.data(), rows, cols, 0, 32).has_value());

  // The way out: int8g at groups that are multiples of 32 -> Q8_0, bit for bit, rows in GGUF order;
  // pruned (absent) weights take code 0. Other group sizes have no block type.
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  struct Case {
    uint64_t rows, cols;
    uint32_t group;
    double zeros;
    bool exact;
  };
  for (const Case& c : {Case{4, 96, 32, 0.0, true}, Case{3, 256, 128, 0.0, true}, Case{5, 128, 64, 0.5, true},
                        Case{4, 96, 16, 0.0, false}, Case{2, 100, 32, 0.0, false}}) {
    CAPTURE(c.cols);
    CAPTURE(c.group);
    std::vector<float> w(c.rows * c.cols);
    for (float& x : w) x = u(rng) < c.zeros ? 0.0f : normal(rng);
    const EncodedTensor e = encode_tensor(w.data(), {c.rows, c.cols},
                                          {c.zeros > 0 ? Encoding::Bitmap : Encoding::Dense, ValueType::I8G, c.group});
    const std::vector<float> x = decoded(e);
    TensorInfo info;
    info.shape = {c.rows, c.cols};
    const TensorView v{&info, e.layout, e.bytes.data()};
    const auto reversed = [&](uint64_t r) { return c.rows - 1 - r; };
    const std::optional<GgufBlocks> b = gguf_blocks_exact(v, x.data(), reversed);
    REQUIRE(b.has_value() == c.exact);
    if (!c.exact) continue;
    CHECK(b->type == GgmlType::Q8_0);
    std::vector<float> back(c.rows * c.cols);
    ggml_dequantize(GgmlType::Q8_0, b->bytes.data(), back.size(), back.data());
    for (uint64_t r = 0; r < c.rows; ++r) CHECK(std::memcmp(&back[(c.rows - 1 - r) * c.cols], &x[r * c.cols], c.cols * 4) == 0);
    const std::optional<EncodedTensor> again = gguf_exact_int8g(GgmlType::Q8_0, b->bytes.data(), c.rows, c.cols, 0, 32);
    REQUIRE(again.has_value());
    const std::vector<float> y = decoded(*again);
    for (uint64_t r = 0; r < c.rows; ++r) CHECK(std::memcmp(&y[(c.rows - 1 - r) * c.cols], &x[r * c.cols], c.cols * 4) == 0);
  }
}

TEST_CASE("gguf: packing the tiny llama's Q8_0 tensors to int8g keeps the file's grid") {
  TempDir dir;
  PackOptions o;
  o.command = "prune";
  o.quant = Dtype::Int8g;
  o.group_size = 32;
  const PackSummary sum = pack_checkpoint(fixture("gguf/tiny-llama.gguf"), dir.path + "/q.endor", o);
  const auto ck = Checkpoint::open(fixture("gguf/tiny-llama.gguf"));
  const auto reader = ContainerReader::open(dir.path + "/q.endor");
  CHECK(reader->header().version_minor == 2);
  uint64_t kept = 0, int8g = 0;
  for (const CheckpointTensor& t : ck->tensors()) {
    if (!t.role.prunable) continue;
    const std::optional<TensorView> v = reader->find_tensor(t.name);
    REQUIRE(v.has_value());
    int8g += v->layout.value_type == ValueType::I8G;
    if (t.source_type != "Q8_0") continue;
    CAPTURE(t.name);
    ++kept;
    CHECK(decoded_differences(*v, *ck, t) == 0);
  }
  CHECK(kept >= 1);
  CHECK(int8g >= kept);
  CHECK(sum.source_grid_tensors == kept);
}

TEST_CASE("gguf: llama.cpp's stacked MoE experts read as one tensor per expert; a wrong expert count is one line") {
  const std::string path = fixture("gguf/llamacpp-qwen3-moe-tiny.q8_0.gguf");  // tools/make_gguf_moe_fixtures.py
  const auto g = Checkpoint::open(path);
  CHECK(g->model_config().model_type == "qwen3_moe");
  CHECK(g->model_config().n_experts == 5);
  CHECK(g->model_config().top_k == 3);
  CHECK(g->model_config().moe_intermediate == 40);
  CHECK(g->model_config().norm_topk_prob);  // llama.cpp's qwen3moe renormalizes
  std::map<std::string, const CheckpointTensor*> by_name;
  for (const CheckpointTensor& t : g->tensors()) by_name[t.name] = &t;
  for (int e = 0; e < 5; ++e) {
    const std::string p = "model.layers.1.mlp.experts." + std::to_string(e) + ".";
    REQUIRE(by_name.count(p + "up_proj.weight"));
    const CheckpointTensor& up = *by_name[p + "up_proj.weight"];
    CHECK(up.source_name == "blk.1.ffn_up_exps.weight[" + std::to_string(e) + "]");
    CHECK(up.source_type == "Q8_0");
    CHECK(up.shape == std::vector<uint64_t>{40, 64});
    CHECK(up.role.prunable);
    REQUIRE(by_name.count(p + "down_proj.weight"));
    CHECK(by_name[p + "down_proj.weight"]->shape == std::vector<uint64_t>{64, 40});
  }
  REQUIRE(by_name.count("model.layers.0.mlp.gate.weight"));
  CHECK(!by_name["model.layers.0.mlp.gate.weight"]->role.prunable);  // the router

  // qwen3moe.expert_count 5 -> 4: the stacked tensors no longer have that many experts.
  std::string bytes = read_file(path);
  const std::string key = "qwen3moe.expert_count";
  const size_t at = bytes.find(key);
  REQUIRE(at != std::string::npos);
  uint32_t type = 0, count = 0;
  std::memcpy(&type, &bytes[at + key.size()], 4);
  std::memcpy(&count, &bytes[at + key.size() + 4], 4);
  REQUIRE(type == 4);  // GGUF u32
  REQUIRE(count == 5);
  count = 4;
  std::memcpy(&bytes[at + key.size() + 4], &count, 4);
  TempDir dir;
  write_bytes(dir.path + "/four.gguf", std::vector<uint8_t>(bytes.begin(), bytes.end()));
  std::string msg;
  try {
    (void)Checkpoint::open(dir.path + "/four.gguf");
  } catch (const Error& e) {
    msg = e.what();
  }
  CHECK_MESSAGE(msg.find("is not [4 experts, rows, columns]") != std::string::npos, msg);
  CHECK(msg.rfind(dir.path + "/four.gguf", 0) == 0);
  CHECK(msg.find('\n') == std::string::npos);
}
