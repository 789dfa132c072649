// Added-token splitting, normalizers, pre-tokenizers, post-processors and decoders.
#include "pipeline.h"

#include <algorithm>

#include "endor/tokenizer.h"
#include "unicode.h"

namespace endor::tok {
namespace {

using nlohmann::json;

[[noreturn]] void unsupported(const std::string& source, const std::string& what, const std::string& type) {
  throw TokenizerError(source + ": " + what + " type '" + type + "' is not supported");
}

std::shared_ptr<const Regex> compile_regex(const std::string& pattern, const std::string& source) {
  try {
    return std::make_shared<const Regex>(pattern);
  } catch (const std::invalid_argument& e) {
    throw TokenizerError(source + ": " + e.what() + " in pattern " + json(pattern).dump());
  }
}

// A {"String": s} or {"Regex": r} pattern object: fills `literal` or returns a compiled regex.
std::shared_ptr<const Regex> parse_pattern(const json& p, std::string& literal, const std::string& source) {
  if (p.contains("Regex")) return compile_regex(p.at("Regex").get<std::string>(), source);
  if (p.contains("String")) {
    literal = p.at("String").get<std::string>();
    return nullptr;
  }
  throw TokenizerError(source + ": pattern " + p.dump() + " is neither {\"String\": ...} nor {\"Regex\": ...}");
}

// Non-overlapping occurrences of a literal (the regex crate's leftmost-first search of an
// escaped literal). An empty literal matches nothing.
std::vector<std::pair<size_t, size_t>> find_literal(std::string_view text, std::string_view literal) {
  std::vector<std::pair<size_t, size_t>> out;
  if (literal.empty()) return out;
  for (size_t pos = text.find(literal); pos != std::string_view::npos; pos = text.find(literal, pos + literal.size()))
    out.emplace_back(pos, pos + literal.size());
  return out;
}

std::string replace_matches(const std::string& s, const std::vector<std::pair<size_t, size_t>>& matches,
                            const std::string& content) {
  if (matches.empty()) return s;
  std::string out;
  size_t prev = 0;
  for (auto [b, e] : matches) {
    out.append(s, prev, b - prev);
    out += content;
    prev = e;
  }
  out.append(s, prev, std::string::npos);
  return out;
}

bool is_word_char(char32_t cp) {  // the regex crate's \w, without Other_Alphabetic symbols
  using unicode::Category;
  if (cp == 0x200C || cp == 0x200D) return true;
  unicode::CategoryMask m = unicode::bit(unicode::category(cp));
  return (m & (unicode::kLetter | unicode::kMark | unicode::bit(Category::Nd) | unicode::bit(Category::Nl) |
               unicode::bit(Category::Pc))) != 0;
}

char32_t last_char(std::string_view s) {
  size_t i = s.size();
  do --i; while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80);
  return unicode::decode_utf8(s, i);
}
char32_t first_char(std::string_view s) {
  size_t i = 0;
  return unicode::decode_utf8(s, i);
}
size_t leading_whitespace(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t j = i;
    if (!unicode::is_whitespace(unicode::decode_utf8(s, j))) break;
    i = j;
  }
  return i;
}
size_t trailing_whitespace_start(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t i = end;
    do --i; while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80);
    size_t j = i;
    if (!unicode::is_whitespace(unicode::decode_utf8(s, j))) break;
    end = i;
  }
  return end;
}

