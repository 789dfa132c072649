// Template source -> statement tree: tags split out with Jinja's whitespace rules (as transformers
// configures them: trim_blocks, lstrip_blocks), then a recursive-descent parser with Jinja's
// operator precedence (or < and < not < comparisons < + - < ~ < * / // % < ** < unary < filters,
// tests, attribute/item access and calls).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <set>

#include "syntax.h"

namespace endor::chat {

std::string Source::where(size_t pos) const {
  size_t line = 1, col = 1;
  for (size_t k = 0; k < pos && k < text.size(); ++k) {
    if (text[k] == '\n') {
      ++line;
      col = 1;
    } else if ((static_cast<unsigned char>(text[k]) & 0xC0) != 0x80) {
      ++col;
    }
  }
  return name + ":" + std::to_string(line) + ":" + std::to_string(col) + ": ";
}

namespace {

[[noreturn]] void fail(const Source& src, size_t pos, const std::string& what) {
  throw ChatTemplateError(src.where(pos) + what);
}

// ---- tags and text ---------------------------------------------------------------------------
struct Segment {
  enum class Kind { Text, Expr, Stmt, Comment } kind;
  size_t begin = 0, end = 0;  // Text: the text; tags: the inside, without delimiters and modifiers
  size_t pos = 0;             // where the segment starts in the source
  char left = 0, right = 0;   // whitespace-control modifiers '-' / '+' (0: none)
  std::string text;           // Text after whitespace control
};

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::vector<Segment> split_tags(const Source& src) {
  const std::string& s = src.text;
  std::vector<Segment> segs;
  size_t k = 0;
  while (k < s.size()) {
    size_t open = k;
    while (true) {
      open = s.find('{', open);
      if (open == std::string::npos || open + 1 >= s.size()) {
        open = std::string::npos;
        break;
      }
      const char c = s[open + 1];
      if (c == '{' || c == '%' || c == '#') break;
      ++open;
    }
    if (open == std::string::npos) {
      segs.push_back({Segment::Kind::Text, k, s.size(), k, 0, 0, {}});
      break;
    }
    if (open > k) segs.push_back({Segment::Kind::Text, k, open, k, 0, 0, {}});
    Segment tag;
    tag.pos = open;
    const char type = s[open + 1];
    tag.kind = type == '{' ? Segment::Kind::Expr : type == '%' ? Segment::Kind::Stmt : Segment::Kind::Comment;
    size_t inner = open + 2;
    if (inner < s.size() && (s[inner] == '-' || s[inner] == '+')) tag.left = s[inner++];
    const char close = type == '{' ? '}' : type;
    size_t end = std::string::npos;
    if (tag.kind == Segment::Kind::Comment) {
      end = s.find("#}", inner);
    } else {
      // The closing delimiter outside string literals and brackets (`{{ {'a': {}} }}` is fine).
      int depth = 0;
      for (size_t p = inner; p < s.size(); ++p) {
        const char c = s[p];
        if (c == '\'' || c == '"') {
          for (++p; p < s.size() && s[p] != c; ++p)
            if (s[p] == '\\') ++p;
          if (p >= s.size()) fail(src, open, "unterminated string literal in this tag");
        } else if (c == '{') {
          ++depth;
        } else if (c == '}' && depth > 0) {
          --depth;
        } else if (depth == 0 && c == close && p + 1 < s.size() && s[p + 1] == '}') {
          end = p;
          break;
        }
      }
    }
    if (end == std::string::npos)
      fail(src, open, std::string("unclosed '{") + type + "' (no matching '" + close + "}')");
    size_t inner_end = end;
    if (inner_end > inner && (s[inner_end - 1] == '-' || s[inner_end - 1] == '+')) tag.right = s[--inner_end];
    tag.begin = inner;
    tag.end = std::max(inner, inner_end);
    segs.push_back(tag);
    k = end + 2;
  }
  // Whitespace control, per text segment, from its neighbours' modifiers.
  for (size_t n = 0; n < segs.size(); ++n) {
    Segment& t = segs[n];
    if (t.kind != Segment::Kind::Text) continue;
    std::string text = s.substr(t.begin, t.end - t.begin);
    const Segment* prev = n > 0 ? &segs[n - 1] : nullptr;
    const Segment* next = n + 1 < segs.size() ? &segs[n + 1] : nullptr;
    const bool next_is_block = next && next->kind != Segment::Kind::Expr;
    if (next && next->left == '-') {
      while (!text.empty() && is_space(text.back())) text.pop_back();
    } else if (next_is_block && next->left != '+') {
      // lstrip_blocks: spaces/tabs between a line start and a block or comment tag go.
      const size_t nl = text.find_last_of('\n');
      const size_t from = nl == std::string::npos ? 0 : nl + 1;
      const bool line_start = nl != std::string::npos || t.begin == 0;
      if (line_start && text.find_first_not_of(" \t", from) == std::string::npos) text.erase(from);
    }
    if (prev && prev->right == '-') {
      size_t p = 0;
      while (p < text.size() && is_space(text[p])) ++p;
      text.erase(0, p);
    } else if (prev && prev->kind != Segment::Kind::Expr && prev->right != '+') {
      // trim_blocks: the first newline after a block or comment tag goes.
      if (text.compare(0, 1, "\n") == 0) text.erase(0, 1);
      else if (text.compare(0, 2, "\r\n") == 0) text.erase(0, 2);
    }
    t.text = std::move(text);
  }
  return segs;
}

// ---- expression tokens -----------------------------------------------------------------------
struct Token {
  enum class Kind { Name, String, Int, Float, Op, End } kind;
  std::string text;  // name, operator, or the decoded string
  size_t pos = 0;
  Value number;
};

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

std::vector<Token> tokenize(const Source& src, size_t begin, size_t end) {
  const std::string& s = src.text;
  std::vector<Token> out;
  size_t k = begin;
  while (k < end) {
    const char c = s[k];
    if (is_space(c)) {
      ++k;
      continue;
    }
    Token t;
    t.pos = k;
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t e = k;
      while (e < end && (std::isalnum(static_cast<unsigned char>(s[e])) || s[e] == '_')) ++e;
      t.kind = Token::Kind::Name;
      t.text = s.substr(k, e - k);
      k = e;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t e = k;
      while (e < end && std::isdigit(static_cast<unsigned char>(s[e]))) ++e;
      const bool after_dot = k > begin && s[k - 1] == '.';
      bool is_float = false;
      if (!after_dot && e + 1 < end && s[e] == '.' && std::isdigit(static_cast<unsigned char>(s[e + 1]))) {
        is_float = true;
        for (++e; e < end && std::isdigit(static_cast<unsigned char>(s[e])); ++e) {}
      }
      if (!after_dot && e < end && (s[e] == 'e' || s[e] == 'E')) {
        size_t x = e + 1;
        if (x < end && (s[x] == '+' || s[x] == '-')) ++x;
        if (x < end && std::isdigit(static_cast<unsigned char>(s[x]))) {
          is_float = true;
          for (e = x; e < end && std::isdigit(static_cast<unsigned char>(s[e])); ++e) {}
        }
      }
      const std::string digits = s.substr(k, e - k);
      if (is_float) {
        t.kind = Token::Kind::Float;
        t.number = Value::number(std::strtod(digits.c_str(), nullptr));
      } else {
        errno = 0;
        const long long v = std::strtoll(digits.c_str(), nullptr, 10);
        if (errno != 0) fail(src, k, "integer literal " + digits + " is too large");
        t.kind = Token::Kind::Int;
        t.number = Value::integer(v);
      }
      k = e;
    } else if (c == '\'' || c == '"') {
      t.kind = Token::Kind::String;
      size_t p = k + 1;
      for (; p < end && s[p] != c; ++p) {
        if (s[p] != '\\') {
          t.text += s[p];
          continue;
        }
        if (++p >= end) break;
        const char e = s[p];
        const auto hex = [&](int n) -> uint32_t {
          if (p + n >= end) fail(src, p, "truncated \\x/\\u escape in a string literal");
          uint32_t v = 0;
          for (int d = 1; d <= n; ++d) {
            const char h = s[p + d];
            if (!std::isxdigit(static_cast<unsigned char>(h))) fail(src, p, "bad \\x/\\u escape in a string literal");
            v = v * 16 + uint32_t(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
          }
          p += n;
          return v;
        };
        switch (e) {
          case 'n': t.text += '\n'; break;
          case 't': t.text += '\t'; break;
          case 'r': t.text += '\r'; break;
          case '0': t.text += '\0'; break;
          case 'a': t.text += '\a'; break;
          case 'b': t.text += '\b'; break;
          case 'f': t.text += '\f'; break;
          case 'v': t.text += '\v'; break;
          case '\\': t.text += '\\'; break;
          case '\'': t.text += '\''; break;
          case '"': t.text += '"'; break;
          case '\n': break;  // line continuation
          case 'x': append_utf8(t.text, hex(2)); break;
          case 'u': append_utf8(t.text, hex(4)); break;
          case 'U': {
            const uint32_t cp = hex(8);
            if (cp > 0x10FFFF) fail(src, p, "\\U escape beyond U+10FFFF");
            append_utf8(t.text, cp);
            break;
          }
          default: t.text += '\\'; t.text += e;  // Python keeps unknown escapes
        }
      }
      if (p >= end) fail(src, k, "unterminated string literal");
      k = p + 1;
    } else {
      static const char* const kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                         ">", "(", ")", "[", "]", "{", "}", ",", ".", ":", "|", "="};
      t.kind = Token::Kind::Op;
      for (const char* op : kOps) {
        const size_t n = std::strlen(op);
        if (k + n <= end && s.compare(k, n, op) == 0) {
          t.text = op;
          break;
        }
      }
      if (t.text.empty()) {
        const unsigned char u = static_cast<unsigned char>(c);
        fail(src, k, u >= 0x20 && u < 0x7f ? std::string("unexpected character '") + c + "'"
                                           : "unexpected byte " + std::to_string(u) + " in a tag");
      }
      k += t.text.size();
    }
    out.push_back(std::move(t));
  }
  Token e;
  e.kind = Token::Kind::End;
  e.pos = end;
  out.push_back(e);
  return out;
}

// ---- parser ----------------------------------------------------------------------------------
class Parser {
 public:
  explicit Parser(const Source& src) : src_(src), segs_(split_tags(src)) {}

