// tokenizer.ggml.* -> a Hugging Face tokenizer.json (+ tokenizer_config.json), shaped like the
// original model's own tokenizer.json so that the runtime's tokenizer (and HF tokenizers)
// encode as the model was trained:
//   gpt2 model: byte-level BPE. Pre-tokenizer by tokenizer.ggml.pre:
//     smollm              Sequence[Digits(individual), ByteLevel(regex)]   (SmolLM/SmolLM2)
//     gpt-2, default      ByteLevel(regex)                                 (GPT-2's split)
//     llama-bpe, llama3,  Sequence[Split(Llama-3 regex), ByteLevel(no regex)], ignore_merges
//       llama-v3, smaug-bpe
//     qwen2, deepseek-r1-qwen  NFC normalizer, Sequence[Split(Qwen2 regex), ByteLevel(no regex)]
//   llama model: SentencePiece BPE with byte fallback (LlamaTokenizerFast's legacy layout:
//     Prepend("▁") + Replace(" ", "▁") normalizer), merges from the file or, like transformers'
//     generate_merges, from the vocabulary ordered by score.
// Token types 2 (unknown) and 3 (control) become special added tokens, 4 (user-defined) plain
// added tokens. add_bos_token / add_eos_token become a TemplateProcessing post-processor.
#include <algorithm>
#include <unordered_map>

#include "detail.h"
#include "endor/gguf.h"

