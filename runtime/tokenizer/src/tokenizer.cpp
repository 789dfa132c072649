// Loading tokenizer.json / vocab.json+merges.txt, and the encode/decode pipelines of endor::Tokenizer.
#include "endor/tokenizer.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "bpe.h"
#include "pipeline.h"
#include "unicode.h"

namespace endor {

using nlohmann::json;
using namespace tok;  // the internal stages (regex.h, bpe.h, pipeline.h, unicode.h)

struct Tokenizer::Impl {
  std::string source;
  std::unique_ptr<BpeModel> model;
  std::vector<AddedToken> added;
  std::vector<std::string> added_decode_form;  // content, or its normalized form if normalized
  std::unordered_map<int32_t, size_t> added_index;  // id -> index in `added`
  std::unordered_set<std::string> special_contents;
  std::unique_ptr<AddedTokenSplitter> raw_splitter, normalized_splitter;
  std::optional<Normalizer> normalizer;
  std::optional<PreTokenizer> pre_tokenizer;
  PostProcessor post;
  std::optional<Decoder> decoder;
  size_t vocab_size = 0;

  void finish_added_tokens();
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const;
  // Token string used for decoding, nullptr when the id is unknown or skipped.
  const std::string* decode_token(int32_t id, bool skip_special) const;
  // Decoded bytes before invalid-UTF-8 repair (see Decoder::apply for open_end).
  std::string decode_raw(const int32_t* ids, size_t n, bool skip_special, bool open_end) const;
  std::string_view token_text(int32_t id) const;
};

namespace {

std::string read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw TokenizerError(path + ": cannot open file");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw TokenizerError(path + ": read error");
  return ss.str();
}

json parse_json(std::string_view text, const std::string& source) {
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    throw TokenizerError(source + ": not valid JSON (" + e.what() + ")");
  }
}

// One merge, "a b" or ["a", "b"].
void add_merge(const json& merge, BpeConfig& c, const std::string& source) {
  size_t rank = c.merges.size();
  if (merge.is_string()) {
    const std::string& s = merge.get_ref<const std::string&>();
    size_t sp = s.find(' ');
    if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
      throw TokenizerError(source + ": merge " + std::to_string(rank) + " '" + s + "' is not two tokens separated by one space");
    c.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
  } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
    c.merges.emplace_back(merge[0].get<std::string>(), merge[1].get<std::string>());
  } else {
    throw TokenizerError(source + ": merge " + std::to_string(rank) + " is neither \"a b\" nor [\"a\", \"b\"]");
  }
}

// Parses a tokenizer.json, streaming model.vocab and model.merges straight into `bpe` (they
// stay in the returned document as empty containers): building a JSON DOM of 150k vocab
// entries and 280k merges and tearing it down took most of the loading time.
json parse_tokenizer_json(std::string_view text, const std::string& source, BpeConfig& bpe) {
  std::string root_key, model_key, token;
  auto callback = [&](int depth, json::parse_event_t event, json& parsed) -> bool {
    using E = json::parse_event_t;
    if (event == E::key) {
      if (depth == 1) root_key = parsed.get<std::string>();
      else if (depth == 2 && root_key == "model") model_key = parsed.get<std::string>();
      else if (depth == 3 && root_key == "model" && model_key == "vocab") token = parsed.get<std::string>();
      return true;
    }
    if (depth != 3 || root_key != "model") return true;
    if (model_key == "vocab" && event == E::value) {
      if (!parsed.is_number_integer()) throw TokenizerError(source + ": vocab id of token '" + token + "' is not an integer");
      bpe.vocab.emplace_back(std::move(token), parsed.get<int64_t>());
      return false;
    }
    if (model_key == "merges" && (event == E::value || event == E::array_end || event == E::object_end)) {
      add_merge(parsed, bpe, source);
      return false;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), callback);
  } catch (const json::parse_error& e) {
    throw TokenizerError(source + ": not valid JSON (" + e.what() + ")");
  }
}

