// `endor-pack export` end to end on the transformers-made fixtures: every target's output read back
// by `endor-pack convert` decodes to the original container's values bit for bit (tied and untied
// heads, GQA, OPT where the target has it, int4, int8 and int8g, sharded safetensors); each GGUF
// tensor has the GGML type its value type calls for (Q4_1, Q8_0 or floats) and each
// compressed-tensors folder declares its scheme; int8g's Q8_0 blocks are the container's codes and
// scales; the independent numpy reader of compressed-tensors (tools/ct_reader.py, when python3 has
// numpy) agrees; bad input is one line, a non-zero exit and nothing written.
#include <doctest/doctest.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <thread>

#include <cstdlib>
#include <cstring>
#include <map>

#include <nlohmann/json.hpp>

#include "../packer/synthetic_checkpoint.h"
#include "endor/export.h"
#include "endor/format.h"
#include "endor/gguf.h"

extern char** environ;

using endor::test::make_temp_dir;
using endor::test::read_bytes;
using endor::test::remove_tree;

namespace {

const std::string kPack = std::string(ENDOR_BINARY_DIR) + "/packer/endor-pack";

std::string fixture(const std::string& name) { return std::string(ENDOR_SOURCE_DIR) + "/tests/fixtures/models/" + name; }

struct Run {
  int exit_code = -1;
  std::string out, err;
};

std::string quote(const std::string& s) { return "'" + s + "'"; }

Run pack(const std::vector<std::string>& args, const std::string& io_dir) {
  std::string cmd = quote(kPack);
  for (const std::string& a : args) cmd += " " + quote(a);
  cmd += " > " + quote(io_dir + "/stdout") + " 2> " + quote(io_dir + "/stderr");
  const int status = std::system(cmd.c_str());
  Run r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_bytes(io_dir + "/stdout");
  r.err = read_bytes(io_dir + "/stderr");
  return r;
}

bool exists(const std::string& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0;
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d))
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.push_back(e->d_name);
    ::closedir(d);
  }
  return names;
}

void require_ok(const Run& r, const std::string& what) {
  INFO(what << "\nstdout: " << r.out << "\nstderr: " << r.err);
  REQUIRE(r.exit_code == 0);
}

void check_one_line_error(const Run& r, int code, const std::string& needle) {
  INFO("stderr: " << r.err);
  CHECK(r.exit_code == code);
  CHECK(r.err.rfind("error: ", 0) == 0);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK(r.err.find(needle) != std::string::npos);
}

std::vector<float> decoded(const endor::ContainerReader& r, const endor::TensorInfo& t) {
  const endor::TensorView v = r.tensor(t);
  std::vector<float> out(size_t(v.layout.rows * v.layout.cols));
  endor::decode_rows_f32(v, 0, v.layout.rows, out.data());
  return out;
}

// Every tensor of `original` decodes bit for bit as the same-named tensor of `back`, and `back`
// holds no other tensor (a tied head stays tied: no lm_head appears).
void check_same_weights(const std::string& original, const std::string& back) {
  const auto a = endor::ContainerReader::open(original);
  const auto b = endor::ContainerReader::open(back);
  INFO(original << " vs " << back);
  CHECK(a->manifest().tensors.size() == b->manifest().tensors.size());
  for (const endor::TensorInfo& t : a->manifest().tensors) {
    const endor::TensorInfo* u = b->manifest().find_tensor(t.name);
    INFO("tensor " << t.name);
    REQUIRE(u != nullptr);
    CHECK(u->shape == t.shape);
    const std::vector<float> x = decoded(*a, t), y = decoded(*b, *u);
    REQUIRE(x.size() == y.size());
    CHECK(std::memcmp(x.data(), y.data(), x.size() * 4) == 0);
  }
}

double rope_theta(const nlohmann::json& c) {
  if (c.contains("rope_parameters") && c["rope_parameters"].contains("rope_theta")) return c["rope_parameters"]["rope_theta"].get<double>();
  return c.value("rope_theta", 10000.0);
}