  Body parse_all() {
    std::string stop;
    Body body = parse_body({}, &stop, 0);
    return body;
  }

 private:
  const Source& src_;
  std::vector<Segment> segs_;
  size_t seg_ = 0;
  std::vector<Token> toks_;
  size_t tok_ = 0;
  size_t depth_ = 0;

  struct Nest {
    Parser& p;
    explicit Nest(Parser& parser, size_t pos) : p(parser) {
      if (++p.depth_ > kMaxNesting)
        fail(p.src_, pos, "nested more than " + std::to_string(kMaxNesting) + " levels deep");
    }
    ~Nest() { --p.depth_; }
  };
  // A left-associative chain (a + b + c ..., x.a.b ..., x | f | g ...) deepens the tree by one per
  // operator, so it counts against the same nesting limit.
  struct Chain {
    Parser& p;
    size_t n = 0;
    explicit Chain(Parser& parser) : p(parser) {}
    void add(size_t pos) {
      ++n;
      if (++p.depth_ > kMaxNesting)
        fail(p.src_, pos, "nested more than " + std::to_string(kMaxNesting) + " levels deep");
    }
    ~Chain() { p.depth_ -= n; }
  };

  const Token& peek(size_t ahead = 0) const { return toks_[std::min(tok_ + ahead, toks_.size() - 1)]; }
  bool at_op(const char* op) const { return peek().kind == Token::Kind::Op && peek().text == op; }
  bool at_name(const char* name, size_t ahead = 0) const {
    return peek(ahead).kind == Token::Kind::Name && peek(ahead).text == name;
  }
  std::string describe(const Token& t) const {
    switch (t.kind) {
      case Token::Kind::End: return "end of tag";
      case Token::Kind::String: return "string literal";
      default: return "'" + t.text + "'";
    }
  }
  void expect_op(const char* op) {
    if (!at_op(op)) fail(src_, peek().pos, std::string("expected '") + op + "', found " + describe(peek()));
    ++tok_;
  }
  std::string expect_name(const char* what) {
    if (peek().kind != Token::Kind::Name) fail(src_, peek().pos, std::string("expected ") + what + ", found " + describe(peek()));
    return toks_[tok_++].text;
  }
  void expect_end() {
    if (peek().kind != Token::Kind::End) fail(src_, peek().pos, "unexpected " + describe(peek()) + " in this tag");
  }
  // The tag ends here: on to the next segment.
  void close_tag() {
    expect_end();
    ++seg_;
  }