// Completes `c` (vocab and merges already streamed in) from the model object `m`.
BpeConfig bpe_config_from_json(const json& m, BpeConfig c, const std::string& source) {
  if (!m.contains("vocab") || !m.at("vocab").is_object()) throw TokenizerError(source + ": model has no 'vocab' object");
  if (!m.contains("merges") || !m.at("merges").is_array()) throw TokenizerError(source + ": model has no 'merges' array");
  auto opt_string = [&](const char* key) -> std::optional<std::string> {
    if (!m.contains(key) || m.at(key).is_null()) return std::nullopt;
    return m.at(key).get<std::string>();
  };
  auto opt_bool = [&](const char* key) { return m.contains(key) && !m.at(key).is_null() && m.at(key).get<bool>(); };
  c.unk_token = opt_string("unk_token");
  c.continuing_subword_prefix = opt_string("continuing_subword_prefix");
  c.end_of_word_suffix = opt_string("end_of_word_suffix");
  c.fuse_unk = opt_bool("fuse_unk");
  c.byte_fallback = opt_bool("byte_fallback");
  c.ignore_merges = opt_bool("ignore_merges");
  if (m.contains("dropout") && !m.at("dropout").is_null() && m.at("dropout").get<double>() != 0.0)
    throw TokenizerError(source + ": BPE dropout is not supported (encoding must be deterministic)");
  return c;
}

std::optional<int32_t> first_present(const Tokenizer::Impl& impl, std::initializer_list<const char*> names) {
  for (const char* n : names) {
    for (const AddedToken& t : impl.added)
      if (t.content == n) return t.id;
    if (auto id = impl.model->token_to_id(n)) return id;
  }
  return std::nullopt;
}

}  // namespace

void Tokenizer::Impl::finish_added_tokens() {
  // Ids as HF's AddedVocabulary assigns them when loading (the ids written in the file are
  // not used): a content seen before keeps its id (the later entry's flags win), a content in
  // the model vocab takes the model's id, anything else the next id from the vocab size on.
  std::vector<AddedToken> listed = std::move(added);
  added.clear();
  std::unordered_map<std::string, size_t> by_content;
  auto next_id = static_cast<int64_t>(model->token_count());
  for (AddedToken& t : listed) {
    if (t.content.empty()) continue;
    auto seen = by_content.find(t.content);
    if (seen != by_content.end()) {
      t.id = added[seen->second].id;
      added[seen->second] = std::move(t);
      continue;
    }
    if (auto id = model->token_to_id(t.content)) t.id = *id;
    else t.id = static_cast<int32_t>(next_id++);
    by_content.emplace(t.content, added.size());
    added.push_back(std::move(t));
  }

  std::vector<const AddedToken*> raw, norm;
  std::vector<std::string> raw_patterns, norm_patterns;
  size_t limit = model->id_limit();
  for (size_t i = 0; i < added.size(); ++i) {
    const AddedToken& t = added[i];
    std::string form = t.content;
    if (t.normalized && normalizer) form = normalizer->apply(form);
    added_decode_form.push_back(form);
    added_index[t.id] = i;
    if (t.special) special_contents.insert(t.content);
    limit = std::max(limit, static_cast<size_t>(t.id) + 1);
    (t.normalized ? norm : raw).push_back(&t);
    (t.normalized ? norm_patterns : raw_patterns).push_back(form);
  }
  vocab_size = limit;
  if (!raw.empty()) raw_splitter = std::make_unique<AddedTokenSplitter>(raw, raw_patterns);
  if (!norm.empty()) normalized_splitter = std::make_unique<AddedTokenSplitter>(norm, norm_patterns);
}