SplitBehavior parse_behavior(const std::string& b, const std::string& source) {
  if (b == "Removed") return SplitBehavior::Removed;
  if (b == "Isolated") return SplitBehavior::Isolated;
  if (b == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (b == "Contiguous") return SplitBehavior::Contiguous;
  unsupported(source, "split behavior", b);
}

struct Span { size_t begin, end; bool flag; };

// HF NormalizedString::split: matches (covering the text, flag = is a match) folded by the
// behavior into pieces; flag of the result = remove.
std::vector<Span> fold_behavior(std::vector<Span> m, SplitBehavior behavior) {
  std::vector<Span> out;
  switch (behavior) {
    case SplitBehavior::Isolated:
      for (auto& s : m) out.push_back({s.begin, s.end, false});
      return out;
    case SplitBehavior::Removed:
      return m;
    case SplitBehavior::Contiguous: {
      bool prev = false;
      for (auto& s : m) {
        if (s.flag == prev && !out.empty()) out.back().end = s.end;
        else out.push_back({s.begin, s.end, false});
        prev = s.flag;
      }
      return out;
    }
    case SplitBehavior::MergedWithPrevious: {
      bool prev = false;
      for (auto& s : m) {
        if (s.flag && !prev && !out.empty()) out.back().end = s.end;
        else out.push_back({s.begin, s.end, false});
        prev = s.flag;
      }
      return out;
    }
    case SplitBehavior::MergedWithNext: {
      bool prev = false;
      for (auto it = m.rbegin(); it != m.rend(); ++it) {
        if (it->flag && !prev && !out.empty()) out.back().begin = it->begin;
        else out.push_back({it->begin, it->end, false});
        prev = it->flag;
      }
      std::reverse(out.begin(), out.end());
      return out;
    }
  }
  return out;
}

// Splits each piece at `matches_of(piece)` with `behavior`; empty results are dropped.
template <typename MatchFn>
void split_pieces(std::vector<Segment>& pieces, SplitBehavior behavior, bool invert, MatchFn matches_of) {
  std::vector<Segment> out;
  out.reserve(pieces.size() * 2);
  for (Segment& piece : pieces) {
    const std::string& t = piece.text;
    if (t.empty()) continue;
    std::vector<Span> spans;
    size_t prev = 0;
    for (auto [b, e] : matches_of(t)) {
      if (prev != b) spans.push_back({prev, b, invert});
      spans.push_back({b, e, !invert});
      prev = e;
    }
    if (prev != t.size()) spans.push_back({prev, t.size(), invert});
    for (const Span& s : fold_behavior(std::move(spans), behavior)) {
      if (s.flag || s.end == s.begin) continue;
      out.push_back(Segment{t.substr(s.begin, s.end - s.begin), -1, piece.at_origin && s.begin == 0});
    }
  }
  pieces = std::move(out);
}

const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace

// ---- added tokens ---------------------------------------------------------------------------------
AddedTokenSplitter::AddedTokenSplitter(const std::vector<const AddedToken*>& tokens,
                                       const std::vector<std::string>& patterns)
    : tokens_(tokens) {
  nodes_.emplace_back();
  for (size_t t = 0; t < tokens.size(); ++t) {
    const std::string& p = patterns[t];
    if (p.empty()) continue;
    first_byte_[static_cast<unsigned char>(p[0])] = true;
    int32_t node = 0;
    for (unsigned char c : p) {
      auto& ch = nodes_[static_cast<size_t>(node)].children;
      auto it = std::find_if(ch.begin(), ch.end(), [c](const auto& e) { return e.first == c; });
      if (it != ch.end()) {
        node = it->second;
      } else {
        int32_t next = static_cast<int32_t>(nodes_.size());
        nodes_[static_cast<size_t>(node)].children.emplace_back(c, next);
        nodes_.emplace_back();
        node = next;
      }
    }
    if (nodes_[static_cast<size_t>(node)].token < 0) nodes_[static_cast<size_t>(node)].token = static_cast<int32_t>(t);
  }
}

void AddedTokenSplitter::split(const Segment& seg, std::vector<Segment>& out) const {
  const std::string& s = seg.text;
  if (s.empty()) return;
  size_t start_offset = 0;
  size_t pos = 0;
  while (pos < s.size()) {
    if (!first_byte_[static_cast<unsigned char>(s[pos])]) { ++pos; continue; }
    // Longest token starting at pos.
    int32_t node = 0, found = -1;
    size_t found_end = 0;
    for (size_t i = pos; i < s.size(); ++i) {
      const auto& ch = nodes_[static_cast<size_t>(node)].children;
      auto it = std::find_if(ch.begin(), ch.end(), [c = static_cast<unsigned char>(s[i])](const auto& e) { return e.first == c; });
      if (it == ch.end()) break;
      node = it->second;
      if (nodes_[static_cast<size_t>(node)].token >= 0) { found = nodes_[static_cast<size_t>(node)].token; found_end = i + 1; }
    }
    if (found < 0) { ++pos; continue; }
    const AddedToken& tok = *tokens_[static_cast<size_t>(found)];
    size_t start = pos, stop = found_end;
    pos = found_end;  // as HF's match iterator: a discarded match is not searched again
    if (tok.single_word) {
      bool start_ok = start == 0 || !is_word_char(last_char(std::string_view(s).substr(0, start)));
      bool stop_ok = stop == s.size() || !is_word_char(first_char(std::string_view(s).substr(stop)));
      if (!start_ok || !stop_ok) continue;
    }
    if (tok.lstrip) start = std::max(trailing_whitespace_start(std::string_view(s).substr(0, start)), start_offset);
    if (tok.rstrip) stop += leading_whitespace(std::string_view(s).substr(stop));
    if (start_offset < start)
      out.push_back(Segment{s.substr(start_offset, start - start_offset), -1, seg.at_origin && start_offset == 0});
    out.push_back(Segment{s.substr(start, stop - start), tok.id, false});
    start_offset = stop;
    pos = std::max(pos, stop);
  }
  if (start_offset < s.size())
    out.push_back(Segment{s.substr(start_offset), -1, seg.at_origin && start_offset == 0});
}

// ---- normalizers ------------------------------------------------------------------------------------
Normalizer Normalizer::from_json(const json& j, const std::string& source) {
  std::string type = j.at("type").get<std::string>();
  Normalizer n{Kind::Sequence, {}, {}, {}, nullptr, false, false};
  if (type == "Sequence") {
    for (const json& c : j.at("normalizers")) n.children.push_back(from_json(c, source));
  } else if (type == "Prepend") {
    n.kind = Kind::Prepend;
    n.text = j.at("prepend").get<std::string>();
  } else if (type == "Replace") {
    n.kind = Kind::Replace;
    n.regex = parse_pattern(j.at("pattern"), n.text, source);
    n.content = j.at("content").get<std::string>();
  } else if (type == "NFC") {
    n.kind = Kind::Nfc;
  } else if (type == "NFD") {
    n.kind = Kind::Nfd;
  } else if (type == "Strip") {
    n.kind = Kind::Strip;
    n.strip_left = j.value("strip_left", true);
    n.strip_right = j.value("strip_right", true);
  } else if (type == "ByteLevel") {
    n.kind = Kind::ByteLevel;
  } else {
    unsupported(source, "normalizer", type);
  }
  return n;
}

std::string Normalizer::apply(std::string s) const {
  switch (kind) {
    case Kind::Sequence:
      for (const Normalizer& c : children) s = c.apply(std::move(s));
      return s;
    case Kind::Prepend:
      return s.empty() ? s : text + s;
    case Kind::Replace:
      return replace_matches(s, regex ? regex->find_all(s) : find_literal(s, text), content);
    case Kind::Nfc: return unicode::nfc(s);
    case Kind::Nfd: return unicode::nfd(s);
    case Kind::Strip: {
      size_t b = strip_left ? leading_whitespace(s) : 0;
      size_t e = strip_right ? trailing_whitespace_start(s) : s.size();
      return e > b ? s.substr(b, e - b) : std::string();
    }
    case Kind::ByteLevel: {
      const auto& alphabet = ByteLevelAlphabet::get();
      std::string out;
      for (unsigned char c : s) out += alphabet.byte_to_utf8[c];
      return out;
    }
  }
  return s;
}

// ---- byte-level alphabet ------------------------------------------------------------------------------
namespace {
bool byte_maps_to_itself(unsigned b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174); }
}  // namespace

