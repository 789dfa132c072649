// Unicode tables lookup, UTF-8 helpers and canonical normalization (UAX #15).
#include "unicode.h"

#include <algorithm>
#include <vector>

namespace endor::tok::unicode {
namespace {

struct CodepointValue { uint32_t cp; uint8_t value; };
struct Decomposition { uint32_t cp, first, second; };  // second == 0: singleton
struct Composition { uint32_t first, second, composite; };

#include "unicode_tables.inc"

constexpr char32_t kReplacement = 0xFFFD;
// Hangul syllables decompose and compose algorithmically (UAX #15, section 16).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
                   kSCount = kLCount * kNCount;

uint8_t properties(char32_t cp) {
  if (cp > 0x10FFFF) return 0;
  return kBlockData[(size_t{kBlockIndex[cp >> kBlockShift]} << kBlockShift) | (cp & ((1u << kBlockShift) - 1))];
}

uint8_t combining_class(char32_t cp) {
  if (!(properties(cp) & kFlagCombining)) return 0;
  auto it = std::lower_bound(std::begin(kCombiningClass), std::end(kCombiningClass), cp,
                             [](const CodepointValue& e, char32_t c) { return e.cp < c; });
  return (it != std::end(kCombiningClass) && it->cp == cp) ? it->value : 0;
}

void decompose(char32_t cp, std::vector<char32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    char32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  if (properties(cp) & kFlagDecomposes) {
    auto it = std::lower_bound(std::begin(kDecomposition), std::end(kDecomposition), cp,
                               [](const Decomposition& e, char32_t c) { return e.cp < c; });
    if (it != std::end(kDecomposition) && it->cp == cp) {
      decompose(it->first, out);
      if (it->second != 0) decompose(it->second, out);
      return;
    }
  }
  out.push_back(cp);
}

// Canonical ordering: stable sort of each run of non-starters by combining class.
void reorder(std::vector<char32_t>& cps) {
  size_t i = 0;
  while (i < cps.size()) {
    if (combining_class(cps[i]) == 0) { ++i; continue; }
    size_t j = i;
    while (j < cps.size() && combining_class(cps[j]) != 0) ++j;
    std::stable_sort(cps.begin() + i, cps.begin() + j,
                     [](char32_t a, char32_t b) { return combining_class(a) < combining_class(b); });
    i = j;
  }
}

char32_t compose_pair(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount)
    return a + (b - kTBase);
  if (!(properties(b) & kFlagComposesWithPrevious)) return 0;
  auto it = std::lower_bound(std::begin(kComposition), std::end(kComposition), std::make_pair(a, b),
                             [](const Composition& e, const std::pair<char32_t, char32_t>& k) {
                               return e.first != k.first ? e.first < k.first : e.second < k.second;
                             });
  return (it != std::end(kComposition) && it->first == a && it->second == b) ? it->composite : 0;
}

void compose(std::vector<char32_t>& cps) {
  if (cps.empty()) return;
  size_t out = 1;
  long starter = combining_class(cps[0]) == 0 ? 0 : -1;
  int last_class = starter == 0 ? 0 : 256;
  for (size_t i = 1; i < cps.size(); ++i) {
    char32_t c = cps[i];
    int cc = combining_class(c);
    if (starter >= 0) {
      bool adjacent = out == static_cast<size_t>(starter) + 1;
      bool blocked = !adjacent && (last_class == 0 || last_class >= cc);
      if (!blocked) {
        if (char32_t composite = compose_pair(cps[starter], c)) {
          cps[starter] = composite;
          continue;
        }
      }
    }
    if (cc == 0) starter = static_cast<long>(out);
    last_class = cc;
    cps[out++] = c;
  }
  cps.resize(out);
}

// True when no character can change under canonical normalization (no decomposition, no
// combining class, nothing that composes with its predecessor).
bool normalization_inert(std::string_view text, bool recompose) {
  // Below U+0300 NFC changes nothing (Latin-1 letters are precomposed and stay so); NFD
  // decomposes from U+00C0 on, so only ASCII is skipped unchecked.
  const unsigned char skip_below = recompose ? 0xCC : 0x80;
  for (size_t i = 0; i < text.size();) {
    if (static_cast<unsigned char>(text[i]) < skip_below) {
      i += utf8_length(static_cast<unsigned char>(text[i]));
      continue;
    }
    if (properties(decode_utf8(text, i)) & (kFlagCombining | kFlagDecomposes | kFlagComposesWithPrevious))
      return false;
  }
  return true;
}

std::string normalize(std::string_view text, bool recompose) {
  if (normalization_inert(text, recompose)) return std::string(text);
  std::vector<char32_t> cps;
  cps.reserve(text.size());
  for (size_t i = 0; i < text.size();) decompose(decode_utf8(text, i), cps);
  reorder(cps);
  if (recompose) compose(cps);
  std::string out;
  out.reserve(text.size() + 8);
  for (char32_t c : cps) append_utf8(out, c);
  return out;
}

// Length of the well-formed UTF-8 sequence at s[i] (1..4), or -k when its first k bytes are a
// valid but truncated prefix (k >= 1, only at the end), or 0 when s[i] starts an ill-formed
// subsequence; `bad_len` then receives its maximal-subpart length (Unicode §3.9).
int sequence_at(std::string_view s, size_t i, size_t& bad_len) {
  auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  unsigned char lead = b(0);
  if (lead < 0x80) return 1;
  int need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) need = 1;
  else if (lead >= 0xE0 && lead <= 0xEF) { need = 2; if (lead == 0xE0) lo = 0xA0; if (lead == 0xED) hi = 0x9F; }
  else if (lead >= 0xF0 && lead <= 0xF4) { need = 3; if (lead == 0xF0) lo = 0x90; if (lead == 0xF4) hi = 0x8F; }
  else { bad_len = 1; return 0; }
  for (int k = 1; k <= need; ++k) {
    if (i + k >= s.size()) return -k;
    unsigned char c = b(k);
    bool ok = k == 1 ? (c >= lo && c <= hi) : (c >= 0x80 && c <= 0xBF);
    if (!ok) { bad_len = k; return 0; }
  }
  return need + 1;
}

}  // namespace

