// Parser, compiler (to a small backtracking program) and matcher of the split-pattern regexes.
#include "regex.h"

#include <cctype>

namespace endor::tok {

using unicode::Category;
using unicode::CategoryMask;

struct Regex::Node {
  enum class Kind { Empty, Class, Seq, Alt, Repeat, Look } kind = Kind::Empty;
  uint32_t cls = 0;
  std::vector<Node> kids;
  uint32_t min = 1, max = 1;
  bool greedy = true;  // Repeat
  bool negate = false;  // Look
};

namespace {

[[noreturn]] void unsupported(const std::string& what) {
  throw std::invalid_argument("unsupported regex syntax: " + what);
}

std::string canonical_property(std::string name) {
  std::string out;
  for (char c : name)
    if (c != '_' && c != ' ' && c != '-') out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

CategoryMask category_mask(const std::string& raw) {
  using unicode::bit;
  struct Entry { const char* name; CategoryMask mask; };
  const CategoryMask punct = bit(Category::Pc) | bit(Category::Pd) | bit(Category::Ps) | bit(Category::Pe) |
                             bit(Category::Pi) | bit(Category::Pf) | bit(Category::Po);
  const CategoryMask symbol = bit(Category::Sm) | bit(Category::Sc) | bit(Category::Sk) | bit(Category::So);
  const CategoryMask separator = bit(Category::Zs) | bit(Category::Zl) | bit(Category::Zp);
  const CategoryMask other = bit(Category::Cc) | bit(Category::Cf) | bit(Category::Cs) | bit(Category::Co) |
                             bit(Category::Cn);
  const Entry table[] = {
      {"l", unicode::kLetter}, {"letter", unicode::kLetter}, {"lu", bit(Category::Lu)},
      {"uppercaseletter", bit(Category::Lu)}, {"ll", bit(Category::Ll)}, {"lowercaseletter", bit(Category::Ll)},
      {"lt", bit(Category::Lt)}, {"titlecaseletter", bit(Category::Lt)}, {"lm", bit(Category::Lm)},
      {"modifierletter", bit(Category::Lm)}, {"lo", bit(Category::Lo)}, {"otherletter", bit(Category::Lo)},
      {"m", unicode::kMark}, {"mark", unicode::kMark}, {"combiningmark", unicode::kMark},
      {"mn", bit(Category::Mn)}, {"nonspacingmark", bit(Category::Mn)}, {"mc", bit(Category::Mc)},
      {"spacingmark", bit(Category::Mc)}, {"me", bit(Category::Me)}, {"enclosingmark", bit(Category::Me)},
      {"n", unicode::kNumber}, {"number", unicode::kNumber}, {"nd", bit(Category::Nd)},
      {"decimalnumber", bit(Category::Nd)}, {"nl", bit(Category::Nl)}, {"letternumber", bit(Category::Nl)},
      {"no", bit(Category::No)}, {"othernumber", bit(Category::No)}, {"p", punct}, {"punctuation", punct},
      {"pc", bit(Category::Pc)}, {"connectorpunctuation", bit(Category::Pc)}, {"pd", bit(Category::Pd)},
      {"dashpunctuation", bit(Category::Pd)}, {"ps", bit(Category::Ps)}, {"openpunctuation", bit(Category::Ps)},
      {"pe", bit(Category::Pe)}, {"closepunctuation", bit(Category::Pe)}, {"pi", bit(Category::Pi)},
      {"initialpunctuation", bit(Category::Pi)}, {"pf", bit(Category::Pf)}, {"finalpunctuation", bit(Category::Pf)},
      {"po", bit(Category::Po)}, {"otherpunctuation", bit(Category::Po)}, {"s", symbol}, {"symbol", symbol},
      {"sm", bit(Category::Sm)}, {"mathsymbol", bit(Category::Sm)}, {"sc", bit(Category::Sc)},
      {"currencysymbol", bit(Category::Sc)}, {"sk", bit(Category::Sk)}, {"modifiersymbol", bit(Category::Sk)},
      {"so", bit(Category::So)}, {"othersymbol", bit(Category::So)}, {"z", separator}, {"separator", separator},
      {"zs", bit(Category::Zs)}, {"spaceseparator", bit(Category::Zs)}, {"zl", bit(Category::Zl)},
      {"lineseparator", bit(Category::Zl)}, {"zp", bit(Category::Zp)}, {"paragraphseparator", bit(Category::Zp)},
      {"c", other}, {"other", other}, {"cc", bit(Category::Cc)}, {"control", bit(Category::Cc)},
      {"cf", bit(Category::Cf)}, {"format", bit(Category::Cf)}, {"cs", bit(Category::Cs)},
      {"surrogate", bit(Category::Cs)}, {"co", bit(Category::Co)}, {"privateuse", bit(Category::Co)},
      {"cn", bit(Category::Cn)}, {"unassigned", bit(Category::Cn)},
  };
  std::string name = canonical_property(raw);
  for (const Entry& e : table)
    if (name == e.name) return e.mask;
  unsupported("unknown property \\p{" + raw + "}");
}

constexpr CategoryMask kWordMask = unicode::kLetter | unicode::kMark | unicode::bit(Category::Nd) |
                                   unicode::bit(Category::Pc);

}  // namespace

// ---- character classes ------------------------------------------------------------------
bool Regex::CharClass::contains_slow(char32_t cp) const {
  bool in = false;
  CategoryMask cat = 0;
  bool have_cat = false;
  for (const Item& it : items) {
    bool m = false;
    switch (it.kind) {
      case Kind::Range: m = cp >= it.lo && cp <= it.hi; break;
      case Kind::Categories:
        if (!have_cat) { cat = unicode::bit(unicode::category(cp)); have_cat = true; }
        m = (cat & it.mask) != 0;
        break;
      case Kind::Whitespace: m = unicode::is_whitespace(cp); break;
    }
    if (m != it.negated) { in = true; break; }
  }
  return in != negated;
}

void Regex::CharClass::finalize() {
  ascii[0] = ascii[1] = 0;
  for (char32_t c = 0; c < 128; ++c)
    if (contains_slow(c)) ascii[c >> 6] |= uint64_t{1} << (c & 63);
}

bool Regex::CharClass::contains(char32_t cp) const {
  if (cp < 128) return (ascii[cp >> 6] >> (cp & 63)) & 1;
  return contains_slow(cp);
}

// ---- parser -------------------------------------------------------------------------------
class Regex::Parser {
 public:
  Parser(std::string_view pattern, std::vector<CharClass>& classes) : p_(pattern), classes_(classes) {}