const ByteLevelAlphabet& ByteLevelAlphabet::get() {
  static const ByteLevelAlphabet alphabet = [] {
    ByteLevelAlphabet a;
    unsigned n = 0;
    for (unsigned b = 0; b < 256; ++b) {
      char32_t cp = byte_maps_to_itself(b) ? b : 256 + n++;
      unicode::append_utf8(a.byte_to_utf8[b], cp);
    }
    return a;
  }();
  return alphabet;
}

int ByteLevelAlphabet::byte_of(char32_t cp) {
  if (cp < 256) return byte_maps_to_itself(cp) ? static_cast<int>(cp) : -1;
  // U+0100 + n is the n-th byte that does not map to itself: 0..32, 127..160, 173.
  unsigned n = cp - 256;
  if (n < 33) return static_cast<int>(n);
  if (n < 67) return static_cast<int>(127 + (n - 33));
  if (n == 67) return 173;
  return -1;
}

// ---- pre-tokenizers -------------------------------------------------------------------------------------
PreTokenizer PreTokenizer::byte_level(bool add_prefix_space, bool use_regex) {
  PreTokenizer p{Kind::ByteLevel, {}, nullptr, {}};
  p.add_prefix_space = add_prefix_space;
  p.use_regex = use_regex;
  if (use_regex) p.regex = std::make_shared<const Regex>(kGpt2Pattern);
  return p;
}