std::vector<int32_t> Tokenizer::Impl::encode(std::string_view input, bool add_special_tokens) const {
  std::string text = unicode::is_valid_utf8(input) ? std::string(input) : unicode::to_valid_utf8(input);
  std::vector<Segment> segments;
  Segment whole{std::move(text), -1, true};
  if (raw_splitter) raw_splitter->split(whole, segments);
  else if (!whole.text.empty()) segments.push_back(std::move(whole));

  std::vector<int32_t> ids(post.prefix.begin(), add_special_tokens ? post.prefix.end() : post.prefix.begin());
  BpeModel::Cache cache;
  std::vector<Segment> normalized, pieces;
  for (Segment& seg : segments) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
      continue;
    }
    if (normalizer) seg.text = normalizer->apply(std::move(seg.text));
    if (seg.text.empty()) continue;
    normalized.clear();
    if (normalized_splitter) normalized_splitter->split(seg, normalized);
    else normalized.push_back(std::move(seg));
    for (Segment& part : normalized) {
      if (part.id >= 0) {
        ids.push_back(part.id);
        continue;
      }
      pieces.clear();
      pieces.push_back(std::move(part));
      if (pre_tokenizer) pre_tokenizer->apply(pieces);
      for (const Segment& piece : pieces) model->tokenize(piece.text, ids, cache);
    }
  }
  if (add_special_tokens) ids.insert(ids.end(), post.suffix.begin(), post.suffix.end());
  return ids;
}

const std::string* Tokenizer::Impl::decode_token(int32_t id, bool skip_special) const {
  const std::string* token;
  auto it = added_index.find(id);
  if (it != added_index.end()) {
    token = &added_decode_form[it->second];
    if (skip_special && special_contents.count(added[it->second].content)) return nullptr;
  } else {
    token = model->id_to_token(id);
  }
  if (token && skip_special && special_contents.count(*token)) return nullptr;
  return token;
}

std::string Tokenizer::Impl::decode_raw(const int32_t* ids, size_t n, bool skip_special, bool open_end) const {
  std::vector<std::string> tokens;
  tokens.reserve(n);
  for (size_t i = 0; i < n; ++i)
    if (const std::string* t = decode_token(ids[i], skip_special)) tokens.push_back(*t);
  if (!decoder) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i) out += ' ';
      out += tokens[i];
    }
    return out;
  }
  decoder->apply(tokens, open_end);
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

std::string_view Tokenizer::Impl::token_text(int32_t id) const {
  auto it = added_index.find(id);
  if (it != added_index.end()) return added[it->second].content;
  const std::string* t = model->id_to_token(id);
  return t ? std::string_view(*t) : std::string_view();
}

// ---- Tokenizer --------------------------------------------------------------------------------------
Tokenizer::Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {
  if (!impl_->post.prefix.empty()) bos_id_ = impl_->post.prefix.front();
  else bos_id_ = first_present(*impl_, {"<|begin_of_text|>", "<s>", "<|endoftext|>"});
  if (!impl_->post.suffix.empty()) eos_id_ = impl_->post.suffix.back();
  else eos_id_ = first_present(*impl_, {"<|end_of_text|>", "</s>", "<|endoftext|>"});
}