  Node parse() {
    Node n = parse_alt();
    if (i_ < p_.size()) unsupported("unbalanced ')' at offset " + std::to_string(i_));
    return n;
  }

 private:
  // An escape is either a class item (\p{L}, \s...) or a literal code point.
  struct Escape { bool is_item; CharClass::Item item; char32_t literal; };

  bool at_end() const { return i_ >= p_.size(); }
  char peek() const { return at_end() ? '\0' : p_[i_]; }
  char32_t next_cp() {
    if (at_end()) unsupported("pattern ends unexpectedly");
    return unicode::decode_utf8(p_, i_);
  }
  void expect(char c, const char* what) {
    if (peek() != c) unsupported(std::string("expected '") + c + "' " + what);
    ++i_;
  }

  uint32_t add_class(CharClass c) {
    c.finalize();
    classes_.push_back(std::move(c));
    return static_cast<uint32_t>(classes_.size() - 1);
  }
  static CharClass::Item range(char32_t lo, char32_t hi) {
    return {CharClass::Kind::Range, false, lo, hi, 0};
  }
  // Case-insensitive (?i) as Oniguruma applies Unicode simple case folding; only ASCII
  // letters are supported (plus the two non-ASCII letters that fold to ASCII: ſ and K).
  void add_case_variants(CharClass& c, char32_t lo, char32_t hi) {
    if (!icase_) return;
    if (hi >= 0x80) unsupported("case-insensitive matching beyond ASCII");
    for (char32_t ch = lo; ch <= hi; ++ch) {
      if (ch >= 'a' && ch <= 'z') c.items.push_back(range(ch - 32, ch - 32));
      if (ch >= 'A' && ch <= 'Z') c.items.push_back(range(ch + 32, ch + 32));
      if (ch == 's' || ch == 'S') c.items.push_back(range(0x17F, 0x17F));
      if (ch == 'k' || ch == 'K') c.items.push_back(range(0x212A, 0x212A));
    }
  }
  Node class_node(CharClass c) {
    Node n;
    n.kind = Node::Kind::Class;
    n.cls = add_class(std::move(c));
    return n;
  }
  Node literal(char32_t cp) {
    CharClass c;
    c.items.push_back(range(cp, cp));
    if (icase_ && cp >= 0x80) {
      Category cat = unicode::category(cp);
      if (cat == Category::Lu || cat == Category::Ll || cat == Category::Lt)
        unsupported("case-insensitive matching beyond ASCII");
    } else {
      add_case_variants(c, cp, cp);
    }
    return class_node(std::move(c));
  }