PreTokenizer PreTokenizer::from_json(const json& j, const std::string& source) {
  std::string type = j.at("type").get<std::string>();
  PreTokenizer p{Kind::Sequence, {}, nullptr, {}};
  if (type == "Sequence") {
    for (const json& c : j.at("pretokenizers")) p.children.push_back(from_json(c, source));
  } else if (type == "Split") {
    p.kind = Kind::Split;
    p.regex = parse_pattern(j.at("pattern"), p.literal, source);
    p.behavior = parse_behavior(j.at("behavior").get<std::string>(), source);
    p.invert = j.value("invert", false);
  } else if (type == "ByteLevel") {
    p = byte_level(j.value("add_prefix_space", true), j.value("use_regex", true));
  } else if (type == "Metaspace") {
    p.kind = Kind::Metaspace;
    p.literal = j.value("replacement", std::string("\xE2\x96\x81"));
    if (unicode::utf8_length(static_cast<unsigned char>(p.literal.empty() ? 0 : p.literal[0])) != p.literal.size())
      throw TokenizerError(source + ": Metaspace replacement must be one character");
    std::string scheme = j.contains("prepend_scheme") ? j.at("prepend_scheme").get<std::string>()
                                                      : (j.value("add_prefix_space", true) ? "always" : "never");
    if (scheme == "always") p.prepend = Prepend::Always;
    else if (scheme == "first") p.prepend = Prepend::First;
    else if (scheme == "never") p.prepend = Prepend::Never;
    else unsupported(source, "Metaspace prepend_scheme", scheme);
    p.split = j.value("split", true);
  } else if (type == "Digits") {
    p.kind = Kind::Digits;
    p.individual_digits = j.value("individual_digits", false);
  } else if (type == "WhitespaceSplit") {
    p.kind = Kind::WhitespaceSplit;
  } else if (type == "Whitespace") {
    p.kind = Kind::Whitespace;
    p.regex = std::make_shared<const Regex>(R"(\w+|[^\w\s]+)");
  } else {
    unsupported(source, "pre-tokenizer", type);
  }
  return p;
}