  ExprPtr node(Expr::Kind kind, size_t pos) {
    ExprPtr e = std::make_unique<Expr>();
    e->kind = kind;
    e->pos = pos;
    return e;
  }

  // Statements until a tag whose keyword is in `stops` (left unconsumed; its keyword in *stop).
  Body parse_body(const std::set<std::string>& stops, std::string* stop, size_t opened_at) {
    Nest nest(*this, opened_at);
    Body body;
    while (seg_ < segs_.size()) {
      const Segment& sg = segs_[seg_];
      if (sg.kind == Segment::Kind::Comment) {
        ++seg_;
        continue;
      }
      if (sg.kind == Segment::Kind::Text) {
        if (!sg.text.empty()) {
          NodePtr n = std::make_unique<Node>();
          n->kind = Node::Kind::Text;
          n->pos = sg.pos;
          n->text = sg.text;
          body.push_back(std::move(n));
        }
        ++seg_;
        continue;
      }
      toks_ = tokenize(src_, sg.begin, sg.end);
      tok_ = 0;
      if (sg.kind == Segment::Kind::Expr) {
        NodePtr n = std::make_unique<Node>();
        n->kind = Node::Kind::Output;
        n->pos = sg.pos;
        if (peek().kind == Token::Kind::End) fail(src_, sg.pos, "empty expression '{{ }}'");
        n->expr = parse_expr();
        expect_end();
        body.push_back(std::move(n));
        ++seg_;
        continue;
      }
      if (peek().kind != Token::Kind::Name) fail(src_, sg.pos, "expected a tag name after '{%'");
      const std::string keyword = peek().text;
      if (stops.count(keyword)) {
        *stop = keyword;
        return body;
      }
      body.push_back(parse_statement(keyword, sg.pos));
    }
    if (!stops.empty())
      fail(src_, opened_at, "this tag is never closed (expected '" + *stops.rbegin() + "')");
    return body;
  }