  uint32_t parse_hex(size_t max_digits, bool braced) {
    uint32_t v = 0;
    size_t n = 0;
    while (!at_end() && n < max_digits && std::isxdigit(static_cast<unsigned char>(peek()))) {
      char c = p_[i_++];
      v = v * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : (std::tolower(c) - 'a' + 10));
      if (v > 0x10FFFF) unsupported("code point out of range");
      ++n;
    }
    if (n == 0) unsupported("bad hexadecimal escape");
    if (braced) expect('}', "after \\x{...");
    return v;
  }

  Escape parse_escape() {
    char32_t c = next_cp();
    auto item = [](CharClass::Kind k, bool neg, CategoryMask m) {
      return Escape{true, CharClass::Item{k, neg, 0, 0, m}, 0};
    };
    auto lit = [](char32_t v) { return Escape{false, {}, v}; };
    switch (c) {
      case 'p': case 'P': {
        bool neg = c == 'P';
        std::string name;
        if (peek() == '{') {
          ++i_;
          if (peek() == '^') { neg = !neg; ++i_; }
          while (!at_end() && peek() != '}') name += p_[i_++];
          expect('}', "after \\p{...");
        } else {
          name = std::string(1, static_cast<char>(next_cp()));
        }
        return item(CharClass::Kind::Categories, neg, category_mask(name));
      }
      case 's': return item(CharClass::Kind::Whitespace, false, 0);
      case 'S': return item(CharClass::Kind::Whitespace, true, 0);
      case 'd': return item(CharClass::Kind::Categories, false, unicode::bit(Category::Nd));
      case 'D': return item(CharClass::Kind::Categories, true, unicode::bit(Category::Nd));
      case 'w': return item(CharClass::Kind::Categories, false, kWordMask);
      case 'W': return item(CharClass::Kind::Categories, true, kWordMask);
      case 'n': return lit('\n');
      case 'r': return lit('\r');
      case 't': return lit('\t');
      case 'f': return lit('\f');
      case 'v': return lit('\v');
      case 'a': return lit('\a');
      case 'e': return lit(0x1B);
      case '0': return lit(0);
      case 'x':
        if (peek() == '{') { ++i_; return lit(parse_hex(8, true)); }
        return lit(parse_hex(2, false));
      case 'u': return lit(parse_hex(4, false));
      default: break;
    }
    if (c < 0x80 && std::isalnum(static_cast<int>(c)))
      unsupported(std::string("escape \\") + static_cast<char>(c));
    return lit(c);
  }

  Node parse_class() {  // after '['
    CharClass c;
    if (peek() == '^') { c.negated = true; ++i_; }
    bool first = true;
    while (true) {
      if (at_end()) unsupported("unterminated character class");
      if (peek() == ']' && !first) { ++i_; break; }
      first = false;
      if (peek() == '[') unsupported("nested character class or POSIX bracket");
      if (p_.substr(i_, 2) == "&&") unsupported("class intersection &&");
      char32_t lo;
      if (peek() == '\\') {
        ++i_;
        Escape e = parse_escape();
        if (e.is_item) { c.items.push_back(e.item); continue; }
        lo = e.literal;
      } else {
        lo = next_cp();
      }
      char32_t hi = lo;
      if (peek() == '-' && i_ + 1 < p_.size() && p_[i_ + 1] != ']') {
        ++i_;
        if (peek() == '\\') {
          ++i_;
          Escape e = parse_escape();
          if (e.is_item) unsupported("class escape as a range end");
          hi = e.literal;
        } else {
          hi = next_cp();
        }
        if (hi < lo) unsupported("empty range in character class");
      }
      c.items.push_back(range(lo, hi));
      add_case_variants(c, lo, hi);
    }
    return class_node(std::move(c));
  }

