// BPE model: table construction and the per-piece merge loop.
#include "bpe.h"

#include <queue>

#include "endor/tokenizer.h"
#include "unicode.h"

namespace endor {
namespace {
constexpr int64_t kMaxId = int64_t{1} << 24;  // refuse absurd ids instead of allocating for them
constexpr size_t kMaxCachedPiece = 256;        // as HF: longer pieces are not memoized

std::string byte_token(unsigned b) {
  const char* hex = "0123456789ABCDEF";
  return std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">";
}
}  // namespace

BpeModel::BpeModel(BpeConfig config, const std::string& source)
    : unk_token_(std::move(config.unk_token)),
      prefix_(std::move(config.continuing_subword_prefix)),
      suffix_(std::move(config.end_of_word_suffix)),
      fuse_unk_(config.fuse_unk),
      byte_fallback_(config.byte_fallback),
      ignore_merges_(config.ignore_merges),
      source_(source) {
  token_strings_.reserve(config.vocab.size());
  int64_t max_id = -1;
  for (auto& [token, id] : config.vocab) {
    if (id < 0 || id >= kMaxId)
      throw TokenizerError(source + ": vocab id " + std::to_string(id) + " of token '" + token + "' is out of range");
    max_id = std::max(max_id, id);
    token_strings_.push_back(std::move(token));
  }
  id_to_index_.assign(static_cast<size_t>(max_id + 1), -1);
  token_ids_.reserve(token_strings_.size());
  for (size_t i = 0; i < token_strings_.size(); ++i) {
    auto id = static_cast<int32_t>(config.vocab[i].second);
    token_ids_[token_strings_[i]] = id;  // a repeated token keeps its last id, as a JSON map does
    if (id_to_index_[static_cast<size_t>(id)] < 0) id_to_index_[static_cast<size_t>(id)] = static_cast<int32_t>(i);
  }

  const size_t prefix_len = prefix_ ? prefix_->size() : 0;
  merges_.reserve(config.merges.size());
  std::string joined;
  for (size_t rank = 0; rank < config.merges.size(); ++rank) {
    const auto& [a, b] = config.merges[rank];
    auto ia = token_to_id(a), ib = token_to_id(b);
    if (!ia || !ib)
      throw TokenizerError(source + ": merge " + std::to_string(rank) + " ('" + a + "' '" + b +
                           "') refers to token '" + (ia ? b : a) + "' that is not in the vocab");
    // With a continuing-subword prefix the right part carries it and the merged token does not.
    joined.assign(a);
    joined.append(b, std::min(prefix_len, b.size()), std::string::npos);
    auto merged = token_to_id(joined);
    if (!merged)
      throw TokenizerError(source + ": merge " + std::to_string(rank) + " ('" + a + "' '" + b +
                           "') makes token '" + joined + "' that is not in the vocab");
    merges_[pair_key(*ia, *ib)] = MergeValue{static_cast<uint32_t>(rank), *merged};  // last duplicate wins
  }

  for (unsigned b = 0; b < 256; ++b) {
    auto id = token_to_id(byte_token(b));
    byte_tokens_[b] = id ? *id : -1;
  }
  if ((!prefix_ || prefix_->empty()) && (!suffix_ || suffix_->empty())) {
    single_char_ids_.assign(0x10000, -1);
    for (const auto& [token, id] : token_ids_) {
      size_t i = 0;
      if (token.empty()) continue;
      char32_t cp = unicode::decode_utf8(token, i);
      if (i == token.size() && cp < 0x10000) single_char_ids_[cp] = id;
    }
    // decode_utf8 maps invalid bytes to U+FFFD; only the real U+FFFD token may claim it.
    auto fffd = token_to_id("\xEF\xBF\xBD");
    single_char_ids_[0xFFFD] = fffd ? *fffd : -1;
  }
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  auto it = token_ids_.find(token);
  if (it == token_ids_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_index_.size() || id_to_index_[static_cast<size_t>(id)] < 0)
    return nullptr;
  return &token_strings_[static_cast<size_t>(id_to_index_[static_cast<size_t>(id)])];
}

void BpeModel::tokenize(const std::string& piece, std::vector<int32_t>& out, Cache& cache) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    if (auto id = token_to_id(piece)) {
      out.push_back(*id);
      return;
    }
  }
  if (piece.size() < kMaxCachedPiece) {
    auto it = cache.find(piece);
    if (it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
    std::vector<int32_t> ids;
    merge_word(piece, ids);
    out.insert(out.end(), ids.begin(), ids.end());
    cache.emplace(piece, std::move(ids));
    return;
  }
  merge_word(piece, out);
}