void PreTokenizer::apply(std::vector<Segment>& pieces) const {
  switch (kind) {
    case Kind::Sequence:
      for (const PreTokenizer& c : children) c.apply(pieces);
      return;
    case Kind::Split:
      split_pieces(pieces, behavior, invert, [&](const std::string& t) {
        return regex ? regex->find_all(t) : find_literal(t, literal);
      });
      return;
    case Kind::ByteLevel: {
      if (add_prefix_space)
        for (Segment& p : pieces)
          if (p.text.empty() || p.text[0] != ' ') p.text.insert(0, 1, ' ');
      if (use_regex)
        split_pieces(pieces, SplitBehavior::Isolated, false, [&](const std::string& t) { return regex->find_all(t); });
      const auto& alphabet = ByteLevelAlphabet::get();
      for (Segment& p : pieces) {
        std::string mapped;
        mapped.reserve(p.text.size() * 2);
        for (unsigned char c : p.text) mapped += alphabet.byte_to_utf8[c];
        p.text = std::move(mapped);
      }
      return;
    }
    case Kind::Metaspace: {
      for (Segment& p : pieces) {
        p.text = replace_matches(p.text, find_literal(p.text, " "), literal);
        bool starts = p.text.compare(0, literal.size(), literal) == 0;
        if (!starts && (prepend == Prepend::Always || (prepend == Prepend::First && p.at_origin)))
          p.text.insert(0, literal);
      }
      if (split)
        split_pieces(pieces, SplitBehavior::MergedWithNext, false,
                     [&](const std::string& t) { return find_literal(t, literal); });
      return;
    }
    case Kind::Digits:
      split_pieces(pieces, individual_digits ? SplitBehavior::Isolated : SplitBehavior::Contiguous, false,
                   [](const std::string& t) {
                     std::vector<std::pair<size_t, size_t>> m;
                     for (size_t i = 0; i < t.size(); ++i)
                       if (t[i] >= '0' && t[i] <= '9') m.emplace_back(i, i + 1);
                     return m;
                   });
      return;
    case Kind::WhitespaceSplit:
      split_pieces(pieces, SplitBehavior::Removed, false, [](const std::string& t) {
        std::vector<std::pair<size_t, size_t>> m;
        for (size_t i = 0; i < t.size();) {
          size_t j = i;
          if (unicode::is_whitespace(unicode::decode_utf8(t, j))) m.emplace_back(i, j);
          i = j;
        }
        return m;
      });
      return;
    case Kind::Whitespace:
      split_pieces(pieces, SplitBehavior::Removed, true, [&](const std::string& t) { return regex->find_all(t); });
      return;
  }
}

// ---- post-processors ------------------------------------------------------------------------------------------
PostProcessor PostProcessor::from_json(const json& j, const std::string& source) {
  PostProcessor pp;
  std::string type = j.at("type").get<std::string>();
  if (type == "ByteLevel") return pp;
  if (type == "Sequence") {
    for (const json& c : j.at("processors")) {
      PostProcessor inner = from_json(c, source);
      pp.prefix.insert(pp.prefix.begin(), inner.prefix.begin(), inner.prefix.end());
      pp.suffix.insert(pp.suffix.end(), inner.suffix.begin(), inner.suffix.end());
    }
    return pp;
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    pp.prefix.push_back(j.at("cls").at(1).get<int32_t>());
    pp.suffix.push_back(j.at("sep").at(1).get<int32_t>());
    return pp;
  }
  if (type == "TemplateProcessing") {
    const json& specials = j.at("special_tokens");
    bool seen_sequence = false;
    for (const json& item : j.at("single")) {
      if (item.contains("Sequence")) {
        if (seen_sequence) throw TokenizerError(source + ": TemplateProcessing 'single' uses the sequence twice");
        seen_sequence = true;
        continue;
      }
      std::string name = item.at("SpecialToken").at("id").get<std::string>();
      if (!specials.contains(name))
        throw TokenizerError(source + ": TemplateProcessing refers to special token '" + name + "' it does not define");
      auto& dst = seen_sequence ? pp.suffix : pp.prefix;
      for (const json& id : specials.at(name).at("ids")) dst.push_back(id.get<int32_t>());
    }
    if (!seen_sequence) throw TokenizerError(source + ": TemplateProcessing 'single' has no $A sequence");
    return pp;
  }
  unsupported(source, "post-processor", type);
}

// ---- decoders ------------------------------------------------------------------------------------------------
Decoder Decoder::from_json(const json& j, const std::string& source) {
  std::string type = j.at("type").get<std::string>();
  Decoder d{Kind::Sequence, {}, {}, {}, nullptr};
  if (type == "Sequence") {
    for (const json& c : j.at("decoders")) d.children.push_back(from_json(c, source));
  } else if (type == "ByteLevel") {
    d.kind = Kind::ByteLevel;
  } else if (type == "Replace") {
    d.kind = Kind::Replace;
    d.regex = parse_pattern(j.at("pattern"), d.pattern, source);
    d.content = j.at("content").get<std::string>();
  } else if (type == "ByteFallback") {
    d.kind = Kind::ByteFallback;
  } else if (type == "Fuse") {
    d.kind = Kind::Fuse;
  } else if (type == "Strip") {
    d.kind = Kind::Strip;
    d.content = j.at("content").get<std::string>();
    d.strip_start = j.value("start", size_t{0});
    d.strip_stop = j.value("stop", size_t{0});
  } else if (type == "Metaspace") {
    d.kind = Kind::Metaspace;
    d.content = j.value("replacement", std::string("\xE2\x96\x81"));
    std::string scheme = j.contains("prepend_scheme") ? j.at("prepend_scheme").get<std::string>()
                                                      : (j.value("add_prefix_space", true) ? "always" : "never");
    d.metaspace_prepend = scheme != "never";
  } else if (type == "BPEDecoder") {
    d.kind = Kind::BpeSuffix;
    d.content = j.value("suffix", std::string("</w>"));
  } else {
    unsupported(source, "decoder", type);
  }
  return d;
}