namespace endor {

using packer_detail::fail;
using nlohmann::json;

namespace {

constexpr const char* kLlama3Split =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kQwen2Split =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

enum TokenType { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

// GPT-2's bytes_to_unicode: each byte's printable stand-in, as UTF-8.
const std::vector<std::string>& byte_alphabet() {
  static const std::vector<std::string> table = [] {
    std::vector<std::string> t(256);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      const int cp = printable ? b : next++;
      std::string s;
      if (cp < 0x80) {
        s += char(cp);
      } else {
        s += char(0xC0 | (cp >> 6));
        s += char(0x80 | (cp & 0x3F));
      }
      t[size_t(b)] = s;
    }
    return t;
  }();
  return table;
}

// Byte offsets of the UTF-8 characters of s (lenient: a stray byte counts as one character).
std::vector<size_t> char_starts(const std::string& s) {
  std::vector<size_t> starts;
  for (size_t i = 0; i < s.size(); ++i)
    if ((uint8_t(s[i]) & 0xC0) != 0x80) starts.push_back(i);
  if (starts.empty() || starts[0] != 0) starts.insert(starts.begin(), 0);
  return starts;
}

// Whether every character of `token` is a byte-alphabet character.
bool in_byte_alphabet(const std::string& token) {
  static const std::unordered_map<std::string, int> chars = [] {
    std::unordered_map<std::string, int> m;
    for (int b = 0; b < 256; ++b) m[byte_alphabet()[size_t(b)]] = b;
    return m;
  }();
  const std::vector<size_t> st = char_starts(token);
  for (size_t k = 0; k < st.size(); ++k) {
    const size_t end = k + 1 < st.size() ? st[k + 1] : token.size();
    if (!chars.count(token.substr(st[k], end - st[k]))) return false;
  }
  return true;
}

// Strict UTF-8 (no overlongs, surrogates or code points past U+10FFFF): JSON text must be.
bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const uint8_t c = uint8_t(s[i]);
    size_t n = 0;
    uint32_t cp = 0;
    if (c < 0x80) { ++i; continue; }
    if ((c & 0xE0) == 0xC0) { n = 1; cp = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { n = 2; cp = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { n = 3; cp = c & 0x07; }
    else return false;
    if (i + n >= s.size()) return false;  // the continuation bytes run past the end
    for (size_t k = 1; k <= n; ++k) {
      const uint8_t d = uint8_t(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += n + 1;
  }
  return true;
}

struct Meta {
  const GgufHeader& h;
  const std::string& where;
  const GgufValue* array(const std::string& key, GgufValueType element, bool required) const {
    const GgufValue* v = h.find(key);
    if (!v) {
      if (required) fail(where, "metadata key '" + key + "' is missing");
      return nullptr;
    }
    if (v->type != GgufValueType::Array || v->element_type != element)
      fail(where, "metadata '" + key + "' must be an array of " + to_string(element));
    return v;
  }
  std::string text_or(const std::string& key, const std::string& fallback) const {
    const GgufValue* v = h.find(key);
    if (!v) return fallback;
    if (v->type != GgufValueType::String) fail(where, "metadata '" + key + "' must be a string");
    if (!valid_utf8(v->str)) fail(where, "metadata '" + key + "' is not valid UTF-8");
    return v->str;
  }
  bool flag_or(const std::string& key, bool fallback) const {
    const GgufValue* v = h.find(key);
    if (!v) return fallback;
    if (v->type != GgufValueType::Bool) fail(where, "metadata '" + key + "' must be a bool");
    return v->u != 0;
  }
  // A token id key; -1 when absent.
  int64_t id_or_none(const std::string& key, size_t n_tokens) const {
    const GgufValue* v = h.find(key);
    if (!v) return -1;
    uint64_t id = 0;
    if (!v->as_u64(&id) || id >= n_tokens) fail(where, "metadata '" + key + "' is not a token id of the vocabulary");
    return int64_t(id);
  }
};

struct Vocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<float> scores;
  std::string model, pre;
};

Vocab read_vocab(const Meta& m) {
  Vocab v;
  v.model = m.text_or("tokenizer.ggml.model", "");
  if (v.model.empty()) fail(m.where, "metadata key 'tokenizer.ggml.model' is missing");
  v.pre = m.text_or("tokenizer.ggml.pre", "default");
  const GgufValue* tokens = m.array("tokenizer.ggml.tokens", GgufValueType::String, true);
  if (tokens->array.empty() || tokens->array.size() > (1u << 24))
    fail(m.where, "tokenizer.ggml.tokens must hold 1 to 16777216 tokens");
  for (const GgufValue& t : tokens->array) {
    if (!valid_utf8(t.str))
      fail(m.where, "tokenizer.ggml.tokens[" + std::to_string(v.tokens.size()) + "] is not valid UTF-8");
    v.tokens.push_back(t.str);
  }
  const size_t n = v.tokens.size();
  v.types.assign(n, kNormal);
  if (const GgufValue* types = m.array("tokenizer.ggml.token_type", GgufValueType::I32, false)) {
    if (types->array.size() != n) fail(m.where, "tokenizer.ggml.token_type has a different length than tokenizer.ggml.tokens");
    for (size_t i = 0; i < n; ++i) v.types[i] = int32_t(types->array[i].i);
  }
  if (const GgufValue* scores = m.array("tokenizer.ggml.scores", GgufValueType::F32, false)) {
    if (scores->array.size() != n) fail(m.where, "tokenizer.ggml.scores has a different length than tokenizer.ggml.tokens");
    for (const GgufValue& s : scores->array) v.scores.push_back(float(s.f));
  }
  return v;
}

json added_token(int64_t id, const std::string& content, bool special) {
  return {{"id", id}, {"content", content}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
          {"normalized", false}, {"special", special}};
}

// TemplateProcessing putting BOS/EOS around a sequence (nothing when neither is added).
json post_processor(const std::vector<std::string>& tokens, int64_t bos, int64_t eos) {
  json single = json::array(), pair = json::array(), special = json::object();
  auto special_token = [&](int64_t id, int type_id) {
    special[tokens[size_t(id)]] = {{"id", tokens[size_t(id)]}, {"ids", {id}}, {"tokens", {tokens[size_t(id)]}}};
    return json{{"SpecialToken", {{"id", tokens[size_t(id)]}, {"type_id", type_id}}}};
  };
  for (int seq = 0; seq < 2; ++seq) {
    json& out = seq == 0 ? single : pair;
    for (int part = 0; part <= seq; ++part) {
      if (bos >= 0) out.push_back(special_token(bos, part));
      out.push_back({{"Sequence", {{"id", part == 0 ? "A" : "B"}, {"type_id", part}}}});
      if (eos >= 0) out.push_back(special_token(eos, part));
    }
  }
  return {{"type", "TemplateProcessing"}, {"single", single}, {"pair", pair}, {"special_tokens", special}};
}

// transformers' generate_merges(vocab, vocab_scores): every split of every token into two
// vocabulary pieces, ordered by the token's score (highest first), then the pieces' lengths.
json merges_from_scores(const Vocab& v) {
  std::unordered_map<std::string, size_t> id;  // token -> its last id (a Python dict)
  for (size_t i = 0; i < v.tokens.size(); ++i) id[v.tokens[i]] = i;
  std::unordered_map<std::string, float> score;
  std::vector<std::string> order;  // dict insertion order: first occurrence
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    if (!score.count(v.tokens[i])) order.push_back(v.tokens[i]);
    score[v.tokens[i]] = v.scores[i];
  }
  struct Merge {
    std::string l, r;
    float score;
    size_t len_l, len_r;
  };
  std::vector<Merge> merges;
  for (const std::string& tok : order) {
    const std::vector<size_t> st = char_starts(tok);
    std::vector<Merge> local;
    for (size_t k = 1; k < st.size(); ++k) {
      std::string l = tok.substr(0, st[k]), r = tok.substr(st[k]);
      if (id.count(l) && id.count(r)) local.push_back({std::move(l), std::move(r), score[tok], k, st.size() - k});
    }
    std::stable_sort(local.begin(), local.end(), [&](const Merge& a, const Merge& b) {
      return std::make_pair(id[a.l], id[a.r]) < std::make_pair(id[b.l], id[b.r]);
    });
    for (Merge& x : local) merges.push_back(std::move(x));
  }
  // sorted(..., key=(score, len_l, len_r), reverse=True) is stable: equal keys keep their order.
  std::stable_sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) {
    return std::make_tuple(a.score, a.len_l, a.len_r) > std::make_tuple(b.score, b.len_l, b.len_r);
  });
  json out = json::array();
  for (const Merge& x : merges) out.push_back({x.l, x.r});
  return out;
}

