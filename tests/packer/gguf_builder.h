// Test helper: writes GGUF v3 images byte by byte (a minimal writer after the GGUF spec), so the
// tests can make valid files and corrupt them in exactly one place.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace gguf_test {

enum : uint32_t { kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7, kString = 8, kArray = 9, kU64 = 10 };

struct Bytes {
  std::vector<uint8_t> b;
  template <class T>
  void put(T v) {
    const size_t n = b.size();
    b.resize(n + sizeof(T));
    std::memcpy(b.data() + n, &v, sizeof(T));
  }
  void str(const std::string& s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
  }
};

struct Tensor {
  std::string name;
  uint32_t type;
  std::vector<uint64_t> ne;
  std::vector<uint8_t> data;
};

class Builder {
 public:
  uint32_t version = 3;
  uint64_t alignment = 32;
  std::string misaligned;  // this tensor's offset is written 4 bytes off

  void kv_u32(const std::string& k, uint32_t v) { key(k, kU32); kv_.put(v); }
  void kv_f32(const std::string& k, float v) { key(k, kF32); kv_.put(v); }
  void kv_bool(const std::string& k, bool v) { key(k, kBool); kv_.put<uint8_t>(v); }
  void kv_str(const std::string& k, const std::string& v) { key(k, kString); kv_.str(v); }
  void kv_strs(const std::string& k, const std::vector<std::string>& v) {
    key(k, kArray);
    kv_.put<uint32_t>(kString);
    kv_.put<uint64_t>(v.size());
    for (const std::string& s : v) kv_.str(s);
  }
  void kv_i32s(const std::string& k, const std::vector<int32_t>& v) {
    key(k, kArray);
    kv_.put<uint32_t>(kI32);
    kv_.put<uint64_t>(v.size());
    for (int32_t x : v) kv_.put(x);
  }
  void kv_f32s(const std::string& k, const std::vector<float>& v) {
    key(k, kArray);
    kv_.put<uint32_t>(kF32);
    kv_.put<uint64_t>(v.size());
    for (float x : v) kv_.put(x);
  }
  // Raw bytes appended to the metadata section as one more entry (for corrupt values).
  void kv_raw(const std::string& k, uint32_t type, const std::vector<uint8_t>& value) {
    key(k, type);
    kv_.b.insert(kv_.b.end(), value.begin(), value.end());
  }
  void tensor(const std::string& name, uint32_t type, std::vector<uint64_t> ne, std::vector<uint8_t> data) {
    tensors_.push_back({name, type, std::move(ne), std::move(data)});
  }
  // An F32 tensor of the given GGUF shape filled with a deterministic pattern.
  void tensor_f32(const std::string& name, std::vector<uint64_t> ne, float scale = 0.01f) {
    uint64_t n = 1;
    for (uint64_t d : ne) n *= d;
    std::vector<uint8_t> data(n * 4);
    for (uint64_t i = 0; i < n; ++i) {
      const float v = scale * float(int64_t((i * 2654435761u) % 201) - 100) / 100.0f;
      std::memcpy(data.data() + 4 * i, &v, 4);
    }
    tensor(name, 0, std::move(ne), std::move(data));
  }

  std::vector<uint8_t> build() const {
    Bytes out;
    out.b = {'G', 'G', 'U', 'F'};
    out.put<uint32_t>(version);
    out.put<uint64_t>(tensors_.size());
    out.put<uint64_t>(n_kv_);
    out.b.insert(out.b.end(), kv_.b.begin(), kv_.b.end());
    uint64_t offset = 0;
    std::vector<uint64_t> offsets;
    for (const Tensor& t : tensors_) {
      out.str(t.name);
      out.put<uint32_t>(uint32_t(t.ne.size()));
      for (uint64_t d : t.ne) out.put<uint64_t>(d);
      out.put<uint32_t>(t.type);
      out.put<uint64_t>(offset + (t.name == misaligned ? 4 : 0));
      offsets.push_back(offset);
      offset = (offset + t.data.size() + alignment - 1) / alignment * alignment;
    }
    out.b.resize((out.b.size() + alignment - 1) / alignment * alignment, 0);
    const size_t data_start = out.b.size();
    for (size_t i = 0; i < tensors_.size(); ++i) {
      out.b.resize(data_start + offsets[i], 0);
      out.b.insert(out.b.end(), tensors_[i].data.begin(), tensors_[i].data.end());
    }
    return out.b;
  }