  Node parse_group() {  // after '('
    if (++depth_ > kMaxDepth) unsupported("groups nested deeper than " + std::to_string(kMaxDepth));
    bool saved_icase = icase_;
    Node result;
    if (peek() == '?') {
      ++i_;
      char k = peek();
      if (k == ':') {
        ++i_;
        result = parse_alt();
      } else if (k == '=' || k == '!') {
        ++i_;
        result.kind = Node::Kind::Look;
        result.negate = k == '!';
        result.kids.push_back(parse_alt());
      } else if (k == '<' || k == '>' || k == '#' || k == '~' || k == '(') {
        unsupported(std::string("group (?") + k);
      } else {
        bool on = true;
        while (!at_end() && peek() != ':' && peek() != ')') {
          char f = p_[i_++];
          if (f == '-') on = false;
          else if (f == 'i') icase_ = on;
          else unsupported(std::string("flag (?") + f);
        }
        if (peek() == ')') {  // (?i): applies to the rest of the enclosing group
          ++i_;
          --depth_;
          return Node{};
        }
        ++i_;  // ':'
        result = parse_alt();
      }
    } else {
      result = parse_alt();  // capturing group: only the overall match matters
    }
    expect(')', "to close a group");
    icase_ = saved_icase;
    --depth_;
    return result;
  }

  Node parse_atom() {
    char c = peek();
    switch (c) {
      case '(': ++i_; return parse_group();
      case '[': ++i_; return parse_class();
      case '.': {
        ++i_;
        CharClass any;
        any.negated = true;
        any.items.push_back(range('\n', '\n'));
        return class_node(std::move(any));
      }
      case '\\': {
        ++i_;
        Escape e = parse_escape();
        if (!e.is_item) return literal(e.literal);
        CharClass cls;
        cls.items.push_back(e.item);
        return class_node(std::move(cls));
      }
      case '^': case '$': unsupported(std::string("anchor ") + c);
      case '*': case '+': case '?': unsupported(std::string("nothing to repeat before ") + c);
      default: return literal(next_cp());
    }
  }

  // Reads a quantifier at i_ into node (min, max, greedy); false when there is none.
  bool parse_quantifier(uint32_t& min, uint32_t& max) {
    char c = peek();
    if (c == '*') { min = 0; max = kUnbounded; ++i_; return true; }
    if (c == '+') { min = 1; max = kUnbounded; ++i_; return true; }
    if (c == '?') { min = 0; max = 1; ++i_; return true; }
    if (c != '{') return false;
    size_t j = i_ + 1;
    auto number = [&](uint32_t& v) {
      size_t start = j;
      v = 0;
      while (j < p_.size() && std::isdigit(static_cast<unsigned char>(p_[j])) && j - start < 6) v = v * 10 + (p_[j++] - '0');
      return j > start;
    };
    uint32_t lo = 0, hi = 0;
    bool has_lo = number(lo), has_hi = false;
    if (j < p_.size() && p_[j] == ',') {
      ++j;
      has_hi = number(hi);
      if (!has_hi) hi = kUnbounded;
      if (!has_lo && !has_hi) return false;
    } else {
      if (!has_lo) return false;
      hi = lo;
    }
    if (j >= p_.size() || p_[j] != '}') return false;  // not a quantifier: '{' is literal
    if (hi < lo) unsupported("quantifier {n,m} with m < n");
    min = lo;
    max = hi;
    i_ = j + 1;
    return true;
  }

  Node parse_seq() {
    Node seq;
    seq.kind = Node::Kind::Seq;
    while (!at_end() && peek() != '|' && peek() != ')') {
      bool brace_literal = peek() == '{';
      Node atom = brace_literal ? literal(static_cast<char32_t>(p_[i_++])) : parse_atom();
      uint32_t min, max;
      if (parse_quantifier(min, max)) {
        if (atom.kind == Node::Kind::Empty || atom.kind == Node::Kind::Look) unsupported("quantified flag group or lookahead");
        bool greedy = true;
        if (peek() == '?') { greedy = false; ++i_; }
        else if (peek() == '+') unsupported("possessive quantifier");
        Node rep;
        rep.kind = Node::Kind::Repeat;
        rep.min = min;
        rep.max = max;
        rep.greedy = greedy;
        rep.kids.push_back(std::move(atom));
        seq.kids.push_back(std::move(rep));
      } else if (atom.kind != Node::Kind::Empty) {
        seq.kids.push_back(std::move(atom));
      }
    }
    if (seq.kids.size() == 1) return std::move(seq.kids[0]);
    return seq;
  }

  Node parse_alt() {
    Node alt;
    alt.kind = Node::Kind::Alt;
    alt.kids.push_back(parse_seq());
    while (peek() == '|') {
      ++i_;
      alt.kids.push_back(parse_seq());
    }
    if (alt.kids.size() == 1) return std::move(alt.kids[0]);
    return alt;
  }