Tokenizer Tokenizer::from_json(std::string_view text, const std::string& source) {
  auto impl = std::make_shared<Impl>();
  impl->source = source;
  try {
    BpeConfig streamed;
    json j = parse_tokenizer_json(text, source, streamed);
    if (!j.is_object() || !j.contains("model") || !j.at("model").is_object())
      throw TokenizerError(source + ": not a tokenizer.json (no 'model' object)");
    const json& m = j.at("model");
    std::string type = m.contains("type") ? m.at("type").get<std::string>() : (m.contains("merges") ? "BPE" : "");
    if (type != "BPE")
      throw TokenizerError(source + ": tokenizer model type '" + (type.empty() ? std::string("(none)") : type) +
                           "' is not supported (only BPE)");
    impl->model = std::make_unique<BpeModel>(bpe_config_from_json(m, std::move(streamed), source), source);
    auto present = [&](const char* key) { return j.contains(key) && !j.at(key).is_null(); };
    if (present("normalizer")) impl->normalizer = Normalizer::from_json(j.at("normalizer"), source);
    if (present("pre_tokenizer")) impl->pre_tokenizer = PreTokenizer::from_json(j.at("pre_tokenizer"), source);
    if (present("post_processor")) impl->post = PostProcessor::from_json(j.at("post_processor"), source);
    if (present("decoder")) impl->decoder = Decoder::from_json(j.at("decoder"), source);
    if (present("added_tokens")) {
      for (const json& t : j.at("added_tokens")) {
        AddedToken a;
        (void)t.at("id").get<int64_t>();  // required, but HF assigns the ids itself (finish_added_tokens)
        a.content = t.at("content").get<std::string>();
        a.single_word = t.value("single_word", false);
        a.lstrip = t.value("lstrip", false);
        a.rstrip = t.value("rstrip", false);
        a.special = t.value("special", false);
        a.normalized = t.value("normalized", !a.special);
        impl->added.push_back(std::move(a));
      }
    }
  } catch (const json::exception& e) {
    throw TokenizerError(source + ": malformed tokenizer.json (" + e.what() + ")");
  }
  if (impl->added.size() > (size_t{1} << 20)) throw TokenizerError(source + ": more than 2^20 added tokens");
  impl->finish_added_tokens();
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_file(const std::string& path) { return from_json(read_whole_file(path), path); }

Tokenizer Tokenizer::from_vocab_merges(std::string_view vocab_json, std::string_view merges_txt,
                                       const std::string& source, const std::vector<std::string>& special_tokens) {
  json vocab = parse_json(vocab_json, source + " (vocab.json)");
  if (!vocab.is_object()) throw TokenizerError(source + ": vocab.json is not a JSON object of token -> id");
  BpeConfig c;
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer()) throw TokenizerError(source + ": vocab id of token '" + token + "' is not an integer");
    c.vocab.emplace_back(token, id.get<int64_t>());
  }
  size_t line_no = 0, start = 0;
  while (start <= merges_txt.size()) {
    size_t end = merges_txt.find('\n', start);
    if (end == std::string_view::npos) end = merges_txt.size();
    std::string_view line = merges_txt.substr(start, end - start);
    ++line_no;
    start = end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || line.rfind("#version", 0) == 0) continue;
    size_t sp = line.find(' ');
    if (sp == std::string_view::npos || line.find(' ', sp + 1) != std::string_view::npos)
      throw TokenizerError(source + ": merges.txt line " + std::to_string(line_no) + " is not two tokens separated by one space");
    c.merges.emplace_back(std::string(line.substr(0, sp)), std::string(line.substr(sp + 1)));
  }
  auto impl = std::make_shared<Impl>();
  impl->source = source;
  impl->model = std::make_unique<BpeModel>(std::move(c), source);
  impl->pre_tokenizer = PreTokenizer::byte_level(false, true);
  impl->decoder = Decoder{Decoder::Kind::ByteLevel, {}, {}, {}, nullptr};
  for (const std::string& s : special_tokens) {
    if (auto id = impl->model->token_to_id(s)) {
      AddedToken a;
      a.id = *id;
      a.content = s;
      a.special = true;
      a.normalized = false;
      impl->added.push_back(std::move(a));
    }
  }
  impl->finish_added_tokens();
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_vocab_merges_files(const std::string& vocab_path, const std::string& merges_path,
                                             const std::vector<std::string>& special_tokens) {
  return from_vocab_merges(read_whole_file(vocab_path), read_whole_file(merges_path), vocab_path, special_tokens);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  try {
    return impl_->encode(text, add_special_tokens);
  } catch (const Regex::BudgetExceeded&) {
    throw TokenizerError(impl_->source + ": a split pattern of this tokenizer backtracks without bound on this text");
  }
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  return unicode::to_valid_utf8(impl_->decode_raw(ids.data(), ids.size(), skip_special_tokens, false));
}

bool Tokenizer::adds_bos() const { return bos_id_ && !impl_->post.prefix.empty() && impl_->post.prefix.front() == *bos_id_; }
size_t Tokenizer::vocab_size() const { return impl_->vocab_size; }
std::string_view Tokenizer::token_text(int32_t id) const { return impl_->token_text(id); }

std::optional<int32_t> Tokenizer::token_id(std::string_view token) const {
  for (const AddedToken& t : impl_->added)
    if (t.content == token) return t.id;
  return impl_->model->token_to_id(token);
}