  // The current segment is `{% keyword ... %}`; consumes it (and its body up to the end tag).
  NodePtr parse_statement(const std::string& keyword, size_t pos) {
    NodePtr n = std::make_unique<Node>();
    n->pos = pos;
    ++tok_;
    if (keyword == "if") return parse_if(std::move(n));
    if (keyword == "for") return parse_for(std::move(n));
    if (keyword == "set") return parse_set(std::move(n));
    if (keyword == "macro") return parse_macro(std::move(n));
    if (keyword == "break" || keyword == "continue") {
      n->kind = keyword == "break" ? Node::Kind::Break : Node::Kind::Continue;
      close_tag();
      return n;
    }
    std::string stop;
    if (keyword == "generation") {  // transformers' assistant-mask extension: renders its body
      n->kind = Node::Kind::Scope;
      close_tag();
      n->body = parse_body({"endgeneration"}, &stop, pos);
      ++tok_;
      close_tag();
      return n;
    }
    if (keyword.rfind("end", 0) == 0 || keyword == "elif" || keyword == "else")
      fail(src_, pos, "unexpected '" + keyword + "' (no open tag it closes)");
    fail(src_, pos, "unsupported tag '" + keyword + "'");
  }

  // `{% if c %}` ... `{% elif c %}` ... `{% else %}` ... `{% endif %}`, its tag name consumed.
  NodePtr parse_if(NodePtr n) {
    const size_t pos = n->pos;
    std::string stop;
    n->kind = Node::Kind::If;
    ExprPtr cond = parse_expr();
    close_tag();
    for (;;) {
      Body b = parse_body({"elif", "else", "endif"}, &stop, pos);
      n->branches.emplace_back(std::move(cond), std::move(b));
      ++tok_;
      if (stop == "elif") {
        if (!n->branches.back().first) fail(src_, segs_[seg_].pos, "'elif' after 'else'");
        cond = parse_expr();
        close_tag();
      } else if (stop == "else") {
        if (!n->branches.back().first) fail(src_, segs_[seg_].pos, "a second 'else' in one 'if'");
        cond = nullptr;
        close_tag();
      } else {
        close_tag();
        return n;
      }
    }
  }