  static constexpr int kMaxDepth = 100;
  std::string_view p_;
  size_t i_ = 0;
  int depth_ = 0;
  bool icase_ = false;
  std::vector<CharClass>& classes_;
};

// ---- compiler -----------------------------------------------------------------------------

Regex::Regex(std::string_view pattern) {
  Node root = Parser(pattern, classes_).parse();
  std::vector<std::pair<uint32_t, const Node*>> lookaheads;
  compile(root, lookaheads);
}

uint32_t Regex::compile(const Node& root, std::vector<std::pair<uint32_t, const Node*>>& lookaheads) {
  uint32_t start = static_cast<uint32_t>(program_.size());
  emit_node(root, lookaheads);
  program_.push_back(Inst{Op::Match, false, 0, 0, 0, 0, 0});
  // Lookahead bodies are separate programs after the main one, each ending in Match.
  for (size_t k = 0; k < lookaheads.size(); ++k) {
    auto [inst, body] = lookaheads[k];
    program_[inst].x = static_cast<uint32_t>(program_.size());
    emit_node(*body, lookaheads);
    program_.push_back(Inst{Op::Match, false, 0, 0, 0, 0, 0});
  }
  return start;
}

namespace {
bool can_match_empty(const Regex::Node& n);
}

void Regex::emit_node(const Node& n, std::vector<std::pair<uint32_t, const Node*>>& lookaheads) {
  if (program_.size() > 100000) unsupported("pattern compiles to more than 100000 instructions");
  auto pc = [&] { return static_cast<uint32_t>(program_.size()); };
  auto emit = [&](Inst in) { program_.push_back(in); return pc() - 1; };
  switch (n.kind) {
    case Node::Kind::Empty: return;
    case Node::Kind::Class: emit(Inst{Op::Class, false, n.cls, 0, 0, 0, 0}); return;
    case Node::Kind::Seq:
      for (const Node& k : n.kids) emit_node(k, lookaheads);
      return;
    case Node::Kind::Alt: {
      std::vector<uint32_t> jumps;
      for (size_t k = 0; k < n.kids.size(); ++k) {
        if (k + 1 < n.kids.size()) {
          uint32_t split = emit(Inst{Op::Split, false, 0, pc() + 1, 0, 0, 0});
          emit_node(n.kids[k], lookaheads);
          jumps.push_back(emit(Inst{Op::Jump, false, 0, 0, 0, 0, 0}));
          program_[split].y = pc();
        } else {
          emit_node(n.kids[k], lookaheads);
        }
      }
      for (uint32_t j : jumps) program_[j].x = pc();
      return;
    }
    case Node::Kind::Look: {
      uint32_t at = emit(Inst{Op::Look, n.negate, 0, 0, 0, 0, 0});
      lookaheads.emplace_back(at, &n.kids[0]);
      return;
    }
    case Node::Kind::Repeat: {
      const Node& body = n.kids[0];
      if (body.kind == Node::Kind::Class) {
        emit(Inst{Op::ClassRepeat, n.greedy, body.cls, 0, 0, n.min, n.max});
        return;
      }
      uint32_t optional = n.max == kUnbounded ? 0 : n.max - n.min;
      if (n.min > 256 || optional > 256) unsupported("repeat count above 256 of a group");
      for (uint32_t k = 0; k < n.min; ++k) emit_node(body, lookaheads);
      if (n.max == kUnbounded) {
        if (can_match_empty(body)) unsupported("unbounded repeat of an expression that can match empty");
        uint32_t loop = emit(Inst{Op::Split, false, 0, 0, 0, 0, 0});
        emit_node(body, lookaheads);
        emit(Inst{Op::Jump, false, 0, loop, 0, 0, 0});
        program_[loop].x = n.greedy ? loop + 1 : pc();
        program_[loop].y = n.greedy ? pc() : loop + 1;
        return;
      }
      std::vector<uint32_t> splits;
      for (uint32_t k = 0; k < optional; ++k) {
        splits.push_back(emit(Inst{Op::Split, false, 0, 0, 0, 0, 0}));
        emit_node(body, lookaheads);
      }
      for (uint32_t s : splits) {
        program_[s].x = n.greedy ? s + 1 : pc();
        program_[s].y = n.greedy ? pc() : s + 1;
      }
      return;
    }
  }
}

namespace {
bool can_match_empty(const Regex::Node& n) {
  using K = Regex::Node::Kind;
  switch (n.kind) {
    case K::Empty: case K::Look: return true;
    case K::Class: return false;
    case K::Seq:
      for (const auto& k : n.kids)
        if (!can_match_empty(k)) return false;
      return true;
    case K::Alt:
      for (const auto& k : n.kids)
        if (can_match_empty(k)) return true;
      return false;
    case K::Repeat: return n.min == 0 || can_match_empty(n.kids[0]);
  }
  return true;
}
}  // namespace

// ---- matcher ------------------------------------------------------------------------------
namespace {
enum FrameKind : uint32_t { kAlternative, kGreedyGiveBack, kLazyTakeMore };

// Decodes the (valid UTF-8) code point at text[pos]; sets len.
inline char32_t cp_at(std::string_view text, size_t pos, size_t& len) {
  unsigned char b = static_cast<unsigned char>(text[pos]);
  if (b < 0x80) { len = 1; return b; }
  size_t i = pos;
  char32_t cp = unicode::decode_utf8(text, i);
  len = i - pos;
  return cp;
}
inline size_t step_back(std::string_view text, size_t pos) {
  do --pos; while (pos > 0 && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80);
  return pos;
}
}  // namespace

bool Regex::run(uint32_t pc, std::string_view text, size_t pos, size_t& end, std::vector<Frame>& stack,
                uint64_t& budget) const {
  const size_t base = stack.size();
  const size_t n = text.size();
  for (;;) {
    if (budget-- == 0) throw BudgetExceeded();
    const Inst& in = program_[pc];
    bool ok = true;
    switch (in.op) {
      case Op::Class: {
        size_t len;
        if (pos < n && classes_[in.cls].contains(cp_at(text, pos, len))) { pos += len; ++pc; }
        else ok = false;
        break;
      }
      case Op::ClassRepeat: {
        const CharClass& cls = classes_[in.cls];
        uint32_t count = 0;
        size_t len;
        uint32_t limit = in.greedy_or_negate ? in.max : in.min;
        while (count < limit && pos < n && cls.contains(cp_at(text, pos, len))) { pos += len; ++count; }
        if (count < in.min) { ok = false; break; }
        if (in.greedy_or_negate) {
          if (count > in.min) stack.push_back(Frame{pc + 1, kGreedyGiveBack, pos, count - in.min});
        } else if (in.max > in.min) {
          stack.push_back(Frame{pc, kLazyTakeMore, pos, count});
        }
        ++pc;
        break;
      }
      case Op::Split:
        stack.push_back(Frame{in.y, kAlternative, pos, 0});
        pc = in.x;
        break;
      case Op::Jump: pc = in.x; break;
      case Op::Look: {
        size_t ignored;
        bool matched = run(in.x, text, pos, ignored, stack, budget);
        if (matched != in.greedy_or_negate) ++pc;
        else ok = false;
        break;
      }
      case Op::Match:
        end = pos;
        stack.resize(base);
        return true;
    }
    if (ok) continue;
    // Backtrack to the most recent choice point of this run.
    for (;;) {
      if (stack.size() == base) return false;
      Frame f = stack.back();
      stack.pop_back();
      if (f.kind == kAlternative) { pc = f.pc; pos = f.pos; break; }
      if (f.kind == kGreedyGiveBack) {
        pos = step_back(text, f.pos);
        if (f.count > 1) stack.push_back(Frame{f.pc, kGreedyGiveBack, pos, f.count - 1});
        pc = f.pc;
        break;
      }
      // kLazyTakeMore: f.pc is the ClassRepeat instruction
      const Inst& rep = program_[f.pc];
      size_t len;
      if (f.count < rep.max && f.pos < n && classes_[rep.cls].contains(cp_at(text, f.pos, len))) {
        pos = f.pos + len;
        if (f.count + 1 < rep.max) stack.push_back(Frame{f.pc, kLazyTakeMore, pos, f.count + 1});
        pc = f.pc + 1;
        break;
      }
    }
  }
}

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> out;
  std::vector<Frame> stack;
  uint64_t budget = 100000000ull + 1000ull * text.size();
  size_t pos = 0;
  while (pos <= text.size()) {  // an empty match may also sit at the very end
    size_t end;
    if (run(0, text, pos, end, stack, budget)) {
      out.emplace_back(pos, end);
      if (end > pos) { pos = end; continue; }
    }
    if (pos == text.size()) break;
    pos += unicode::utf8_length(static_cast<unsigned char>(text[pos]));
  }
  return out;
}

}  // namespace endor::tok