bool Tokenizer::is_special(int32_t id) const { return impl_->decode_token(id, true) == nullptr && impl_->decode_token(id, false) != nullptr; }

// ---- StreamingDecoder ---------------------------------------------------------------------------------
// Window scheme: ids_[0, prefix_) were already emitted and are re-decoded with the new ids so
// that context-dependent decoders (Strip, Metaspace's first token, byte-fallback runs) see the
// same neighbours as in a full decode; the new text is what the window adds to prefix_bytes_.
StreamingDecoder::StreamingDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : impl_(tokenizer.impl_), skip_special_(skip_special_tokens) {}

std::string StreamingDecoder::push(int32_t id) {
  ids_.push_back(id);
  std::string now = impl_->decode_raw(ids_.data(), ids_.size(), skip_special_, true);
  std::string fresh;
  if (now.compare(0, prefix_bytes_.size(), prefix_bytes_) == 0) {
    fresh = now.substr(prefix_bytes_.size());
  } else {
    // The window re-decoded differently (an invalid byte-fallback run): emit the new ids alone.
    fresh = impl_->decode_raw(ids_.data() + prefix_, ids_.size() - prefix_, skip_special_, true);
  }
  // Nothing new yet, or the end of a character is still to come: keep the window as it is.
  if (fresh.empty() || unicode::complete_utf8_prefix(fresh) < fresh.size()) return {};
  // The ids just emitted become the context of the next push; older ones can go.
  ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(prefix_));
  prefix_ = ids_.size();
  prefix_bytes_ = impl_->decode_raw(ids_.data(), ids_.size(), skip_special_, true);
  return unicode::to_valid_utf8(fresh);
}

void StreamingDecoder::follow(const std::vector<int32_t>& context) {
  // A few ids are context enough: push() keeps only the last emitted ids as its window, too.
  constexpr size_t kContextIds = 8;
  const size_t n = std::min(context.size(), kContextIds);
  ids_.assign(context.end() - static_cast<std::ptrdiff_t>(n), context.end());
  prefix_ = ids_.size();
  prefix_bytes_ = impl_->decode_raw(ids_.data(), ids_.size(), skip_special_, true);
}

std::string StreamingDecoder::flush() {
  std::string rest;
  if (prefix_ < ids_.size()) {
    std::string now = impl_->decode_raw(ids_.data(), ids_.size(), skip_special_, false);
    std::string before = impl_->decode_raw(ids_.data(), prefix_, skip_special_, false);
    rest = now.compare(0, before.size(), before) == 0
               ? now.substr(before.size())
               : impl_->decode_raw(ids_.data() + prefix_, ids_.size() - prefix_, skip_special_, false);
  }
  ids_.clear();
  prefix_ = 0;
  prefix_bytes_.clear();
  return unicode::to_valid_utf8(rest);
}

// ---- id lists ---------------------------------------------------------------------------------------------
std::string format_ids(const std::vector<int32_t>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ' ';
    out += std::to_string(ids[i]);
  }
  return out;
}

std::vector<int32_t> parse_ids(std::string_view text) {
  std::vector<int32_t> ids;
  size_t i = 0;
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
  while (i < text.size()) {
    if (space(text[i])) { ++i; continue; }
    size_t j = i;
    while (j < text.size() && !space(text[j])) ++j;
    std::string_view word = text.substr(i, j - i);
    int64_t v = 0;
    bool ok = word.size() <= 10;  // at most 10 digits: v stays far below int64 overflow
    for (size_t k = 0; ok && k < word.size(); ++k) {
      if (word[k] < '0' || word[k] > '9') ok = false;
      else v = v * 10 + (word[k] - '0');
    }
    if (!ok || v > std::numeric_limits<int32_t>::max())
      throw TokenizerError("token ids: '" + std::string(word.substr(0, 40)) + "' is not a token id (a non-negative 32-bit integer)");
    ids.push_back(static_cast<int32_t>(v));
    i = j;
  }
  return ids;
}

}  // namespace endor