void Decoder::apply(std::vector<std::string>& tokens, bool open_end) const {
  switch (kind) {
    case Kind::Sequence:
      for (const Decoder& c : children) c.apply(tokens, open_end);
      return;
    case Kind::ByteLevel: {
      std::string bytes;
      for (const std::string& t : tokens) {
        size_t mark = bytes.size();
        bool all = true;
        for (size_t i = 0; i < t.size() && all;) {
          int b = ByteLevelAlphabet::byte_of(unicode::decode_utf8(t, i));
          if (b < 0) all = false;
          else bytes += static_cast<char>(b);
        }
        if (!all) {
          bytes.resize(mark);
          bytes += t;
        }
      }
      tokens.assign(1, std::move(bytes));
      return;
    }
    case Kind::Replace:
      for (std::string& t : tokens) {
        if (regex) {
          std::string valid = unicode::to_valid_utf8(t);
          try {
            t = replace_matches(valid, regex->find_all(valid), content);
          } catch (const Regex::BudgetExceeded&) {
            throw TokenizerError("tokenizer decoder: a Replace pattern backtracks without bound on this text");
          }
        } else {
          t = replace_matches(t, find_literal(t, pattern), content);
        }
      }
      return;
    case Kind::ByteFallback: {
      std::vector<std::string> out;
      std::string run;  // consecutive <0xXX> bytes
      auto flush_run = [&](bool at_end) {
        if (run.empty()) return;
        size_t complete = unicode::complete_utf8_prefix(run);
        bool valid_prefix = unicode::is_valid_utf8(std::string_view(run).substr(0, complete));
        if (valid_prefix && (complete == run.size() || (at_end && open_end))) {
          out.push_back(run);
        } else {
          for (size_t k = 0; k < run.size(); ++k) out.push_back("\xEF\xBF\xBD");
        }
        run.clear();
      };
      auto hex = [](char c) { return (c >= '0' && c <= '9') ? c - '0' : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1; };
      for (std::string& t : tokens) {
        if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && hex(t[3]) >= 0 && hex(t[4]) >= 0) {
          run += static_cast<char>(hex(t[3]) * 16 + hex(t[4]));
        } else {
          flush_run(false);
          out.push_back(std::move(t));
        }
      }
      flush_run(true);
      tokens = std::move(out);
      return;
    }
    case Kind::Fuse: {
      std::string all;
      for (const std::string& t : tokens) all += t;
      tokens.assign(1, std::move(all));
      return;
    }
    case Kind::Strip:
      for (std::string& t : tokens) {
        size_t b = 0, e = t.size();
        for (size_t k = 0; k < strip_start && !content.empty() && t.compare(b, content.size(), content) == 0; ++k)
          b += content.size();
        for (size_t k = 0; k < strip_stop && !content.empty() && e >= b + content.size() &&
                           t.compare(e - content.size(), content.size(), content) == 0; ++k)
          e -= content.size();
        t = t.substr(b, e - b);
      }
      return;
    case Kind::Metaspace:
      for (size_t i = 0; i < tokens.size(); ++i)
        tokens[i] = replace_matches(tokens[i], find_literal(tokens[i], content),
                                    (i == 0 && metaspace_prepend) ? "" : " ");
      return;
    case Kind::BpeSuffix:
      for (size_t i = 0; i < tokens.size(); ++i)
        tokens[i] = replace_matches(tokens[i], find_literal(tokens[i], content), i + 1 == tokens.size() ? "" : " ");
      return;
  }
}

}  // namespace endor::tok