// What a GGUF must carry of config.json for llama.cpp to compute the same model (the importer
// writes it back in the older spelling).
void check_same_hyperparameters(const std::string& original, const std::string& back) {
  const nlohmann::json a = endor::ContainerReader::open(original)->manifest().config;
  const nlohmann::json b = endor::ContainerReader::open(back)->manifest().config;
  CHECK(float(rope_theta(a)) == float(rope_theta(b)));
  CHECK(float(a.value("rms_norm_eps", 1e-6)) == float(b.value("rms_norm_eps", 1e-6)));
  for (const char* k : {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size"})
    CHECK_MESSAGE(a[k] == b[k], k);
  CHECK(a.value("num_key_value_heads", a["num_attention_heads"].get<int>()) == b["num_key_value_heads"].get<int>());
  CHECK(a.value("tie_word_embeddings", false) == b.value("tie_word_embeddings", false));
}

// python3 (or $ENDOR_PYTHON) with numpy, or "" when there is none.
std::string numpy_python() {
  const char* env = std::getenv("ENDOR_PYTHON");
  const std::string py = env && *env ? env : "python3";
  return std::system((quote(py) + " -c 'import numpy' > /dev/null 2>&1").c_str()) == 0 ? py : "";
}

// The GGML types a GGUF export must hold, by role: decoder Linears, token_embd, output ("" when the
// head is tied: no output.weight); norms and biases are always F32. file_type: general.file_type.
struct GgufTypes {
  std::string linear, embed, head;
  uint64_t file_type = 0;
  std::string note;  // a line the export prints (its notes)
};

// Every tensor of the GGUF at `path` has the type its role calls for.
void check_gguf_types(const std::string& path, const GgufTypes& want) {
  const auto f = endor::GgufFile::open(path);
  const endor::GgufHeader& h = f->header();
  std::map<std::string, int> seen;
  for (const endor::GgufTensorInfo& t : h.tensors) {
    const std::string role = t.ne.size() == 1 ? "1-D" : t.name == "token_embd.weight" ? "embed" : t.name == "output.weight" ? "head" : "linear";
    const std::string expected = role == "1-D" ? "F32" : role == "embed" ? want.embed : role == "head" ? want.head : want.linear;
    INFO(path << ": " << t.name);
    CHECK(std::string(endor::ggml_type_name(t.type)) == expected);
    ++seen[role];
  }
  CHECK(seen["linear"] > 0);
  CHECK(seen["embed"] == 1);
  CHECK(seen["head"] == (want.head.empty() ? 0 : 1));
  const endor::GgufValue* ft = h.find("general.file_type");
  REQUIRE(ft != nullptr);
  CHECK(ft->u == want.file_type);
}

// The compressed-tensors scheme a folder's config.json must declare for its packed Linears: one
// config group, the given bits, strategy and group size (null for the channel strategy).
struct CtScheme {
  int num_bits = 0;
  std::string strategy;
  int group_size = 0;  // 0: channel (group_size null)
};

void check_ct_scheme(const std::string& folder, const CtScheme& want) {
  const nlohmann::json cfg = nlohmann::json::parse(read_bytes(folder + "/config.json"));
  INFO(folder << ": " << cfg["quantization_config"].dump());
  const nlohmann::json& qc = cfg["quantization_config"];
  CHECK(qc["quant_method"] == "compressed-tensors");
  CHECK(qc["format"] == "pack-quantized");
  REQUIRE(qc["config_groups"].size() == 1);
  const nlohmann::json& g = qc["config_groups"]["group_0"];
  CHECK(g["targets"] == nlohmann::json::array({"Linear"}));
  const nlohmann::json& w = g["weights"];
  CHECK(w["type"] == "int");
  CHECK(w["num_bits"] == want.num_bits);
  CHECK(w["strategy"] == want.strategy);
  CHECK(w["symmetric"] == (want.num_bits == 8));  // int8/int8g symmetric, int4 with zero points
  if (want.group_size) CHECK(w["group_size"] == want.group_size);
  else CHECK(w["group_size"].is_null());
}

struct Case {
  std::string fixture;
  std::vector<std::string> pack_args;  // after "SRC -o X.endor"
  std::vector<std::string> targets;
  GgufTypes gguf;                      // when targets has gguf
  CtScheme ct;                         // when targets has compressed-tensors
};

}  // namespace

TEST_CASE("export round trips: hf, compressed-tensors and gguf read back by convert decode bit for bit") {
  const std::string dir = make_temp_dir("export-rt");
  const std::string py = numpy_python();
  if (py.empty()) MESSAGE("PARTLY SKIPPED: no python3 with numpy ($ENDOR_PYTHON): tools/ct_reader.py is not run");
  const std::string blocks = "written as llama.cpp's own blocks, exactly", floats = "written as floats: no block type";
  const std::vector<Case> cases = {
      // untied head, MHA, f32 source; int4 groups of 32 with pruning: Q4_1 (MOSTLY_Q4_1 3)
      {"llama-tiny", {"prune", "--sparsity", "0.5", "--quant", "int4", "--group-size", "32"}, {"hf", "compressed-tensors", "gguf"},
       {"Q4_1", "F32", "F32", 3, blocks}, {4, "group", 32}},
      // tied embedding, GQA 4/2, head_dim 24, bf16 source; int8 Linears and an int8 embedding (no block
      // type holds a per-row f32 scale: floats, f32 where bf16 does not hold them)
      {"llama-gqa-bf16", {"prune", "--sparsity", "0.5", "--quant", "int8", "--quant-head", "int8"}, {"hf", "compressed-tensors", "gguf"},
       {"F32", "F32", "", 0, "int8/int4 tensors written as F32"}, {8, "channel", 0}},
      // int8g: Q8_0 blocks in the GGUF (MOSTLY_Q8_0 7; pruned weights as code 0), group-strategy int8
      // in compressed-tensors (untied head: int8g too, decoded there)
      {"llama-tiny", {"prune", "--sparsity", "0.5", "--quant", "int8g", "--quant-head", "int8g", "--group-size", "32"}, {"hf", "compressed-tensors", "gguf"},
       {"Q8_0", "Q8_0", "Q8_0", 7, blocks}, {8, "group", 32}},
      // int8g at groups of 64, dense: each Q8_0 block repeats its group's scale
      {"llama-tiny", {"prune", "--sparsity", "0", "--quant", "int8g", "--group-size", "64"}, {"compressed-tensors", "gguf"},
       {"Q8_0", "F32", "F32", 7, blocks}, {8, "group", 64}},
      // int8g at groups of 16 and int4k on rows of 64/128 columns (not whole 256-column super-blocks):
      // no block type holds them; floats (the f32 source's type), said so
      {"llama-tiny", {"prune", "--sparsity", "0.5", "--quant", "int8g", "--group-size", "16"}, {"gguf"}, {"F32", "F32", "F32", 0, floats}, {}},
      {"llama-tiny", {"prune", "--sparsity", "0.5", "--quant", "int4k"}, {"gguf"}, {"F32", "F32", "F32", 0, floats}, {}},
      // q/k/v biases, tied, intermediate 88 (groups of 8 divide it; no block type holds groups of 8)
      {"qwen2-tiny", {"prune", "--sparsity", "0.5", "--quant", "int4", "--group-size", "8"}, {"hf", "compressed-tensors", "gguf"},
       {"F32", "F32", "", 0, floats}, {4, "group", 8}},
      // Qwen3: q_norm/k_norm as attn_q_norm/attn_k_norm, head_dim 24 != 64/4 (key_length), untied head
      {"qwen3-tiny", {"prune", "--sparsity", "0.5", "--quant", "int4", "--group-size", "32"}, {"hf", "compressed-tensors", "gguf"},
       {"Q4_1", "F32", "F32", 3, blocks}, {4, "group", 32}},
      // OPT: no llama.cpp architecture; f16 source, dense int4
      {"opt-postln-proj", {"prune", "--sparsity", "0", "--quant", "int4", "--group-size", "16"}, {"hf", "compressed-tensors"}, {}, {4, "group", 16}},
      {"opt-tiny", {"prune", "--sparsity", "0.5", "--quant", "int4", "--group-size", "32", "--quant-head", "int4"}, {"hf", "compressed-tensors"},
       {}, {4, "group", 32}},
      // dense floats, f16 source, sliding window (a note for gguf): MOSTLY_F16 1
      {"mistral-tiny", {"convert", "--dtype", "f16"}, {"hf", "gguf"}, {"F16", "F16", "F16", 1, "sliding_window"}, {}},
  };
  for (const Case& c : cases) {
    const std::string name = c.fixture + "-" + c.pack_args[0] + "-" + std::to_string(&c - cases.data());
    const std::string endor = dir + "/" + name + ".endor";
    std::vector<std::string> args = {c.pack_args[0], fixture(c.fixture), "-o", endor};
    args.insert(args.end(), c.pack_args.begin() + 1, c.pack_args.end());
    require_ok(pack(args, dir), "pack " + name);
    for (const std::string& target : c.targets) {
      INFO(name << " --to " << target);
      const std::string out = dir + "/" + name + "." + target + (target == "gguf" ? ".gguf" : "");
      const Run exported = pack({"export", endor, "--to", target, "-o", out}, dir);
      require_ok(exported, "export");
      if (target == "gguf") {
        check_gguf_types(out, c.gguf);
        INFO(exported.err);
        CHECK(exported.err.find(c.gguf.note) != std::string::npos);
      }
      if (target == "compressed-tensors") check_ct_scheme(out, c.ct);
      const std::string back = dir + "/" + name + "." + target + ".back.endor";
      // (convert stores a GGUF's block types in f16 unless told otherwise; Q8_0's d·q has up to
      // 19 significant bits, so its values come back exactly in f32)
      const bool q8_0 = target == "gguf" && (c.gguf.linear == "Q8_0" || c.gguf.embed == "Q8_0");
      std::vector<std::string> convert = {"convert", out, "-o", back};
      if (q8_0) convert.insert(convert.end(), {"--dtype", "f32"});
      require_ok(pack(convert, dir), "convert the export back");
      check_same_weights(endor, back);
      if (target == "gguf") check_same_hyperparameters(endor, back);
      if (target == "compressed-tensors" && !py.empty()) {
        const std::string cmd = quote(py) + " " + quote(std::string(ENDOR_SOURCE_DIR) + "/tools/ct_reader.py") + " --check " +
                                quote(out) + " " + quote(endor) + " > " + quote(dir + "/py.log") + " 2>&1";
        const int rc = std::system(cmd.c_str());
        INFO(read_bytes(dir + "/py.log"));
        CHECK(rc == 0);
      }
    }
  }
  remove_tree(dir);
}

namespace {

// An int8g tensor's codes [rows, cols], an absent (bitmap) weight as code 0.
std::vector<int8_t> int8g_codes(const endor::TensorView& v) {
  const endor::TensorLayout& L = v.layout;
  REQUIRE(L.value_type == endor::ValueType::I8G);
  std::vector<int8_t> codes(L.rows * L.cols, 0);
  const int8_t* values = reinterpret_cast<const int8_t*>(v.values());
  if (L.encoding == endor::Encoding::Dense) {
    std::memcpy(codes.data(), values, codes.size());
    return codes;
  }
  uint64_t k = 0;
  for (uint64_t r = 0; r < L.rows; ++r)
    for (uint64_t c = 0; c < L.cols; ++c)
      if ((v.bitmap()[r * L.words_per_row + c / 64] >> (c % 64)) & 1) codes[r * L.cols + c] = values[k++];
  REQUIRE(k == L.nnz);
  return codes;
}

}  // namespace

TEST_CASE("export gguf: int8g leaves as Q8_0 blocks holding the container's codes and scales, and packs back onto them") {
  const std::string dir = make_temp_dir("export-q8");
  for (const char* sparsity : {"0", "0.5"}) {
    CAPTURE(sparsity);
    const std::string endor = dir + "/m" + sparsity + ".endor", gguf = dir + "/m" + sparsity + ".gguf";
    const std::string back = dir + "/back" + sparsity + ".endor";
    require_ok(pack({"prune", fixture("llama-tiny"), "-o", endor, "--sparsity", sparsity, "--quant", "int8g", "--quant-head", "int8g",
                     "--group-size", "32"}, dir), "pack");
    require_ok(pack({"export", endor, "--to", "gguf", "-o", gguf}, dir), "export");

    // Block by block: d is the group's f16 scale (its bits), the 32 codes are the container's codes,
    // in llama.cpp's row order (q/k rows permuted).
    const auto reader = endor::ContainerReader::open(endor);
    const auto file = endor::GgufFile::open(gguf);
    const endor::GgufModel model = endor::gguf_to_model(file->header(), gguf);
    uint64_t q8 = 0;
    for (const endor::GgufModelTensor& gt : model.tensors) {
      if (gt.shape.size() != 2) continue;
      INFO(gt.hf_name);
      REQUIRE(gt.info->type == endor::GgmlType::Q8_0);
      const std::optional<endor::TensorView> v = reader->find_tensor(gt.hf_name);
      REQUIRE(v.has_value());
      const std::vector<int8_t> codes = int8g_codes(*v);
      const uint64_t rows = v->layout.rows, cols = v->layout.cols, bpr = cols / 32;
      const uint8_t* data = file->data(*gt.info);
      uint64_t scale_diff = 0, code_diff = 0;
      for (uint64_t r = 0; r < rows; ++r) {
        const uint64_t src = gt.permute_heads ? endor::gguf_unpermuted_row(r, rows, gt.permute_heads) : r;
        for (uint64_t b = 0; b < bpr; ++b) {
          const uint8_t* blk = data + (src * bpr + b) * endor::ggml_block_bytes(endor::GgmlType::Q8_0);
          scale_diff += std::memcmp(blk, &v->group_scales()[r * bpr + b], 2) != 0;
          code_diff += std::memcmp(blk + 2, &codes[r * cols + b * 32], 32) != 0;
        }
      }
      CHECK(scale_diff == 0);
      CHECK(code_diff == 0);
      ++q8;
    }
    CHECK(q8 == 2 + 7 * 2);  // embedding, head, 7 Linears in each of 2 blocks

    // Packed back from the GGUF at int8g groups of 32: every tensor keeps the file's codes and
    // scales (the pruned weights as code 0), nothing re-rounded.
    const Run r = pack({"prune", gguf, "-o", back, "--sparsity", "0", "--quant", "int8g", "--quant-head", "int8g", "--group-size", "32"}, dir);
    require_ok(r, "pack the GGUF back");
    CHECK(r.err.find("tensors keep the GGUF's own") != std::string::npos);
    const auto again = endor::ContainerReader::open(back);
    uint64_t same = 0;
    for (const endor::TensorInfo& t : reader->manifest().tensors) {
      if (t.value_type != endor::ValueType::I8G) continue;
      INFO(t.name);
      const std::optional<endor::TensorView> a = reader->find_tensor(t.name), b = again->find_tensor(t.name);
      REQUIRE(b.has_value());
      REQUIRE(b->layout.value_type == endor::ValueType::I8G);
      REQUIRE(b->layout.group_size == 32);
      CHECK(int8g_codes(*a) == int8g_codes(*b));
      CHECK(std::memcmp(a->group_scales(), b->group_scales(), a->layout.scales_bytes) == 0);
      ++same;
    }
    CHECK(same == q8);
    check_same_weights(endor, back);
  }
  remove_tree(dir);
}

TEST_CASE("export gguf: Qwen3 as llama.cpp's qwen3, q/k norms as attn_q_norm/attn_k_norm, and back") {
  const std::string dir = make_temp_dir("export-qwen3");
  const std::string endor = dir + "/q.endor", gguf = dir + "/q.gguf", back = dir + "/back.endor";
  require_ok(pack({"convert", fixture("qwen3-tiny"), "-o", endor, "--dtype", "f32"}, dir), "pack");
  require_ok(pack({"export", endor, "--to", "gguf", "-o", gguf}, dir), "export");
  const auto f = endor::GgufFile::open(gguf);
  const endor::GgufHeader& h = f->header();
  REQUIRE(h.find("general.architecture") != nullptr);
  CHECK(h.find("general.architecture")->str == "qwen3");
  REQUIRE(h.find("qwen3.attention.key_length") != nullptr);
  CHECK(h.find("qwen3.attention.key_length")->u == 24);  // head_dim 24, not 64 / 4
  for (const char* name : {"blk.0.attn_q_norm.weight", "blk.1.attn_k_norm.weight"}) {
    const endor::GgufTensorInfo* t = h.tensor(name);
    REQUIRE_MESSAGE(t != nullptr, name);
    CHECK(t->ne == std::vector<uint64_t>{24});
    CHECK(t->type == endor::GgmlType::F32);
  }
  require_ok(pack({"convert", gguf, "-o", back, "--dtype", "f32"}, dir), "convert back");
  check_same_weights(endor, back);
  check_same_hyperparameters(endor, back);
  const nlohmann::json cfg = endor::ContainerReader::open(back)->manifest().config;
  CHECK(cfg["model_type"] == "qwen3");
  CHECK(cfg["architectures"] == nlohmann::json::array({"Qwen3ForCausalLM"}));
  CHECK(cfg["head_dim"] == 24);
  remove_tree(dir);
}

// The stacked expert tensors of a GGUF: name -> (type, ne).
void check_stacked_experts(const endor::GgufHeader& h, const std::string& arch, uint64_t experts, uint64_t hidden,
                           uint64_t width, endor::GgmlType gate_up_type) {
  const endor::GgufValue* n = h.find(arch + ".expert_count");
  REQUIRE(n != nullptr);
  CHECK(n->u == experts);
  for (int b = 0; b < 2; ++b) {
    const std::string blk = "blk." + std::to_string(b) + ".";
    const endor::GgufTensorInfo* router = h.tensor(blk + "ffn_gate_inp.weight");
    REQUIRE(router != nullptr);
    CHECK(router->ne == std::vector<uint64_t>{hidden, experts});
    CHECK(router->type == endor::GgmlType::F32);  // never quantized: stored as the source's f32
    for (const char* part : {"ffn_gate_exps", "ffn_up_exps"}) {
      const endor::GgufTensorInfo* t = h.tensor(blk + part + ".weight");
      REQUIRE_MESSAGE(t != nullptr, part);
      CHECK(t->ne == std::vector<uint64_t>{hidden, width, experts});
      CHECK(t->type == gate_up_type);
    }
    const endor::GgufTensorInfo* down = h.tensor(blk + "ffn_down_exps.weight");
    REQUIRE(down != nullptr);
    CHECK(down->ne == std::vector<uint64_t>{width, hidden, experts});
    CHECK(h.tensor(blk + "ffn_gate.weight") == nullptr);
  }
}

TEST_CASE("export gguf: MoE experts stacked as llama.cpp's ffn_*_exps (Mixtral as llama, Qwen3-MoE as qwen3moe), and back") {
  const std::string dir = make_temp_dir("export-moe");
  // Mixtral, f32 and int4 @ 50 % (gate/up: 64 columns, whole Q4_1 groups of 32; down: 48 columns,
  // floats), each read back to the same weights.
  for (const bool int4 : {false, true}) {
    INFO("int4 ", int4);
    const std::string endor = dir + "/x.endor", gguf = dir + "/x.gguf", back = dir + "/back.endor";
    if (int4)
      require_ok(pack({"prune", fixture("mixtral-tiny"), "-o", endor, "--method", "magnitude", "--sparsity", "0.5", "--quant", "int4",
                       "--group-size", "32"}, dir), "pack");
    else
      require_ok(pack({"convert", fixture("mixtral-tiny"), "-o", endor, "--dtype", "f32"}, dir), "pack");
    require_ok(pack({"export", endor, "--to", "gguf", "-o", gguf}, dir), "export");
    {
      const auto f = endor::GgufFile::open(gguf);
      CHECK(f->header().find("general.architecture")->str == "llama");
      CHECK(f->header().find("llama.expert_used_count")->u == 2);
      CHECK(f->header().find("llama.feed_forward_length")->u == 48);
      check_stacked_experts(f->header(), "llama", 4, 64, 48, int4 ? endor::GgmlType::Q4_1 : endor::GgmlType::F32);
    }
    require_ok(pack({"convert", gguf, "-o", back, "--dtype", "f32"}, dir), "convert back");
    check_same_weights(endor, back);
    check_same_hyperparameters(endor, back);
    CHECK(endor::ContainerReader::open(back)->manifest().config["model_type"] == "mixtral");
    for (const std::string& p : {endor, gguf, back}) ::unlink(p.c_str());
  }
  // Qwen3-MoE: llama.cpp always renormalizes the top-k weights, so the fixture (norm_topk_prob
  // false) is refused in one line; a copy that renormalizes is written as qwen3moe.
  const std::string io = make_temp_dir("export-moe-io");
  require_ok(pack({"convert", fixture("qwen3-moe-tiny"), "-o", dir + "/q.endor", "--dtype", "f32"}, dir), "pack");
  check_one_line_error(pack({"export", dir + "/q.endor", "--to", "gguf", "-o", dir + "/q.gguf"}, io), 1, "norm_topk_prob");
  struct stat none;
  CHECK(::stat((dir + "/q.gguf").c_str(), &none) != 0);
  const std::string src = dir + "/src";
  REQUIRE(std::system(("cp -r " + quote(fixture("qwen3-moe-tiny")) + " " + quote(src)).c_str()) == 0);
  nlohmann::json cfg = nlohmann::json::parse(read_bytes(src + "/config.json"));
  cfg["norm_topk_prob"] = true;
  endor::test::write_bytes(src + "/config.json", cfg.dump(2));
  require_ok(pack({"convert", src, "-o", dir + "/n.endor", "--dtype", "f32"}, dir), "pack normalized");
  require_ok(pack({"export", dir + "/n.endor", "--to", "gguf", "-o", dir + "/n.gguf"}, dir), "export");
  {
    const auto f = endor::GgufFile::open(dir + "/n.gguf");
    CHECK(f->header().find("general.architecture")->str == "qwen3moe");
    CHECK(f->header().find("qwen3moe.expert_feed_forward_length")->u == 40);
    check_stacked_experts(f->header(), "qwen3moe", 5, 64, 40, endor::GgmlType::F32);
  }
  require_ok(pack({"convert", dir + "/n.gguf", "-o", dir + "/nb.endor", "--dtype", "f32"}, dir), "convert back");
  check_same_weights(dir + "/n.endor", dir + "/nb.endor");
  check_same_hyperparameters(dir + "/n.endor", dir + "/nb.endor");
  remove_tree(io);
  remove_tree(dir);
}

TEST_CASE("export gguf carries transformers 5's rope_parameters (theta 50000) to llama.cpp's keys") {
  const std::string dir = make_temp_dir("export-rope");
  const std::string src = dir + "/src";
  REQUIRE(std::system(("cp -r " + quote(fixture("llama-tiny")) + " " + quote(src)).c_str()) == 0);
  nlohmann::json cfg = nlohmann::json::parse(read_bytes(src + "/config.json"));
  REQUIRE(cfg.contains("rope_parameters"));
  cfg["rope_parameters"]["rope_theta"] = 50000.0;
  endor::test::write_bytes(src + "/config.json", cfg.dump(2));
  require_ok(pack({"convert", src, "-o", dir + "/m.endor"}, dir), "convert");
  require_ok(pack({"export", dir + "/m.endor", "--to", "gguf", "-o", dir + "/m.gguf"}, dir), "export");
  require_ok(pack({"convert", dir + "/m.gguf", "-o", dir + "/back.endor"}, dir), "convert back");
  check_same_hyperparameters(dir + "/m.endor", dir + "/back.endor");
  CHECK(endor::ContainerReader::open(dir + "/back.endor")->manifest().config["rope_theta"] == 50000.0);
  remove_tree(dir);
}

TEST_CASE("export: what each target writes") {
  const std::string dir = make_temp_dir("export-files");
  const std::string endor = dir + "/m.endor";
  require_ok(pack({"prune", fixture("llama-tiny"), "-o", endor, "--sparsity", "0.5", "--quant", "int4", "--group-size", "32"}, dir), "pack");

  // hf, sharded: every shard under the limit but the one-tensor ones, an index naming all tensors.
  const std::string hf = dir + "/hf";
  require_ok(pack({"export", endor, "--to", "hf", "-o", hf, "--max-shard-size", "100K"}, dir), "export hf");
  const std::vector<std::string> files = list_dir(hf);
  CHECK(std::count_if(files.begin(), files.end(), [](const std::string& f) { return f.rfind("model-", 0) == 0; }) > 2);
  const nlohmann::json index = nlohmann::json::parse(read_bytes(hf + "/model.safetensors.index.json"));
  CHECK(index["weight_map"].size() == 21);
  CHECK(exists(hf + "/tokenizer.json"));
  CHECK(exists(hf + "/generation_config.json"));
  // The same JSON value as the source's (the container carries it without indentation).
  CHECK(nlohmann::ordered_json::parse(read_bytes(hf + "/tokenizer.json")) ==
        nlohmann::ordered_json::parse(read_bytes(fixture("llama-tiny") + "/tokenizer.json")));
  const std::string back = dir + "/hf.back.endor";
  require_ok(pack({"convert", hf, "-o", back}, dir), "convert the sharded export");
  check_same_weights(endor, back);

  // compressed-tensors: the config and the packed parts of one Linear.
  const std::string ct = dir + "/ct";
  const Run r = pack({"export", endor, "--to", "compressed-tensors", "-o", ct}, dir);
  require_ok(r, "export compressed-tensors");
  CHECK(r.err.find("explicit zeros") != std::string::npos);
  const nlohmann::json cfg = nlohmann::json::parse(read_bytes(ct + "/config.json"));
  const nlohmann::json& qc = cfg["quantization_config"];
  CHECK(qc["quant_method"] == "compressed-tensors");
  CHECK(qc["format"] == "pack-quantized");
  CHECK(qc["quantization_status"] == "compressed");
  CHECK(qc["version"] == "0.20.0");
  CHECK(qc["ignore"] == nlohmann::json::array({"lm_head"}));
  const nlohmann::json& w = qc["config_groups"]["group_0"]["weights"];
  CHECK(w["num_bits"] == 4);
  CHECK(w["symmetric"] == false);
  CHECK(w["strategy"] == "group");
  CHECK(w["group_size"] == 32);
  const std::string st = read_bytes(ct + "/model.safetensors");
  uint64_t hlen = 0;
  std::memcpy(&hlen, st.data(), 8);
  const nlohmann::json h = nlohmann::json::parse(st.substr(8, hlen));
  const std::string q = "model.layers.0.self_attn.q_proj.";
  CHECK(h[q + "weight_packed"]["dtype"] == "I32");
  CHECK(h[q + "weight_packed"]["shape"] == nlohmann::json::array({64, 8}));
  CHECK(h[q + "weight_scale"]["shape"] == nlohmann::json::array({64, 2}));
  CHECK(h[q + "weight_zero_point"]["shape"] == nlohmann::json::array({8, 2}));
  CHECK(h[q + "weight_shape"]["dtype"] == "I64");
  CHECK(!h.contains(q + "weight"));
  CHECK(h.contains("lm_head.weight"));
  remove_tree(dir);
}

namespace {

// A copy of `src` with one int4 min moved off the zero-code grid (M = -2.5·S in row 0, group 0 of
// the first int4 tensor): a valid §7.3 file that compressed-tensors cannot express exactly. With
// `model_type`: the weights unchanged, config.json's model_type replaced instead.
std::string off_grid_copy(const std::string& src, const std::string& dst, const char* model_type = nullptr) {
  const auto r = endor::ContainerReader::open(src);
  const endor::Manifest& m = r->manifest();
  std::string tampered;
  {
    endor::ContainerWriter w(dst);
    for (const endor::GroupInfo& g : m.groups) {
      w.begin_group(g.name, g.tier);
      for (uint32_t i : g.tensors) {
        const endor::TensorInfo& t = m.tensors[i];
        const endor::TensorView v = r->tensor(t);
        std::vector<uint8_t> bytes(v.data, v.data + t.size);
        if (!model_type && t.value_type == endor::ValueType::I4 && tampered.empty()) {
          uint16_t s;
          std::memcpy(&s, bytes.data() + v.layout.scales_offset, 2);
          const uint16_t mn = endor::f32_to_f16(-2.5f * endor::f16_to_f32(s));
          std::memcpy(bytes.data() + v.layout.mins_offset, &mn, 2);
          tampered = t.name;
        }
        w.add_tensor(t, bytes.data(), bytes.size());
      }
      for (uint32_t i : g.files) {
        const std::string_view f = *r->file(m.files[i].name);
        w.add_file(m.files[i].name, f.data(), f.size());
      }
      w.end_group();
    }
    nlohmann::json config = m.config;
    if (model_type) config["model_type"] = model_type;
    w.commit(config, m.generation_config, m.provenance);
  }
  return tampered;
}

}  // namespace

TEST_CASE("export errors: one line, non-zero exit, nothing written, input untouched") {
  const std::string dir = make_temp_dir("export-err");
  const std::string io = make_temp_dir("export-err-io");
  const std::string endor = dir + "/m.endor";
  require_ok(pack({"prune", fixture("llama-tiny"), "-o", endor, "--sparsity", "0.5", "--quant", "int4", "--group-size", "32"}, io), "pack");
  const std::string before = read_bytes(endor);

  check_one_line_error(pack({"export", endor, "-o", dir + "/x"}, io), 2, "missing --to");
  check_one_line_error(pack({"export", endor, "--to", "onnx", "-o", dir + "/x"}, io), 2, "--to must be");
  check_one_line_error(pack({"export", endor, "--to", "hf"}, io), 2, "missing -o");
  check_one_line_error(pack({"export", endor, "--to", "hf", "-o", dir + "/x", "--dtype", "f8"}, io), 2, "--dtype");
  check_one_line_error(pack({"export", endor, "--to", "gguf", "-o", dir + "/x.gguf", "--max-shard-size", "1G"}, io), 2, "not gguf");
  check_one_line_error(pack({"export", dir + "/none.endor", "--to", "hf", "-o", dir + "/x"}, io), 1, "none.endor");

  // An existing output is never replaced, folder or file.
  ::mkdir((dir + "/taken").c_str(), 0755);
  check_one_line_error(pack({"export", endor, "--to", "hf", "-o", dir + "/taken"}, io), 1, "already exists");
  CHECK(list_dir(dir + "/taken").empty());
  check_one_line_error(pack({"export", endor, "--to", "gguf", "-o", endor}, io), 1, "already exists");

  // A truncated container and one with a flipped data byte (caught by the checksums).
  endor::test::write_bytes(dir + "/cut.endor", before.substr(0, before.size() / 2));
  check_one_line_error(pack({"export", dir + "/cut.endor", "--to", "hf", "-o", dir + "/x"}, io), 1, "cut.endor");
  std::string flipped = before;
  flipped[8192 + 10] = char(flipped[8192 + 10] ^ 0x40);
  endor::test::write_bytes(dir + "/flip.endor", flipped);
  check_one_line_error(pack({"export", dir + "/flip.endor", "--to", "gguf", "-o", dir + "/x.gguf"}, io), 1, "flip.endor");

  // Grids and architectures a target cannot express.
  const std::string off = dir + "/offgrid.endor";
  const std::string tampered = off_grid_copy(endor, off);
  check_one_line_error(pack({"export", off, "--to", "compressed-tensors", "-o", dir + "/x"}, io), 1,
                       "tensor '" + tampered + "': row 0, group 0: int4 scale");
  require_ok(pack({"export", off, "--to", "hf", "-o", dir + "/offgrid-hf"}, io), "hf writes any grid's values");
  require_ok(pack({"convert", dir + "/offgrid-hf", "-o", dir + "/offgrid-back.endor"}, io), "convert");
  check_same_weights(off, dir + "/offgrid-back.endor");

  off_grid_copy(endor, dir + "/gpt2.endor", "gpt2");  // an architecture Endor does not know
  for (const char* target : {"hf", "compressed-tensors", "gguf"})
    check_one_line_error(pack({"export", dir + "/gpt2.endor", "--to", target, "-o", dir + "/x"}, io), 1, "unsupported architecture 'gpt2'");
  const std::string qwen = dir + "/qwen.endor";
  require_ok(pack({"prune", fixture("qwen2-tiny"), "-o", qwen, "--sparsity", "0.5", "--quant", "int4", "--group-size", "32"}, io), "pack qwen2");
  check_one_line_error(pack({"export", qwen, "--to", "compressed-tensors", "-o", dir + "/x"}, io), 1,
                       "88 input columns are not a multiple of its int4 group size 32");
  const std::string opt = dir + "/opt.endor";
  require_ok(pack({"convert", fixture("opt-tiny"), "-o", opt}, io), "pack opt");
  check_one_line_error(pack({"export", opt, "--to", "gguf", "-o", dir + "/x.gguf"}, io), 1, "architecture 'opt' has no llama.cpp counterpart");
  check_one_line_error(pack({"export", opt, "--to", "compressed-tensors", "-o", dir + "/x"}, io), 1, "nothing for compressed-tensors");
  const std::string rope = dir + "/rope.endor";
  require_ok(pack({"convert", fixture("llama3-rope"), "-o", rope}, io), "pack llama3-rope");
  check_one_line_error(pack({"export", rope, "--to", "gguf", "-o", dir + "/x.gguf"}, io), 1, "rope_scaling 'llama3'");

  CHECK(read_bytes(endor) == before);
  for (const std::string& f : list_dir(dir)) {
    INFO(f);
    CHECK(f.find(".tmp-") == std::string::npos);
    CHECK(f.rfind("x", 0) != 0);
  }
  remove_tree(dir);
  remove_tree(io);
}

TEST_CASE("SIGINT during an export leaves no temporary folder or file") {
  const std::string dir = make_temp_dir("export-sigint");
  endor::test::LlamaDims d;  // ~100 MB of f32: exporting takes long enough to interrupt
  d.vocab = 2048;
  d.hidden = 1024;
  d.intermediate = 2816;
  d.layers = 2;
  d.heads = 8;
  d.kv_heads = 8;
  d.dtype = "F32";
  endor::test::write_llama_checkpoint(dir + "/big", d);
  require_ok(pack({"convert", dir + "/big", "-o", dir + "/big.endor"}, dir), "convert");
  const std::string out_dir = dir + "/out";
  ::mkdir(out_dir.c_str(), 0755);
  // hf in shards of 4 MB: many files inside the temporary folder when the signal comes.
  std::vector<std::string> argv_s = {kPack, "export", dir + "/big.endor", "--to", "hf", "-o", out_dir + "/hf", "--max-shard-size", "4M"};
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  REQUIRE(posix_spawn(&pid, kPack.c_str(), &fa, nullptr, argv.data(), environ) == 0);
  posix_spawn_file_actions_destroy(&fa);
  // Interrupt once the temporary folder holds a shard.
  bool saw = false;
  const auto t0 = std::chrono::steady_clock::now();
  while (!saw && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60)) {
    for (const std::string& f : list_dir(out_dir))
      for (const std::string& g : list_dir(out_dir + "/" + f)) saw |= g.rfind("model-", 0) == 0;
    int status = 0;
    if (!saw && ::waitpid(pid, &status, WNOHANG) == pid) break;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  REQUIRE(saw);
  CHECK(list_dir(out_dir)[0].find("hf.tmp-") == 0);
  ::kill(pid, SIGINT);
  int status = 0;
  ::waitpid(pid, &status, 0);
  CHECK(WIFSIGNALED(status));
  CHECK(list_dir(out_dir).empty());
  remove_tree(dir);
}

TEST_CASE("int4_zero_code: compressed-tensors' zero point of an Endor int4 group, only when min = -z·scale") {
  const uint16_t one = endor::f32_to_f16(1.0f), step = endor::f32_to_f16(0.0078125f);
  CHECK(endor::int4_zero_code(one, endor::f32_to_f16(-3.0f)) == std::optional<uint8_t>(3));
  CHECK(endor::int4_zero_code(one, endor::f32_to_f16(0.0f)) == std::optional<uint8_t>(0));
  CHECK(endor::int4_zero_code(one, endor::f32_to_f16(-15.0f)) == std::optional<uint8_t>(15));
  CHECK(endor::int4_zero_code(step, endor::f32_to_f16(-8 * 0.0078125f)) == std::optional<uint8_t>(8));
  CHECK_FALSE(endor::int4_zero_code(one, endor::f32_to_f16(-2.5f)));   // not an integer zero code
  CHECK_FALSE(endor::int4_zero_code(one, endor::f32_to_f16(1.0f)));    // z would be negative
  CHECK_FALSE(endor::int4_zero_code(one, endor::f32_to_f16(-16.0f)));  // z past 15
  CHECK_FALSE(endor::int4_zero_code(endor::f32_to_f16(-1.0f), endor::f32_to_f16(-3.0f)));  // negative scale
  CHECK_FALSE(endor::int4_zero_code(endor::f32_to_f16(0.0f), endor::f32_to_f16(-1.0f)));
  // Every grid Endor's encoder makes (SPEC.md §7.2) has one, and (q − z)·S is its decoded value.
  uint32_t seed = 7;
  auto uniform = [&seed] {
    seed = seed * 1664525u + 1013904223u;
    return float(seed >> 8) / float(1u << 24);
  };
  for (int i = 0; i < 2000; ++i) {
    float a = (uniform() - 0.5f) * 8.0f, b = (uniform() - 0.5f) * 8.0f * uniform();
    if (i % 3 == 0) b = std::fabs(b);  // one-signed groups too
    const endor::Int4Grid g = endor::int4_grid(std::min(a, b), std::max(a, b));
    const std::optional<uint8_t> z = endor::int4_zero_code(g.scale_f16, g.min_f16);
    REQUIRE(z.has_value());
    const float s = endor::f16_to_f32(g.scale_f16), m = endor::f16_to_f32(g.min_f16);
    for (int q = 0; q < 16; ++q) CHECK(float(q - int(*z)) * s == float(q) * s + m);
  }
}

TEST_CASE("gguf_row_of_hf_row is llama.cpp's q/k permutation: per head, the two halves interleaved") {
  for (const auto& [rows, heads] : {std::pair<uint64_t, uint32_t>{12, 2}, {64, 4}, {48, 1}}) {
    const uint64_t head_rows = rows / heads, d = head_rows / 2;
    std::vector<int> hit(rows, 0);
    for (uint64_t h = 0; h < heads; ++h)
      for (uint64_t s = 0; s < 2; ++s)
        for (uint64_t i = 0; i < d; ++i) {
          // HF row (head h, half s, i) sits at GGUF row (h, i, s): reshape(heads, 2, d).swapaxes(1, 2).
          const uint64_t hf = h * head_rows + s * d + i;
          CHECK(endor::gguf_row_of_hf_row(hf, rows, heads) == h * head_rows + i * 2 + s);
          hit[endor::gguf_row_of_hf_row(hf, rows, heads)] += 1;
        }
    CHECK(std::count(hit.begin(), hit.end(), 1) == int(rows));
  }
}
