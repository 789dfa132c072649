// BPE model: table construction and the per-piece merge loop.
#include "bpe.h"

#include <algorithm>
#include <functional>
#include <queue>

#include "endor/tokenizer.h"
#include "unicode.h"

namespace endor::tok {
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
  // Vocab: token strings, id -> string, and string -> id (a repeated token keeps its last id,
  // as a JSON object read into a map does).
  token_strings_.reserve(config.vocab.size());
  int64_t max_id = -1;
  for (auto& [token, id] : config.vocab) {
    if (id < 0 || id >= kMaxId)
      throw TokenizerError(source + ": vocab id " + std::to_string(id) + " of token '" + token + "' is out of range");
    max_id = std::max(max_id, id);
    token_strings_.push_back(std::move(token));
  }
  id_to_index_.assign(static_cast<size_t>(max_id + 1), -1);
  size_t capacity = 16;
  while (capacity < 2 * token_strings_.size()) capacity *= 2;
  token_slots_.assign(capacity, 0);
  token_slot_ids_.assign(capacity, -1);
  for (size_t i = 0; i < token_strings_.size(); ++i) {
    auto id = static_cast<int32_t>(config.vocab[i].second);
    const std::string& t = token_strings_[i];
    uint64_t h = hash_bytes(t), tag = (h >> 32) << 32;
    size_t slot = h & (capacity - 1);
    while (token_slots_[slot] != 0 &&
           ((token_slots_[slot] & ~0xFFFFFFFFull) != tag ||
            token_strings_[static_cast<size_t>((token_slots_[slot] & 0xFFFFFFFFu) - 1)] != t))
      slot = (slot + 1) & (capacity - 1);
    if (token_slots_[slot] == 0) ++token_count_;
    token_slots_[slot] = tag | (i + 1);
    token_slot_ids_[slot] = id;
    if (id_to_index_[static_cast<size_t>(id)] < 0) id_to_index_[static_cast<size_t>(id)] = static_cast<int32_t>(i);
  }

  // Merges: (left id, right id) -> (rank, merged id); a repeated pair keeps its last rank.
  const size_t prefix_len = prefix_ ? prefix_->size() : 0;
  capacity = 16;
  while (capacity < 2 * config.merges.size()) capacity *= 2;
  merge_slots_.assign(capacity, MergeSlot{kEmptyKey, {0, 0}});
  rank_new_id_.resize(config.merges.size());
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
    uint64_t key = pair_key(*ia, *ib);
    size_t slot = mix(key) & (capacity - 1);
    while (merge_slots_[slot].key != kEmptyKey && merge_slots_[slot].key != key) slot = (slot + 1) & (capacity - 1);
    merge_slots_[slot] = MergeSlot{key, MergeValue{static_cast<uint32_t>(rank), *merged}};
    rank_new_id_[rank] = *merged;
  }

  for (unsigned b = 0; b < 256; ++b) {
    auto id = token_to_id(byte_token(b));
    byte_tokens_[b] = id ? *id : -1;
  }
  if ((!prefix_ || prefix_->empty()) && (!suffix_ || suffix_->empty())) {
    single_char_ids_.assign(0x10000, -1);
    for (const std::string& token : token_strings_) {
      size_t i = 0;
      char32_t prev = 0;
      while (i < token.size()) {
        size_t start = i;
        char32_t cp = unicode::decode_utf8(token, i);
        if (start > 0) inner_bigrams_.push_back((uint64_t{prev} << 32) | cp);
        prev = cp;
      }
      i = 0;
      if (token.empty()) continue;
      char32_t cp = unicode::decode_utf8(token, i);
      if (i == token.size() && cp < 0x10000 && cp != 0xFFFD) single_char_ids_[cp] = *token_to_id(token);
    }
    // decode_utf8 maps invalid bytes to U+FFFD; only the real U+FFFD token may claim it.
    auto fffd = token_to_id("\xEF\xBF\xBD");
    single_char_ids_[0xFFFD] = fffd ? *fffd : -1;
    std::sort(inner_bigrams_.begin(), inner_bigrams_.end());
    inner_bigrams_.erase(std::unique(inner_bigrams_.begin(), inner_bigrams_.end()), inner_bigrams_.end());
    cut_long_pieces_ = true;
  }
}