json merges_from_file(const Meta& m, const GgufValue& merges) {
  json out = json::array();
  for (const GgufValue& x : merges.array) {
    if (!valid_utf8(x.str)) fail(m.where, "a tokenizer.ggml.merges entry is not valid UTF-8");
    const size_t sp = x.str.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 >= x.str.size() || x.str.find(' ', sp + 1) != std::string::npos)
      fail(m.where, "tokenizer.ggml.merges entry '" + packer_detail::printable(x.str) + "' is not two tokens separated by one space");
    out.push_back({x.str.substr(0, sp), x.str.substr(sp + 1)});
  }
  return out;
}

}  // namespace

json gguf_tokenizer_json(const GgufHeader& h, const std::string& where) {
  const Meta m{h, where};
  const Vocab v = read_vocab(m);
  const size_t n = v.tokens.size();
  const GgufValue* merges = m.array("tokenizer.ggml.merges", GgufValueType::String, false);
  const bool byte_level = v.model == "gpt2";
  if (!byte_level && v.model != "llama")
    fail(where, "tokenizer model '" + packer_detail::printable(v.model) + "' is not supported (supported: gpt2, llama)");

  json tok;
  tok["version"] = "1.0";
  tok["truncation"] = nullptr;
  tok["padding"] = nullptr;

  // Vocabulary and added tokens.
  json vocab = json::object();
  json added = json::array();
  for (size_t i = 0; i < n; ++i) {
    std::string t = v.tokens[i];
    if (byte_level && !in_byte_alphabet(t)) {
      // A token spelled in plain UTF-8 (a mislabel of some converters, or a control token such
      // as "<|im_start|>" that is only ASCII and so already in the alphabet): the vocabulary
      // entry is its byte-level spelling, as transformers does.
      std::string spelled;
      for (unsigned char c : t) spelled += byte_alphabet()[c];
      if (v.types[i] == kControl) {
        // transformers skips a control token outside the alphabet (a llama.cpp mislabel).
        vocab[spelled] = i;
        continue;
      }
      t = spelled;
    }
    vocab[t] = i;  // a repeated token keeps its last id, as transformers' dict does
    if (v.types[i] == kControl || (!byte_level && v.types[i] == kUnknown))
      added.push_back(added_token(int64_t(i), v.tokens[i], true));
    else if (v.types[i] == kUserDefined)
      added.push_back(added_token(int64_t(i), v.tokens[i], false));
  }
  tok["added_tokens"] = added;

  const int64_t bos = m.id_or_none("tokenizer.ggml.bos_token_id", n);
  const int64_t eos = m.id_or_none("tokenizer.ggml.eos_token_id", n);
  const int64_t unk = m.id_or_none("tokenizer.ggml.unknown_token_id", n);
  // llama.cpp adds BOS to a SentencePiece vocabulary that does not say otherwise.
  const bool add_bos = m.flag_or("tokenizer.ggml.add_bos_token", !byte_level);
  const bool add_eos = m.flag_or("tokenizer.ggml.add_eos_token", false);
  if (add_bos && bos < 0) fail(where, "tokenizer.ggml.add_bos_token is set but there is no tokenizer.ggml.bos_token_id");
  if (add_eos && eos < 0) fail(where, "tokenizer.ggml.add_eos_token is set but there is no tokenizer.ggml.eos_token_id");

  json model = {{"type", "BPE"}, {"dropout", nullptr}, {"fuse_unk", !byte_level}, {"byte_fallback", !byte_level}};
  if (byte_level) {
    const std::string& pre = v.pre;
    json bl_regex = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
    json bl_plain = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}};
    auto split = [](const char* regex) {
      return json{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}};
    };
    bool ignore_merges = false;
    tok["normalizer"] = nullptr;
    if (pre == "smollm") {
      tok["pre_tokenizer"] = {{"type", "Sequence"},
                              {"pretokenizers", {{{"type", "Digits"}, {"individual_digits", true}}, bl_regex}}};
    } else if (pre == "gpt-2" || pre == "default") {
      tok["pre_tokenizer"] = bl_regex;
    } else if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3" || pre == "smaug-bpe") {
      tok["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {split(kLlama3Split), bl_plain}}};
      ignore_merges = true;
    } else if (pre == "qwen2" || pre == "deepseek-r1-qwen") {
      tok["normalizer"] = {{"type", "NFC"}};
      tok["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {split(kQwen2Split), bl_plain}}};
    } else {
      fail(where, "pre-tokenizer '" + packer_detail::printable(pre) + "' (tokenizer.ggml.pre) is not supported (supported: smollm, gpt-2, default, "
                  "llama-bpe, llama3, llama-v3, smaug-bpe, qwen2, deepseek-r1-qwen)");
    }
    model["unk_token"] = nullptr;
    model["continuing_subword_prefix"] = "";
    model["end_of_word_suffix"] = "";
    model["ignore_merges"] = ignore_merges;
    model["vocab"] = std::move(vocab);
    if (!merges) fail(where, "metadata key 'tokenizer.ggml.merges' is missing (a gpt2 tokenizer needs its merges)");
    model["merges"] = merges_from_file(m, *merges);
    tok["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  } else {
    // SentencePiece BPE as LlamaTokenizerFast (legacy) lays it out.
    if (v.pre != "default" && v.pre != "llama")
      fail(where, "pre-tokenizer '" + packer_detail::printable(v.pre) + "' with a llama (SentencePiece) tokenizer is not supported (supported: default)");
    const bool add_space = m.flag_or("tokenizer.ggml.add_space_prefix", true);
    json replace = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}};
    tok["normalizer"] = add_space ? json{{"type", "Sequence"},
                                         {"normalizers", {{{"type", "Prepend"}, {"prepend", "\u2581"}}, replace}}}
                                  : replace;
    tok["pre_tokenizer"] = nullptr;
    json decoders = {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                     {{"type", "ByteFallback"}},
                     {{"type", "Fuse"}}};
    if (add_space) decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    tok["decoder"] = {{"type", "Sequence"}, {"decoders", decoders}};
    model["unk_token"] = unk >= 0 ? json(v.tokens[size_t(unk)]) : json(nullptr);
    model["continuing_subword_prefix"] = nullptr;
    model["end_of_word_suffix"] = nullptr;
    model["ignore_merges"] = false;
    model["vocab"] = std::move(vocab);
    if (merges) {
      model["merges"] = merges_from_file(m, *merges);
    } else {
      if (v.scores.empty()) fail(where, "a llama tokenizer needs tokenizer.ggml.merges or tokenizer.ggml.scores");
      model["merges"] = merges_from_scores(v);
    }
  }
  tok["post_processor"] = post_processor(v.tokens, add_bos ? bos : -1, add_eos ? eos : -1);
  tok["model"] = std::move(model);
  return tok;
}