Category category(char32_t cp) { return static_cast<Category>(properties(cp) & 0x1F); }

bool is_whitespace(char32_t cp) {
  if (cp < 0x80) return (cp >= 9 && cp <= 13) || cp == 32;
  if (cp == 0x85) return true;
  Category c = category(cp);
  return c == Category::Zs || c == Category::Zl || c == Category::Zp;
}

char32_t decode_utf8(std::string_view s, size_t& i) {
  unsigned char lead = static_cast<unsigned char>(s[i]);
  if (lead < 0x80) { ++i; return lead; }
  size_t bad = 0;
  int len = sequence_at(s, i, bad);
  if (len <= 0) { ++i; return kReplacement; }
  char32_t cp = lead & (0x7F >> len);
  for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += static_cast<size_t>(len);
  return cp;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string to_valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t bad = 0;
    int len = sequence_at(s, i, bad);
    if (len > 0) {
      out.append(s.substr(i, static_cast<size_t>(len)));
      i += static_cast<size_t>(len);
    } else {
      append_utf8(out, kReplacement);
      i += len < 0 ? static_cast<size_t>(-len) : bad;
    }
  }
  return out;
}

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    size_t bad = 0;
    int len = sequence_at(s, i, bad);
    if (len <= 0) return false;
    i += static_cast<size_t>(len);
  }
  return true;
}

size_t complete_utf8_prefix(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    size_t bad = 0;
    int len = sequence_at(s, i, bad);
    if (len < 0) return i;
    i += len > 0 ? static_cast<size_t>(len) : bad;
  }
  return s.size();
}

std::string nfc(std::string_view text) { return normalize(text, true); }
std::string nfd(std::string_view text) { return normalize(text, false); }

}  // namespace endor::tok::unicode