  // `{% for x[, y] in xs [if c] %}` ... [`{% else %}` ...] `{% endfor %}`, its tag name consumed.
  NodePtr parse_for(NodePtr n) {
    const size_t pos = n->pos;
    std::string stop;
    n->kind = Node::Kind::For;
    n->targets.push_back(expect_name("a loop variable"));
    if (n->targets[0] == "in") fail(src_, toks_[tok_ - 1].pos, "expected a loop variable before 'in'");
    while (at_op(",")) {
      ++tok_;
      n->targets.push_back(expect_name("a loop variable"));
    }
    if (!at_name("in")) fail(src_, peek().pos, "expected 'in' in the for tag, found " + describe(peek()));
    ++tok_;
    n->expr = parse_or();  // `if` after the iterable filters items (no inline-if here)
    if (at_name("if")) {
      ++tok_;
      n->condition = parse_or();
    }
    if (at_name("recursive")) fail(src_, peek().pos, "unsupported: recursive for loops");
    close_tag();
    n->body = parse_body({"else", "endfor"}, &stop, pos);
    if (stop == "else") {
      ++tok_;
      close_tag();
      n->else_body = parse_body({"endfor"}, &stop, pos);
    }
    ++tok_;
    close_tag();
    return n;
  }

  // `{% set name[.attr] = expr %}`, or `{% set name %}` ... `{% endset %}`, its tag name consumed.
  NodePtr parse_set(NodePtr n) {
    const size_t pos = n->pos;
    std::string stop;
    n->targets.push_back(expect_name("a variable name"));
    if (at_op(".")) {
      ++tok_;
      n->attr = expect_name("an attribute name");
    }
    if (at_op(",")) fail(src_, peek().pos, "unsupported: assigning to several names in one set");
    if (at_op("=")) {
      ++tok_;
      n->kind = Node::Kind::Set;
      n->expr = parse_expr();
      close_tag();
      return n;
    }
    if (!n->attr.empty()) fail(src_, peek().pos, "expected '=' in the set tag");
    if (at_op("|")) fail(src_, peek().pos, "unsupported: filters on a block set");
    expect_end();
    n->kind = Node::Kind::SetBlock;
    ++seg_;
    n->body = parse_body({"endset"}, &stop, pos);
    ++tok_;
    close_tag();
    return n;
  }