json gguf_tokenizer_config(const GgufHeader& h, const std::string& where) {
  const Meta m{h, where};
  const Vocab v = read_vocab(m);
  const size_t n = v.tokens.size();
  const bool byte_level = v.model == "gpt2";
  json c;
  c["tokenizer_class"] = byte_level ? "GPT2Tokenizer" : "LlamaTokenizer";
  c["add_bos_token"] = m.flag_or("tokenizer.ggml.add_bos_token", !byte_level);
  c["add_eos_token"] = m.flag_or("tokenizer.ggml.add_eos_token", false);
  for (const auto& [key, name] : {std::pair<const char*, const char*>{"tokenizer.ggml.bos_token_id", "bos_token"},
                                  {"tokenizer.ggml.eos_token_id", "eos_token"},
                                  {"tokenizer.ggml.unknown_token_id", "unk_token"},
                                  {"tokenizer.ggml.padding_token_id", "pad_token"}}) {
    const int64_t id = m.id_or_none(key, n);
    c[name] = id >= 0 ? json(v.tokens[size_t(id)]) : json(nullptr);
  }
  const std::string tmpl = m.text_or("tokenizer.chat_template", "");
  if (!tmpl.empty()) c["chat_template"] = tmpl;
  return c;
}

}  // namespace endor