uint64_t BpeModel::hash_bytes(std::string_view s) {
  uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a, then mixed
  for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ull;
  return mix(h);
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  size_t mask = token_slots_.size() - 1;
  uint64_t h = hash_bytes(token), tag = (h >> 32) << 32;
  for (size_t slot = h & mask; token_slots_[slot] != 0; slot = (slot + 1) & mask)
    if ((token_slots_[slot] & ~0xFFFFFFFFull) == tag &&
        token_strings_[static_cast<size_t>((token_slots_[slot] & 0xFFFFFFFFu) - 1)] == token)
      return token_slot_ids_[slot];
  return std::nullopt;
}

const BpeModel::MergeValue* BpeModel::find_merge(int32_t a, int32_t b) const {
  uint64_t key = pair_key(a, b);
  size_t mask = merge_slots_.size() - 1;
  for (size_t slot = mix(key) & mask; merge_slots_[slot].key != kEmptyKey; slot = (slot + 1) & mask)
    if (merge_slots_[slot].key == key) return &merge_slots_[slot].value;
  return nullptr;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_index_.size() || id_to_index_[static_cast<size_t>(id)] < 0)
    return nullptr;
  return &token_strings_[static_cast<size_t>(id_to_index_[static_cast<size_t>(id)])];
}

std::optional<int32_t> BpeModel::single_char_id(std::string_view ch, char32_t cp) const {
  if (!single_char_ids_.empty() && cp < 0x10000) {
    if (single_char_ids_[cp] >= 0) return single_char_ids_[cp];
    return std::nullopt;
  }
  return token_to_id(ch);
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
  if (!cut_long_pieces_ || w.size() <= kCutPiecesAbove) {
    merge_part(w, out);
    return;
  }
  size_t part_start = 0;
  char32_t prev = 0;
  bool prev_is_token = false;
  for (size_t i = 0; i < w.size();) {
    size_t start = i;
    char32_t cp = unicode::decode_utf8(w, i);
    bool is_token = single_char_id(w.substr(start, i - start), cp).has_value();
    if (start > 0 && prev_is_token && is_token &&
        !std::binary_search(inner_bigrams_.begin(), inner_bigrams_.end(), (uint64_t{prev} << 32) | cp)) {
      merge_part(w.substr(part_start, start - part_start), out);
      part_start = start;
    }
    prev = cp;
    prev_is_token = is_token;
  }
  merge_part(w.substr(part_start), out);
}

void BpeModel::merge_part(std::string_view w, std::vector<int32_t>& out) const {
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
    if (!single_char_ids_.empty()) {
      s.assign(w.substr(start, i - start));
      id = single_char_id(s, cp);
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

  // Min-heap of (rank << 32 | position): lowest rank first, leftmost among equal ranks.
  std::priority_queue<uint64_t, std::vector<uint64_t>, std::greater<uint64_t>> queue;
  auto push = [&](const MergeValue* m, int32_t pos) {
    queue.push((uint64_t{m->rank} << 32) | static_cast<uint32_t>(pos));
  };
  for (size_t k = 0; k + 1 < symbols.size(); ++k)
    if (const MergeValue* m = find_merge(symbols[k].id, symbols[k + 1].id)) push(m, static_cast<int32_t>(k));

  while (!queue.empty()) {
    uint64_t top = queue.top();
    queue.pop();
    auto rank = static_cast<uint32_t>(top >> 32);
    auto pos = static_cast<int32_t>(top & 0xFFFFFFFFu);
    Symbol& cur = symbols[static_cast<size_t>(pos)];
    if (cur.removed || cur.next < 0) continue;
    Symbol& right = symbols[static_cast<size_t>(cur.next)];
    // Stale entry unless the pair there now merges into the same token (HF's check).
    const MergeValue* m = find_merge(cur.id, right.id);
    int32_t new_id = rank_new_id_[rank];
    if (!m || m->new_id != new_id) continue;
    cur.id = new_id;
    right.removed = true;
    cur.next = right.next;
    if (cur.next >= 0) symbols[static_cast<size_t>(cur.next)].prev = pos;
    if (cur.prev >= 0)
      if (const MergeValue* p = find_merge(symbols[static_cast<size_t>(cur.prev)].id, cur.id)) push(p, cur.prev);
    if (cur.next >= 0)
      if (const MergeValue* n = find_merge(cur.id, symbols[static_cast<size_t>(cur.next)].id)) push(n, pos);
  }
  for (const Symbol& sym : symbols)
    if (!sym.removed) out.push_back(sym.id);
}

}  // namespace endor::tok