 private:
  void key(const std::string& k, uint32_t type) {
    kv_.str(k);
    kv_.put<uint32_t>(type);
    ++n_kv_;
  }
  Bytes kv_;
  uint64_t n_kv_ = 0;
  std::vector<Tensor> tensors_;
};

// A complete tiny llama GGUF (F32 tensors, hidden 32, 2 heads / 1 KV head, FFN 64, 1 layer,
// a 260-token byte-level vocabulary): `skip_key` / `skip_tensor` leave one out, `pre` names the
// pre-tokenizer, `q_type` overrides attn_q's tensor type (its data stays F32-sized).
inline Builder tiny_llama(const std::string& skip_key = "", const std::string& skip_tensor = "",
                          const std::string& pre = "gpt-2", const std::string& arch = "llama") {
  Builder b;
  auto u32 = [&](const std::string& k, uint32_t v) {
    if (k != skip_key) b.kv_u32(k, v);
  };
  if (skip_key != "general.architecture") b.kv_str("general.architecture", arch);
  u32(arch + ".block_count", 1);
  u32(arch + ".context_length", 64);
  u32(arch + ".embedding_length", 32);
  u32(arch + ".feed_forward_length", 64);
  u32(arch + ".attention.head_count", 2);
  u32(arch + ".attention.head_count_kv", 1);
  if (skip_key != arch + ".attention.layer_norm_rms_epsilon") b.kv_f32(arch + ".attention.layer_norm_rms_epsilon", 1e-5f);
  // Byte-level vocabulary: the 256 byte characters (in GPT-2's alphabet), 3 merges, a control token.
  std::vector<std::string> tokens;
  for (int c = 0; c < 256; ++c) {
    int cp = c;
    if (!((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174))) {
      int k = 0;
      for (int d = 0; d < c; ++d)
        if (!((d >= 33 && d <= 126) || (d >= 161 && d <= 172) || (d >= 174))) ++k;
      cp = 256 + k;
    }
    std::string s;
    if (cp < 0x80) {
      s += char(cp);
    } else {
      s += char(0xC0 | (cp >> 6));
      s += char(0x80 | (cp & 0x3F));
    }
    tokens.push_back(s);
  }
  tokens.push_back("th");
  tokens.push_back("the");
  tokens.push_back("\xC4\xA0the");  // "Ġthe"
  tokens.push_back("<|endoftext|>");
  std::vector<int32_t> types(tokens.size(), 1);
  types.back() = 3;
  if (skip_key != "tokenizer.ggml.model") b.kv_str("tokenizer.ggml.model", "gpt2");
  b.kv_str("tokenizer.ggml.pre", pre);
  if (skip_key != "tokenizer.ggml.tokens") b.kv_strs("tokenizer.ggml.tokens", tokens);
  b.kv_i32s("tokenizer.ggml.token_type", types);
  if (skip_key != "tokenizer.ggml.merges") b.kv_strs("tokenizer.ggml.merges", {"t h", "th e", "\xC4\xA0 the"});
  u32("tokenizer.ggml.bos_token_id", 259);
  u32("tokenizer.ggml.eos_token_id", 259);
  auto t = [&](const std::string& name, std::vector<uint64_t> ne) {
    if (name != skip_tensor) b.tensor_f32(name, std::move(ne));
  };
  t("token_embd.weight", {32, 260});
  t("blk.0.attn_norm.weight", {32});
  t("blk.0.attn_q.weight", {32, 32});
  t("blk.0.attn_k.weight", {32, 16});
  t("blk.0.attn_v.weight", {32, 16});
  t("blk.0.attn_output.weight", {32, 32});
  t("blk.0.ffn_norm.weight", {32});
  t("blk.0.ffn_gate.weight", {32, 64});
  t("blk.0.ffn_up.weight", {32, 64});
  t("blk.0.ffn_down.weight", {64, 32});
  t("output_norm.weight", {32});
  return b;
}

// Hand-made corrupt or unsupported files: each must give one line containing `fragment`.
struct CorruptCase {
  std::string name;
  std::vector<uint8_t> bytes;
  std::string fragment;
};