void BpeModel::merge_word(std::string_view w, std::vector<int32_t>& out) const {
  struct Symbol { int32_t id; int32_t prev, next; bool removed; };
  std::vector<Symbol> symbols;
  symbols.reserve(w.size());
  auto add = [&](int32_t id) {
    int32_t n = static_cast<int32_t>(symbols.size());
    symbols.push_back(Symbol{id, n - 1, n + 1, false});
  };
  // Pending unk (HF quirk kept: a byte-fallback character does not flush a pending unk).
  bool have_unk = false;
  std::string s;
  for (size_t i = 0; i < w.size();) {
    size_t start = i;
    char32_t cp = unicode::decode_utf8(w, i);
    bool is_first = start == 0, is_last = i == w.size();
    std::optional<int32_t> id;
    if (!single_char_ids_.empty() && cp < 0x10000) {
      if (single_char_ids_[cp] >= 0) id = single_char_ids_[cp];
      s.assign(w.substr(start, i - start));
    } else {
      s.clear();
      if (!is_first && prefix_) s += *prefix_;
      s.append(w.substr(start, i - start));
      if (is_last && suffix_) s += *suffix_;
      id = token_to_id(s);
    }
    if (id) {
      if (have_unk) { add(*token_to_id(*unk_token_)); have_unk = false; }
      add(*id);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (unsigned char b : s) all = all && byte_tokens_[b] >= 0;
      if (all) {
        for (unsigned char b : s) add(byte_tokens_[b]);
        continue;
      }
    }
    if (unk_token_) {
      auto unk = token_to_id(*unk_token_);
      if (!unk) throw TokenizerError(source_ + ": unk token '" + *unk_token_ + "' is not in the vocab");
      if (have_unk && !fuse_unk_) add(*unk);
      have_unk = true;
    }
    // No unk token: HF drops the character.
  }
  if (have_unk) add(*token_to_id(*unk_token_));
  if (symbols.empty()) return;
  symbols.back().next = -1;

  struct Merge { uint32_t rank; int32_t pos; int32_t new_id; };
  auto later = [](const Merge& x, const Merge& y) { return x.rank != y.rank ? x.rank > y.rank : x.pos > y.pos; };
  std::priority_queue<Merge, std::vector<Merge>, decltype(later)> queue(later);
  auto find = [&](int32_t a, int32_t b) -> const MergeValue* {
    auto it = merges_.find(pair_key(a, b));
    return it == merges_.end() ? nullptr : &it->second;
  };
  for (size_t k = 0; k + 1 < symbols.size(); ++k)
    if (const MergeValue* m = find(symbols[k].id, symbols[k + 1].id))
      queue.push(Merge{m->rank, static_cast<int32_t>(k), m->new_id});

  while (!queue.empty()) {
    Merge top = queue.top();
    queue.pop();
    Symbol& cur = symbols[static_cast<size_t>(top.pos)];
    if (cur.removed || cur.next < 0) continue;
    Symbol& right = symbols[static_cast<size_t>(cur.next)];
    const MergeValue* m = find(cur.id, right.id);
    if (!m || m->new_id != top.new_id) continue;  // stale entry
    cur.id = top.new_id;
    right.removed = true;
    cur.next = right.next;
    if (cur.next >= 0) symbols[static_cast<size_t>(cur.next)].prev = top.pos;
    if (cur.prev >= 0)
      if (const MergeValue* p = find(symbols[static_cast<size_t>(cur.prev)].id, cur.id))
        queue.push(Merge{p->rank, cur.prev, p->new_id});
    if (cur.next >= 0)
      if (const MergeValue* n = find(cur.id, symbols[static_cast<size_t>(cur.next)].id))
        queue.push(Merge{n->rank, top.pos, n->new_id});
  }
  for (const Symbol& sym : symbols)
    if (!sym.removed) out.push_back(sym.id);
}

}  // namespace endor