  // `{% macro name(a, b=default) %}` ... `{% endmacro %}`, its tag name consumed.
  NodePtr parse_macro(NodePtr n) {
    const size_t pos = n->pos;
    std::string stop;
    n->kind = Node::Kind::Macro;
    n->targets.push_back(expect_name("a macro name"));
    expect_op("(");
    while (!at_op(")")) {
      std::string param = expect_name("a parameter name");
      ExprPtr def;
      if (at_op("=")) {
        ++tok_;
        def = parse_expr();
      }
      n->params.emplace_back(std::move(param), std::move(def));
      if (!at_op(",")) break;
      ++tok_;
    }
    expect_op(")");
    close_tag();
    n->body = parse_body({"endmacro"}, &stop, pos);
    ++tok_;
    if (peek().kind == Token::Kind::Name) ++tok_;  // {% endmacro name %}
    close_tag();
    return n;
  }

  // ---- expressions ----
  ExprPtr parse_expr() {
    Chain chain(*this);
    Nest nest(*this, peek().pos);
    ExprPtr e = parse_or();
    while (at_name("if")) {
      chain.add(peek().pos);
      const size_t pos = peek().pos;
      ++tok_;
      ExprPtr c = node(Expr::Kind::Cond, pos);
      c->args.push_back(parse_or());
      c->args.push_back(std::move(e));
      if (at_name("else")) {
        ++tok_;
        c->args.push_back(parse_expr());
      } else {
        c->args.push_back(nullptr);
      }
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(std::string op, size_t pos, ExprPtr a, ExprPtr b) {
    ExprPtr e = node(Expr::Kind::Binary, pos);
    e->name = std::move(op);
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }

  ExprPtr parse_or() {
    Chain chain(*this);
    ExprPtr e = parse_and();
    while (at_name("or")) {
      chain.add(peek().pos);
      const size_t pos = toks_[tok_++].pos;
      e = binary("or", pos, std::move(e), parse_and());
    }
    return e;
  }
  ExprPtr parse_and() {
    Chain chain(*this);
    ExprPtr e = parse_not();
    while (at_name("and")) {
      chain.add(peek().pos);
      const size_t pos = toks_[tok_++].pos;
      e = binary("and", pos, std::move(e), parse_not());
    }
    return e;
  }
  ExprPtr parse_not() {
    if (at_name("not")) {
      Nest nest(*this, peek().pos);
      ExprPtr e = node(Expr::Kind::Unary, toks_[tok_++].pos);
      e->name = "not";
      e->args.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    ExprPtr e = parse_math1();
    Chain chain(*this);
    for (;;) {
      chain.add(peek().pos);
      const Token& t = peek();
      std::string op;
      if (t.kind == Token::Kind::Op &&
          (t.text == "==" || t.text == "!=" || t.text == "<" || t.text == "<=" || t.text == ">" || t.text == ">="))
        op = t.text;
      else if (at_name("in"))
        op = "in";
      else if (at_name("not") && at_name("in", 1))
        op = "not in";
      else
        break;
      const size_t pos = t.pos;
      tok_ += op == "not in" ? 2 : 1;
      e = binary(op, pos, std::move(e), parse_math1());
    }
    return e;
  }
  ExprPtr parse_math1() {
    Chain chain(*this);
    ExprPtr e = parse_concat();
    while (at_op("+") || at_op("-")) {
      chain.add(peek().pos);
      const Token& t = toks_[tok_++];
      e = binary(t.text, t.pos, std::move(e), parse_concat());
    }
    return e;
  }
  ExprPtr parse_concat() {
    Chain chain(*this);
    ExprPtr e = parse_math2();
    while (at_op("~")) {
      chain.add(peek().pos);
      const size_t pos = toks_[tok_++].pos;
      e = binary("~", pos, std::move(e), parse_math2());
    }
    return e;
  }
  ExprPtr parse_math2() {
    Chain chain(*this);
    ExprPtr e = parse_pow();
    while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
      chain.add(peek().pos);
      const Token& t = toks_[tok_++];
      e = binary(t.text, t.pos, std::move(e), parse_pow());
    }
    return e;
  }
  ExprPtr parse_pow() {
    Chain chain(*this);
    ExprPtr e = parse_unary(true);
    while (at_op("**")) {
      chain.add(peek().pos);
      const size_t pos = toks_[tok_++].pos;
      e = binary("**", pos, std::move(e), parse_unary(true));
    }
    return e;
  }
  ExprPtr parse_unary(bool with_filter) {
    Nest nest(*this, peek().pos);
    ExprPtr e;
    if (at_op("-") || at_op("+")) {
      e = node(Expr::Kind::Unary, peek().pos);
      e->name = toks_[tok_++].text;
      e->args.push_back(parse_unary(false));
    } else {
      e = parse_postfix(parse_primary());
    }
    if (with_filter) e = parse_filters(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = peek();
    switch (t.kind) {
      case Token::Kind::Name: {
        ++tok_;
        ExprPtr e = node(Expr::Kind::Literal, t.pos);
        if (t.text == "true" || t.text == "True") e->value = Value::boolean(true);
        else if (t.text == "false" || t.text == "False") e->value = Value::boolean(false);
        else if (t.text == "none" || t.text == "None") e->value = Value::none();
        else {
          e->kind = Expr::Kind::Name;
          e->name = t.text;
        }
        return e;
      }
      case Token::Kind::String: {
        ExprPtr e = node(Expr::Kind::Literal, t.pos);
        std::string s;
        while (peek().kind == Token::Kind::String) s += toks_[tok_++].text;  // 'a' 'b' == 'ab'
        e->value = Value::string(std::move(s));
        return e;
      }
      case Token::Kind::Int:
      case Token::Kind::Float: {
        ExprPtr e = node(Expr::Kind::Literal, t.pos);
        e->value = t.number;
        ++tok_;
        return e;
      }
      case Token::Kind::Op:
        if (t.text == "(") {
          ++tok_;
          if (at_op(")")) {
            ++tok_;
            ExprPtr empty = node(Expr::Kind::List, t.pos);  // ()
            empty->name = "tuple";
            return empty;
          }
          ExprPtr first = parse_expr();
          if (!at_op(",")) {
            expect_op(")");
            return first;
          }
          ExprPtr tuple = node(Expr::Kind::List, t.pos);
          tuple->name = "tuple";
          tuple->args.push_back(std::move(first));
          while (at_op(",")) {
            ++tok_;
            if (at_op(")")) break;
            tuple->args.push_back(parse_expr());
          }
          expect_op(")");
          return tuple;
        }
        if (t.text == "[") {
          ++tok_;
          ExprPtr list = node(Expr::Kind::List, t.pos);
          while (!at_op("]")) {
            list->args.push_back(parse_expr());
            if (!at_op(",")) break;
            ++tok_;
          }
          expect_op("]");
          return list;
        }
        if (t.text == "{") {
          ++tok_;
          ExprPtr dict = node(Expr::Kind::DictLit, t.pos);
          while (!at_op("}")) {
            dict->args.push_back(parse_expr());
            expect_op(":");
            dict->args.push_back(parse_expr());
            if (!at_op(",")) break;
            ++tok_;
          }
          expect_op("}");
          return dict;
        }
        break;
      default: break;
    }
    fail(src_, t.pos, "unexpected " + describe(t) + " (expected a value)");
  }

  ExprPtr parse_postfix(ExprPtr e) {
    Chain chain(*this);
    for (;;) {
      chain.add(peek().pos);
      if (at_op(".")) {
        const size_t pos = toks_[tok_++].pos;
        ExprPtr a = node(Expr::Kind::Attr, pos);
        if (peek().kind == Token::Kind::Int) {  // x.0 is x[0] in Jinja
          a->kind = Expr::Kind::Item;
          a->args.push_back(std::move(e));
          ExprPtr idx = node(Expr::Kind::Literal, peek().pos);
          idx->value = toks_[tok_++].number;
          a->args.push_back(std::move(idx));
        } else {
          a->name = expect_name("an attribute name after '.'");
          a->args.push_back(std::move(e));
        }
        e = std::move(a);
      } else if (at_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (at_op("(")) {
        ExprPtr c = node(Expr::Kind::Call, peek().pos);
        c->args.push_back(std::move(e));
        parse_call_args(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr e) {
    const size_t pos = toks_[tok_++].pos;  // '['
    Nest nest(*this, pos);
    ExprPtr start;
    if (!at_op(":")) start = parse_expr();
    if (!at_op(":")) {
      expect_op("]");
      ExprPtr item = node(Expr::Kind::Item, pos);
      item->args.push_back(std::move(e));
      item->args.push_back(std::move(start));
      return item;
    }
    ExprPtr slice = node(Expr::Kind::Slice, pos);
    slice->args.push_back(std::move(e));
    slice->args.push_back(std::move(start));
    ++tok_;  // ':'
    slice->args.push_back(at_op("]") || at_op(":") ? nullptr : parse_expr());
    if (at_op(":")) {
      ++tok_;
      slice->args.push_back(at_op("]") ? nullptr : parse_expr());
    } else {
      slice->args.push_back(nullptr);
    }
    expect_op("]");
    return slice;
  }

  // '(' [expr | name '=' expr] {',' ...} ')' into e.args[1..] / e.kwargs.
  void parse_call_args(Expr& e) {
    Nest nest(*this, peek().pos);
    expect_op("(");
    while (!at_op(")")) {
      if (at_op("*") || at_op("**")) fail(src_, peek().pos, "unsupported: *args / **kwargs in a call");
      if (peek().kind == Token::Kind::Name && peek(1).kind == Token::Kind::Op && peek(1).text == "=") {
        std::string key = toks_[tok_].text;
        tok_ += 2;
        e.kwargs.emplace_back(std::move(key), parse_expr());
      } else {
        if (!e.kwargs.empty()) fail(src_, peek().pos, "a positional argument after a keyword argument");
        e.args.push_back(parse_expr());
      }
      if (!at_op(",")) break;
      ++tok_;
    }
    expect_op(")");
  }

  ExprPtr parse_filters(ExprPtr e) {
    Chain chain(*this);
    for (;;) {
      chain.add(peek().pos);
      if (at_op("|")) {
        const size_t pos = toks_[tok_++].pos;
        ExprPtr f = node(Expr::Kind::Filter, pos);
        f->name = expect_name("a filter name after '|'");
        f->args.push_back(std::move(e));
        if (at_op("(")) parse_call_args(*f);
        e = std::move(f);
      } else if (at_name("is")) {
        const size_t pos = toks_[tok_++].pos;
        ExprPtr t = node(Expr::Kind::Test, pos);
        if (at_name("not")) {
          t->negated = true;
          ++tok_;
        }
        t->name = expect_name("a test name after 'is'");
        t->args.push_back(std::move(e));
        const Token& n = peek();
        if (at_op("(")) {
          parse_call_args(*t);
        } else if ((n.kind == Token::Kind::String || n.kind == Token::Kind::Int || n.kind == Token::Kind::Float ||
                    (n.kind == Token::Kind::Name && n.text != "else" && n.text != "or" && n.text != "and" &&
                     n.text != "if" && n.text != "is" && n.text != "in" && n.text != "not") ||
                    (n.kind == Token::Kind::Op && (n.text == "[" || n.text == "{")))) {
          t->args.push_back(parse_postfix(parse_primary()));  // `is divisibleby 3`
        }
        e = std::move(t);
      } else if (at_op("(")) {
        ExprPtr c = node(Expr::Kind::Call, peek().pos);
        c->args.push_back(std::move(e));
        parse_call_args(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }
};

}  // namespace

Body parse_template(const Source& source) {
  if (source.text.size() > kMaxTemplateBytes)
    throw ChatTemplateError(source.name + ": the template has " + std::to_string(source.text.size()) +
                            " bytes, more than the limit of " + std::to_string(kMaxTemplateBytes));
  Parser parser(source);
  return parser.parse_all();
}

}  // namespace endor::chat