inline std::vector<CorruptCase> corrupt_cases() {
  std::vector<CorruptCase> cases;
  const std::vector<uint8_t> good = tiny_llama().build();
  auto mutated = [&](const std::string& name, size_t at, std::vector<uint8_t> with, const std::string& fragment) {
    std::vector<uint8_t> b = good;
    std::memcpy(b.data() + at, with.data(), with.size());
    cases.push_back({name, b, fragment});
  };
  mutated("bad magic", 0, {'G', 'G', 'U', 'X'}, "no \"GGUF\" magic");
  mutated("future version", 4, {4, 0, 0, 0}, "GGUF version 4 is not supported");
  mutated("version 1", 4, {1, 0, 0, 0}, "GGUF version 1 is not supported");
  mutated("big-endian version", 4, {0, 0, 0, 3}, "byte-swapped");
  mutated("huge tensor count", 8, {0, 0, 0, 0, 0, 0, 0, 0x10}, "tensors, more than the file can hold");
  mutated("huge metadata count", 16, {0, 0, 0, 0, 0, 0, 0, 0x10}, "metadata entries, more than the file can hold");
  // The first key's length (bytes 24..31): far past the end.
  mutated("huge string length", 24, {0, 0, 0, 0, 0, 0, 0, 0x40}, "past the end of the file");
  cases.push_back({"truncated header", std::vector<uint8_t>(good.begin(), good.begin() + 2000), "bytes left in the file"});
  cases.push_back({"empty file", {}, "empty"});
  cases.push_back({"tensor past EOF", std::vector<uint8_t>(good.begin(), good.end() - 100), "runs past the end of the file"});
  {
    Builder b = tiny_llama();
    std::vector<uint8_t> v(12);
    const uint32_t et = kU32;
    const uint64_t count = uint64_t(1) << 61;
    std::memcpy(v.data(), &et, 4);
    std::memcpy(v.data() + 4, &count, 8);
    b.kv_raw("x.huge", kArray, v);
    cases.push_back({"huge array count", b.build(), "array elements"});
  }
  {
    Builder b = tiny_llama();
    b.kv_raw("x.bad", 13, {0});
    cases.push_back({"unknown value type", b.build(), "unknown value type 13"});
  }
  {
    Builder b = tiny_llama();
    b.kv_u32("llama.block_count", 1);
    cases.push_back({"duplicate key", b.build(), "appears twice"});
  }
  {  // mixture-of-experts GGUFs Endor does not read (docs/moe.md): another family's experts, shared experts
    Builder b = tiny_llama("", "", "qwen2", "qwen2");
    b.kv_u32("qwen2.expert_count", 4);
    b.kv_u32("qwen2.expert_used_count", 2);
    cases.push_back({"qwen2 with experts", b.build(), "a qwen2 model with experts (qwen2.expert_count 4) is not supported"});
  }
  {
    Builder b = tiny_llama();
    b.kv_u32("llama.expert_count", 4);
    b.kv_u32("llama.expert_used_count", 2);
    b.kv_u32("llama.expert_shared_count", 1);
    cases.push_back({"shared experts", b.build(), "shared experts (llama.expert_shared_count 1) are not supported"});
  }
  {
    Builder b = tiny_llama();
    b.tensor_f32("output_norm.weight", {32});
    cases.push_back({"duplicate tensor", b.build(), "'output_norm.weight' appears twice"});
  }
  {
    Builder b = tiny_llama();
    b.misaligned = "blk.0.ffn_up.weight";
    cases.push_back({"misaligned offset", b.build(), "is not a multiple of the alignment"});
  }
  {
    Builder b = tiny_llama();
    b.kv_u32("general.alignment", 3);
    cases.push_back({"alignment not a power of two", b.build(), "general.alignment must be a power of two"});
  }
  {
    Builder b = tiny_llama();
    b.tensor("x.five", 0, {1, 1, 1, 1, 2}, std::vector<uint8_t>(8));
    cases.push_back({"five dimensions", b.build(), "has 5 dimensions"});
  }
  {
    Builder b = tiny_llama();
    b.tensor("x.q", 99, {32}, std::vector<uint8_t>(32));
    cases.push_back({"unknown tensor type", b.build(), "unknown tensor type 99"});
  }
  {
    Builder b = tiny_llama("", "blk.0.attn_q.weight");
    b.tensor("blk.0.attn_q.weight", 16 /* IQ2_XXS */, {256, 4}, std::vector<uint8_t>(4 * 66));
    cases.push_back({"unsupported tensor type", b.build(), "'blk.0.attn_q.weight' has type IQ2_XXS"});
  }
  // Each quantized type read since issue 30: a row that is not whole blocks, and data one block
  // short at the end of the file.
  struct QuantType {
    uint32_t id;
    const char* name;
    uint64_t block, bytes;
  };
  for (const QuantType& q : {QuantType{6, "Q5_0", 32, 22}, QuantType{7, "Q5_1", 32, 24}, QuantType{20, "IQ4_NL", 32, 18},
                             QuantType{10, "Q2_K", 256, 84}, QuantType{11, "Q3_K", 256, 110},
                             QuantType{12, "Q4_K", 256, 144}, QuantType{13, "Q5_K", 256, 176},
                             QuantType{14, "Q6_K", 256, 210}, QuantType{23, "IQ4_XS", 256, 136}}) {
    {
      Builder b = tiny_llama();
      b.tensor("x.q", q.id, {q.block + q.block / 2, 2}, std::vector<uint8_t>(3 * q.bytes));
      cases.push_back({std::string(q.name) + " row not a whole block", b.build(),
                       "of type " + std::string(q.name) + " has " + std::to_string(q.block + q.block / 2) +
                           " columns, not a multiple of its block of " + std::to_string(q.block)});
    }
    {
      Builder b = tiny_llama();
      b.tensor("x.q", q.id, {q.block, 2}, std::vector<uint8_t>(q.bytes));
      cases.push_back({std::string(q.name) + " tensor one block short", b.build(),
                       "tensor 'x.q' (" + std::to_string(2 * q.bytes) + " bytes at data offset"});
    }
  }
  {
    Builder b = tiny_llama("", "blk.0.attn_q.weight");
    b.tensor("blk.0.attn_q.weight", 8 /* Q8_0 */, {33, 32}, std::vector<uint8_t>(32 * 34));
    cases.push_back({"row not a whole block", b.build(), "not a multiple of its block of 32"});
  }
  cases.push_back({"unknown architecture", tiny_llama("", "", "gpt-2", "falcon").build(), "architecture 'falcon' is not supported"});
  cases.push_back({"missing metadata key", tiny_llama("llama.embedding_length").build(), "'llama.embedding_length' is missing"});
  cases.push_back({"no tokenizer", tiny_llama("tokenizer.ggml.tokens").build(), "'tokenizer.ggml.tokens'"});
  cases.push_back({"no merges", tiny_llama("tokenizer.ggml.merges").build(), "'tokenizer.ggml.merges' is missing"});
  cases.push_back({"bad pre-tokenizer name", tiny_llama("", "", "no-such-pre").build(), "pre-tokenizer 'no-such-pre'"});
  cases.push_back({"missing tensor", tiny_llama("", "blk.0.ffn_up.weight").build(), "'model.layers.0.mlp.up_proj.weight' is missing"});
  {
    Builder b = tiny_llama("", "blk.0.ffn_up.weight");
    b.tensor_f32("blk.0.ffn_up.weight", {32, 65});
    cases.push_back({"wrong shape", b.build(), "has shape [65, 32]"});
  }
  {
    Builder b = tiny_llama();
    b.tensor_f32("blk.0.attn_qkv.weight", {32, 64});
    cases.push_back({"unknown tensor name", b.build(), "'blk.0.attn_qkv.weight' has no counterpart"});
  }
  {
    Builder b = tiny_llama();
    b.tensor_f32("blk.7.attn_norm.weight", {32});
    cases.push_back({"layer past block_count", b.build(), "past block_count"});
  }
  {
    Builder b = tiny_llama("tokenizer.ggml.tokens");
    std::vector<std::string> tokens(260, "x");
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = "t" + std::to_string(i);
    tokens[7] = "\xff\xfe";
    b.kv_strs("tokenizer.ggml.tokens", tokens);
    cases.push_back({"token not UTF-8", b.build(), "tokenizer.ggml.tokens[7] is not valid UTF-8"});
  }
  {
    Builder b = tiny_llama();
    b.tensor_f32("bad\nname", {32});
    cases.push_back({"control byte in a tensor name", b.build(), "has no valid name"});
  }
  return cases;
}

}  // namespace gguf_test
