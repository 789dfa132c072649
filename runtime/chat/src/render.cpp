// Evaluates a parsed chat template: Jinja's scoping (a for-loop body is a fresh scope per
// iteration, so `set` inside it does not leak; namespace() objects carry state out), undefined
// values that print as "" but fail on attribute access or arithmetic, and the filters, tests,
// methods and globals of transformers' chat-template environment.
#include "render.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <map>
#include <unordered_map>

namespace endor::chat {
namespace {

enum class Flow { Normal, Break, Continue };

std::string strip_chars(const std::string& s, const Value& chars, bool left, bool right) {
  const std::string set = chars.is(Value::Kind::String) ? chars.s : std::string(" \t\n\r\f\v");
  size_t b = 0, e = s.size();
  if (left)
    while (b < e && set.find(s[b]) != std::string::npos) ++b;
  if (right)
    while (e > b && set.find(s[e - 1]) != std::string::npos) --e;
  return s.substr(b, e - b);
}


// Python's slice index normalisation for a sequence of n items.
std::vector<int64_t> slice_indices(int64_t n, const Value& start, const Value& stop, const Value& step_v) {
  const int64_t step = step_v.is(Value::Kind::Int) ? step_v.i : 1;
  const auto clamp = [&](const Value& v, int64_t def, int64_t lo, int64_t hi) {
    if (!v.is(Value::Kind::Int)) return def;
    int64_t x = v.i < 0 ? v.i + n : v.i;
    return std::max(lo, std::min(hi, x));
  };
  std::vector<int64_t> idx;
  if (step > 0) {
    const int64_t b = clamp(start, 0, 0, n), e = clamp(stop, n, 0, n);
    for (int64_t k = b; k < e; k += step) idx.push_back(k);
  } else {
    const int64_t b = clamp(start, n - 1, -1, n - 1), e = clamp(stop, -1, -1, n - 1);
    for (int64_t k = b; k > e; k += step) idx.push_back(k);
  }
  return idx;
}

class Renderer {
 public:
  Renderer(const Source& src, const Body& root) : src_(src), root_(root) {}

  std::string run(const nlohmann::ordered_json& variables) {
    scopes_.emplace_back();
    auto& globals = scopes_.back();
    install_globals(globals);
    if (!variables.is_object()) throw ChatTemplateError(src_.name + ": the template variables must be a JSON object");
    for (auto it = variables.begin(); it != variables.end(); ++it) globals[it.key()] = Value::from_json(it.value());
    exec(root_);
    return std::move(out_);
  }

 private:
  using Scope = std::unordered_map<std::string, Value>;
  const Source& src_;
  const Body& root_;
  std::vector<Scope> scopes_;
  std::string out_;
  size_t steps_ = 0, calls_ = 0;
  size_t pos_ = 0;  // position of the expression being evaluated (for errors raised by builtins)

  [[noreturn]] void fail(size_t pos, const std::string& what) const { throw ChatTemplateError(src_.where(pos) + what); }

  void step(size_t pos) {
    if (++steps_ > kMaxSteps)
      fail(pos, "the template did more than " + std::to_string(kMaxSteps) + " steps (a loop that does not end?)");
  }
  void check_size(size_t bytes, size_t pos) const {
    if (bytes > kMaxStringBytes) fail(pos, "a string grew past " + std::to_string(kMaxStringBytes) + " bytes");
  }
  void emit(const std::string& s, size_t pos) {
    out_ += s;
    check_size(out_.size(), pos);
  }

  Value lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return f->second;
    }
    return Value::undefined(name);
  }

  // ---- statements ----
  Flow exec(const Body& body) {
    for (const NodePtr& n : body) {
      const Flow f = exec(*n);
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

  Flow exec(const Node& n) {
    step(n.pos);
    switch (n.kind) {
      case Node::Kind::Text: emit(n.text, n.pos); return Flow::Normal;
      case Node::Kind::Output: {
        const Value v = eval(*n.expr);
        if (v.is(Value::Kind::Callable)) fail(n.expr->pos, "cannot print a function (missing '()'?)");
        emit(py_str(v), n.pos);
        return Flow::Normal;
      }
      case Node::Kind::If:
        for (const auto& [cond, body] : n.branches)
          if (!cond || truthy(eval(*cond))) return exec(body);
        return Flow::Normal;
      case Node::Kind::For: return exec_for(n);
      case Node::Kind::Set: {
        Value v = eval(*n.expr);
        if (n.attr.empty()) {
          scopes_.back()[n.targets[0]] = std::move(v);
        } else {
          const Value ns = lookup(n.targets[0]);
          if (!ns.is(Value::Kind::Namespace))
            fail(n.pos, "cannot set attribute '" + n.attr + "' of '" + n.targets[0] + "' (" + kind_name(ns) +
                            "; only namespace() objects take attributes)");
          ns.dict->set(n.attr, std::move(v));
        }
        return Flow::Normal;
      }
      case Node::Kind::SetBlock: {
        std::string saved;
        std::swap(saved, out_);
        const Flow f = exec(n.body);
        std::swap(saved, out_);
        if (f != Flow::Normal) fail(n.pos, "'break' or 'continue' outside a loop");
        scopes_.back()[n.targets[0]] = Value::string(std::move(saved));
        return Flow::Normal;
      }
      case Node::Kind::Macro: scopes_.back()[n.targets[0]] = make_macro(n); return Flow::Normal;
      case Node::Kind::Break: return Flow::Break;
      case Node::Kind::Continue: return Flow::Continue;
      case Node::Kind::Scope: {
        scopes_.emplace_back();
        const Flow f = exec(n.body);
        scopes_.pop_back();
        return f;
      }
    }
    return Flow::Normal;
  }

  List iterate(const Value& v, size_t pos) {
    switch (v.kind) {
      case Value::Kind::Undefined: return {};  // Jinja iterates an undefined value as empty
      case Value::Kind::List: return *v.list;
      case Value::Kind::Dict: {
        List keys;
        for (const auto& kv : v.dict->items) keys.push_back(Value::string(kv.first));
        return keys;
      }
      case Value::Kind::String: {
        List chars;
        const std::vector<size_t> cp = code_point_starts(v.s);
        for (size_t k = 0; k + 1 < cp.size(); ++k) chars.push_back(Value::string(v.s.substr(cp[k], cp[k + 1] - cp[k])));
        return chars;
      }
      default: fail(pos, std::string("cannot iterate over a ") + kind_name(v));
    }
  }

  void bind_targets(Scope& scope, const std::vector<std::string>& targets, const Value& item, size_t pos) {
    if (targets.size() == 1) {
      scope[targets[0]] = item;
      return;
    }
    if (!item.is(Value::Kind::List) || item.list->size() != targets.size())
      fail(pos, "cannot unpack a " + std::string(kind_name(item)) + " into " + std::to_string(targets.size()) + " loop variables");
    for (size_t k = 0; k < targets.size(); ++k) scope[targets[k]] = (*item.list)[k];
  }

  Flow exec_for(const Node& n) {
    List items = iterate(eval(*n.expr), n.expr->pos);
    if (n.condition) {
      List kept;
      for (const Value& item : items) {
        scopes_.emplace_back();
        bind_targets(scopes_.back(), n.targets, item, n.pos);
        const bool keep = truthy(eval(*n.condition));
        scopes_.pop_back();
        if (keep) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      if (n.else_body.empty()) return Flow::Normal;
      scopes_.emplace_back();
      const Flow f = exec(n.else_body);
      scopes_.pop_back();
      return f;
    }
    const int64_t count = int64_t(items.size());
    // One loop object per loop, updated in place (as Jinja's LoopContext).
    Value loop = Value::dict_of(Dict{{{"index", {}}, {"index0", {}}, {"revindex", {}}, {"revindex0", {}}, {"first", {}},
                                     {"last", {}}, {"length", Value::integer(count)}, {"previtem", {}}, {"nextitem", {}}}});
    auto& fields = loop.dict->items;
    scopes_.emplace_back();
    for (int64_t k = 0; k < count; ++k) {
      step(n.pos);
      fields[0].second = Value::integer(k + 1);
      fields[1].second = Value::integer(k);
      fields[2].second = Value::integer(count - k);
      fields[3].second = Value::integer(count - k - 1);
      fields[4].second = Value::boolean(k == 0);
      fields[5].second = Value::boolean(k == count - 1);
      fields[7].second = k > 0 ? items[size_t(k - 1)] : Value::undefined("loop.previtem");
      fields[8].second = k + 1 < count ? items[size_t(k + 1)] : Value::undefined("loop.nextitem");
      scopes_.back().clear();  // a fresh scope per iteration: `set` in the body does not carry over
      scopes_.back()["loop"] = loop;
      bind_targets(scopes_.back(), n.targets, items[size_t(k)], n.pos);
      if (exec(n.body) == Flow::Break) break;
    }
    scopes_.pop_back();
    return Flow::Normal;
  }

  Value make_macro(const Node& n) {
    const Node* def = &n;
    return Value::callable([this, def](CallArgs& args) -> Value {
      if (++calls_ > kMaxCallDepth) fail(def->pos, "macro calls nested more than " + std::to_string(kMaxCallDepth) + " deep");
      if (args.positional.size() > def->params.size())
        fail(pos_, "macro '" + def->targets[0] + "' takes " + std::to_string(def->params.size()) + " arguments");
      // Macros see the globals and their own parameters (not the caller's locals).
      std::vector<Scope> saved;
      saved.assign(std::make_move_iterator(scopes_.begin() + 1), std::make_move_iterator(scopes_.end()));
      scopes_.resize(1);
      scopes_.emplace_back();
      for (size_t k = 0; k < def->params.size(); ++k) {
        const auto& [name, fallback] = def->params[k];
        Value v = args.get(k, name.c_str());
        if (v.is(Value::Kind::Undefined) && fallback) v = eval(*fallback);
        scopes_.back()[name] = v;
      }
      std::string saved_out;
      std::swap(saved_out, out_);
      exec(def->body);
      std::swap(saved_out, out_);
      scopes_.resize(1);
      for (Scope& s : saved) scopes_.push_back(std::move(s));
      --calls_;
      return Value::string(std::move(saved_out));
    });
  }

  // ---- expressions ----
  Value eval(const Expr& e) {
    step(e.pos);
    pos_ = e.pos;
    switch (e.kind) {
      case Expr::Kind::Literal: return e.value;
      case Expr::Kind::Name: return lookup(e.name);
      case Expr::Kind::List: {
        List items;
        for (const ExprPtr& a : e.args) items.push_back(eval(*a));
        return e.name == "tuple" ? Value::tuple_of(std::move(items)) : Value::list_of(std::move(items));
      }
      case Expr::Kind::DictLit: {
        Dict d;
        for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
          const Value key = eval(*e.args[k]);
          if (!key.is(Value::Kind::String)) fail(e.args[k]->pos, "unsupported: a dict key that is not a string");
          d.set(key.s, eval(*e.args[k + 1]));
        }
        return Value::dict_of(std::move(d));
      }
      case Expr::Kind::Attr: return attribute(eval(*e.args[0]), e.name, *e.args[0], e.pos);
      case Expr::Kind::Item: return item(eval(*e.args[0]), eval(*e.args[1]), *e.args[0], e.pos);
      case Expr::Kind::Slice: {
        const Value seq = eval(*e.args[0]);
        const auto part = [&](size_t k) { return e.args[k] ? eval(*e.args[k]) : Value::none(); };
        const Value start = part(1), stop = part(2), step_v = part(3);
        for (const Value* v : {&start, &stop, &step_v})
          if (!v->is(Value::Kind::Int) && !v->is(Value::Kind::None)) fail(e.pos, "slice indices must be integers");
        if (step_v.is(Value::Kind::Int) && step_v.i == 0) fail(e.pos, "slice step cannot be zero");
        if (seq.is(Value::Kind::List)) {
          List out;
          for (int64_t k : slice_indices(int64_t(seq.list->size()), start, stop, step_v)) out.push_back((*seq.list)[size_t(k)]);
          return Value::list_of(std::move(out));
        }
        if (seq.is(Value::Kind::String)) {
          const std::vector<size_t> cp = code_point_starts(seq.s);
          std::string out;
          for (int64_t k : slice_indices(int64_t(cp.size() - 1), start, stop, step_v))
            out.append(seq.s, cp[size_t(k)], cp[size_t(k) + 1] - cp[size_t(k)]);
          return Value::string(std::move(out));
        }
        undefined_check(seq, *e.args[0]);
        fail(e.pos, std::string("cannot slice a ") + kind_name(seq));
      }
      case Expr::Kind::Call: {
        const Value callee = eval(*e.args[0]);
        CallArgs args = eval_args(e);
        if (!callee.is(Value::Kind::Callable)) {
          undefined_check(callee, *e.args[0]);
          fail(e.pos, std::string("a ") + kind_name(callee) + " is not callable");
        }
        pos_ = e.pos;
        return (*callee.fn)(args);
      }
      case Expr::Kind::Filter: return filter(e);
      case Expr::Kind::Test: {
        const bool r = test(e);
        return Value::boolean(e.negated ? !r : r);
      }
      case Expr::Kind::Unary: {
        const Value v = eval(*e.args[0]);
        if (e.name == "not") return Value::boolean(!truthy(v));
        if (v.is(Value::Kind::Int)) return Value::integer(e.name == "-" ? -v.i : v.i);
        if (v.is(Value::Kind::Float)) return Value::number(e.name == "-" ? -v.f : v.f);
        undefined_check(v, *e.args[0]);
        fail(e.pos, "bad operand for unary " + e.name + ": " + kind_name(v));
      }
      case Expr::Kind::Binary: return binary(e);
      case Expr::Kind::Cond:
        if (truthy(eval(*e.args[0]))) return eval(*e.args[1]);
        return e.args[2] ? eval(*e.args[2]) : Value::undefined();
    }
    return Value::undefined();
  }

  CallArgs eval_args(const Expr& e) {
    CallArgs args;
    for (size_t k = 1; k < e.args.size(); ++k) args.positional.push_back(eval(*e.args[k]));
    for (const auto& [name, value] : e.kwargs) args.keyword.emplace_back(name, eval(*value));
    return args;
  }

  // Jinja's undefined fails on use other than printing, testing and iterating.
  void undefined_check(const Value& v, const Expr& from) const {
    if (!v.is(Value::Kind::Undefined)) return;
    fail(from.pos, "'" + (v.s.empty() ? std::string("value") : v.s) + "' is undefined");
  }

  Value attribute(const Value& obj, const std::string& name, const Expr& from, size_t pos) {
    undefined_check(obj, from);
    if (obj.is_mapping()) {
      if (const Value* v = obj.dict->find(name)) return *v;
      if (obj.is(Value::Kind::Dict)) {
        Value m = dict_method(obj, name, pos);
        if (!m.is(Value::Kind::Undefined)) return m;
      }
      return Value::undefined(describe(from) + "." + name);
    }
    if (obj.is(Value::Kind::String)) {
      Value m = string_method(obj, name, pos);
      if (!m.is(Value::Kind::Undefined)) return m;
    }
    return Value::undefined(describe(from) + "." + name);
  }

  static std::string describe(const Expr& e) {
    if (e.kind == Expr::Kind::Name) return e.name;
    if (e.kind == Expr::Kind::Attr) return describe(*e.args[0]) + "." + e.name;
    if (e.kind == Expr::Kind::Item && e.args[1]->kind == Expr::Kind::Literal)
      return describe(*e.args[0]) + "[" + py_repr(e.args[1]->value) + "]";
    return "value";
  }

  Value item(const Value& obj, const Value& key, const Expr& from, size_t pos) {
    undefined_check(obj, from);
    if (obj.is_mapping()) {
      if (key.is(Value::Kind::String))
        if (const Value* v = obj.dict->find(key.s)) return *v;
      return Value::undefined(describe(from) + "[" + py_repr(key) + "]");
    }
    if (obj.is(Value::Kind::List) || obj.is(Value::Kind::String)) {
      if (!key.is(Value::Kind::Int)) {
        if (key.is(Value::Kind::String) && obj.is(Value::Kind::String)) {
          Value m = string_method(obj, key.s, pos);
          if (!m.is(Value::Kind::Undefined)) return m;
        }
        return Value::undefined(describe(from) + "[" + py_repr(key) + "]");
      }
      if (obj.is(Value::Kind::List)) {
        const int64_t n = int64_t(obj.list->size());
        const int64_t k = key.i < 0 ? key.i + n : key.i;
        if (k < 0 || k >= n) return Value::undefined(describe(from) + "[" + std::to_string(key.i) + "]");
        return (*obj.list)[size_t(k)];
      }
      const std::vector<size_t> cp = code_point_starts(obj.s);
      const int64_t n = int64_t(cp.size() - 1);
      const int64_t k = key.i < 0 ? key.i + n : key.i;
      if (k < 0 || k >= n) return Value::undefined(describe(from) + "[" + std::to_string(key.i) + "]");
      return Value::string(obj.s.substr(cp[size_t(k)], cp[size_t(k) + 1] - cp[size_t(k)]));
    }
    return Value::undefined(describe(from) + "[" + py_repr(key) + "]");
  }

  Value binary(const Expr& e) {
    const std::string& op = e.name;
    if (op == "and") {
      Value a = eval(*e.args[0]);
      return truthy(a) ? eval(*e.args[1]) : a;
    }
    if (op == "or") {
      Value a = eval(*e.args[0]);
      return truthy(a) ? a : eval(*e.args[1]);
    }
    const Value a = eval(*e.args[0]), b = eval(*e.args[1]);
    pos_ = e.pos;
    if (op == "==") return Value::boolean(equal(a, b));
    if (op == "!=") return Value::boolean(!equal(a, b));
    if (op == "~") {
      std::string s = py_str(a) + py_str(b);
      check_size(s.size(), e.pos);
      return Value::string(std::move(s));
    }
    if (op == "in" || op == "not in") {
      bool found = false;
      if (b.is(Value::Kind::String)) {
        if (!a.is(Value::Kind::String)) fail(e.pos, std::string("'in <string>' requires a string on the left, not ") + kind_name(a));
        found = b.s.find(a.s) != std::string::npos;
      } else if (b.is(Value::Kind::List)) {
        for (const Value& x : *b.list) found = found || equal(a, x);
      } else if (b.is_mapping()) {
        found = a.is(Value::Kind::String) && b.dict->find(a.s) != nullptr;
      } else {
        undefined_check(b, *e.args[1]);
        fail(e.pos, std::string("argument of type ") + kind_name(b) + " is not iterable");
      }
      return Value::boolean(op == "in" ? found : !found);
    }
    undefined_check(a, *e.args[0]);
    undefined_check(b, *e.args[1]);
    if (op == "<" || op == "<=" || op == ">" || op == ">=") {
      int c = 0;
      if (a.is_number() && b.is_number()) c = a.as_double() < b.as_double() ? -1 : a.as_double() > b.as_double() ? 1 : 0;
      else if (a.is(Value::Kind::String) && b.is(Value::Kind::String)) c = a.s.compare(b.s);
      else fail(e.pos, "'" + op + "' not supported between " + kind_name(a) + " and " + kind_name(b));
      return Value::boolean(op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0);
    }
    if (op == "+") {
      if (a.is(Value::Kind::String) && b.is(Value::Kind::String)) {
        check_size(a.s.size() + b.s.size(), e.pos);
        return Value::string(a.s + b.s);
      }
      if (a.is(Value::Kind::List) && b.is(Value::Kind::List)) {
        if (a.list->size() + b.list->size() > kMaxListItems) fail(e.pos, "a list grew past the item limit");
        List l = *a.list;
        l.insert(l.end(), b.list->begin(), b.list->end());
        return Value::list_of(std::move(l));
      }
    }
    if (op == "*" && (a.is(Value::Kind::String) || b.is(Value::Kind::String))) {
      const Value& s = a.is(Value::Kind::String) ? a : b;
      const Value& n = a.is(Value::Kind::String) ? b : a;
      if (!n.is(Value::Kind::Int)) fail(e.pos, "can only repeat a string an integer number of times");
      if (n.i > 0 && s.s.size() * uint64_t(n.i) > kMaxStringBytes) check_size(kMaxStringBytes + 1, e.pos);
      std::string out;
      for (int64_t k = 0; k < n.i; ++k) out += s.s;
      return Value::string(std::move(out));
    }
    if (!a.is_number() || !b.is_number())
      fail(e.pos, "unsupported operand types for " + op + ": " + kind_name(a) + " and " + kind_name(b));
    const bool ints = !a.is(Value::Kind::Float) && !b.is(Value::Kind::Float);
    const int64_t x = a.is(Value::Kind::Bool) ? a.b : a.i, y = b.is(Value::Kind::Bool) ? b.b : b.i;
    const double dx = a.as_double(), dy = b.as_double();
    if (op == "+") return ints ? Value::integer(x + y) : Value::number(dx + dy);
    if (op == "-") return ints ? Value::integer(x - y) : Value::number(dx - dy);
    if (op == "*") return ints ? Value::integer(x * y) : Value::number(dx * dy);
    if (op == "**") return ints && y >= 0 && y < 64 ? Value::integer(int64_t(std::pow(double(x), double(y)))) : Value::number(std::pow(dx, dy));
    if (dy == 0) fail(e.pos, "division by zero");
    if (op == "/") return Value::number(dx / dy);
    if (op == "//") {
      if (!ints) return Value::number(std::floor(dx / dy));
      int64_t q = x / y;
      if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
      return Value::integer(q);
    }
    if (op == "%") {
      if (!ints) return Value::number(dx - std::floor(dx / dy) * dy);
      int64_t r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) r += y;
      return Value::integer(r);
    }
    fail(e.pos, "unsupported operator '" + op + "'");
  }

  // ---- filters ----
  Value filter(const Expr& e) {
    Value v = eval(*e.args[0]);
    CallArgs args = eval_args(e);
    pos_ = e.pos;
    const std::string& f = e.name;
    const auto need_string = [&]() {
      if (v.is(Value::Kind::Undefined)) return std::string();
      return py_str(v);
    };
    if (f == "safe") return v;  // no autoescape in this environment
    if (f == "trim") return Value::string(strip_chars(need_string(), args.get(0, "chars"), true, true));
    if (f == "upper") return Value::string(change_case(need_string(), true));
    if (f == "lower") return Value::string(change_case(need_string(), false));
    if (f == "string") return Value::string(py_str(v));
    if (f == "capitalize" || f == "title") return Value::string(title_case(need_string(), f == "capitalize"));
    if (f == "length" || f == "count") {
      switch (v.kind) {
        case Value::Kind::Undefined: return Value::integer(0);
        case Value::Kind::String: return Value::integer(int64_t(code_point_starts(v.s).size() - 1));
        case Value::Kind::List: return Value::integer(int64_t(v.list->size()));
        case Value::Kind::Dict:
        case Value::Kind::Namespace: return Value::integer(int64_t(v.dict->items.size()));
        default: fail(e.pos, std::string("object of type ") + kind_name(v) + " has no length");
      }
    }
    if (f == "default" || f == "d") {
      const bool boolean = truthy(args.get(1, "boolean", Value::boolean(false)));
      if (v.is(Value::Kind::Undefined) || (boolean && !truthy(v))) return args.get(0, "default_value", Value::string(""));
      return v;
    }
    if (f == "tojson") {
      const Value indent = args.get(0, "indent", Value::none());
      if (!indent.is(Value::Kind::None) && !indent.is(Value::Kind::Int)) fail(e.pos, "tojson: indent must be an integer");
      std::string out, what;
      if (!to_json_text(v, indent.is(Value::Kind::Int) ? int(std::max<int64_t>(0, std::min<int64_t>(indent.i, 64))) : -1,
                        truthy(args.get(3, "sort_keys", Value::boolean(false))), out, &what))
        fail(e.pos, "tojson: " + what);
      check_size(out.size(), e.pos);
      return Value::string(std::move(out));
    }
    if (f == "int") {
      if (v.is(Value::Kind::Int)) return v;
      if (v.is_number()) return Value::integer(int64_t(v.as_double()));
      if (v.is(Value::Kind::String)) {
        char* end = nullptr;
        const long long x = std::strtoll(v.s.c_str(), &end, 10);
        if (end && *end == '\0' && !v.s.empty()) return Value::integer(x);
      }
      return args.get(0, "default", Value::integer(0));
    }
    if (f == "float") {
      if (v.is_number()) return Value::number(v.as_double());
      return args.get(0, "default", Value::number(0.0));
    }
    if (f == "abs") {
      if (v.is(Value::Kind::Int)) return Value::integer(v.i < 0 ? -v.i : v.i);
      if (v.is(Value::Kind::Float)) return Value::number(std::fabs(v.f));
      fail(e.pos, std::string("abs: bad operand ") + kind_name(v));
    }
    if (f == "list") return Value::list_of(iterate(v, e.pos));
    if (f == "first" || f == "last") {
      const List items = iterate(v, e.pos);
      if (items.empty()) return Value::undefined("first/last of an empty sequence");
      return f == "first" ? items.front() : items.back();
    }
    if (f == "reverse") {
      if (v.is(Value::Kind::String)) {
        List chars = iterate(v, e.pos);
        std::string out;
        for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += it->s;
        return Value::string(std::move(out));
      }
      List items = iterate(v, e.pos);
      std::reverse(items.begin(), items.end());
      return Value::list_of(std::move(items));
    }
    if (f == "join") {
      const Value sep = args.get(0, "d", Value::string(""));
      const Value attr = args.get(1, "attribute", Value::none());
      std::string out;
      bool first = true;
      for (const Value& x : iterate(v, e.pos)) {
        if (!first) out += py_str(sep);
        first = false;
        out += py_str(attr.is(Value::Kind::String) && x.is_mapping() && x.dict->find(attr.s) ? *x.dict->find(attr.s) : x);
        check_size(out.size(), e.pos);
      }
      return Value::string(std::move(out));
    }
    if (f == "replace") {
      const Value from = args.get(0, "old"), to = args.get(1, "new");
      if (!from.is(Value::Kind::String) || !to.is(Value::Kind::String)) fail(e.pos, "replace: needs two strings");
      return Value::string(replace_all(need_string(), from.s, to.s, e.pos));
    }
    if (f == "items") {
      if (v.is(Value::Kind::Undefined)) return Value::list_of({});
      if (!v.is_mapping()) fail(e.pos, std::string("items: not a mapping but a ") + kind_name(v));
      return dict_items(v);
    }
    if (f == "selectattr" || f == "rejectattr") {
      const Value attr = args.get(0, nullptr);
      if (!attr.is(Value::Kind::String)) fail(e.pos, f + ": needs an attribute name");
      List out;
      for (const Value& x : iterate(v, e.pos)) {
        const Value a = x.is_mapping() && x.dict->find(attr.s) ? *x.dict->find(attr.s) : Value::undefined(attr.s);
        bool keep;
        if (args.positional.size() < 2) {
          keep = truthy(a);
        } else {
          const Value name = args.positional[1];
          if (!name.is(Value::Kind::String)) fail(e.pos, f + ": the test name must be a string");
          CallArgs targs;
          targs.positional.assign(args.positional.begin() + 2, args.positional.end());
          keep = apply_test(name.s, a, targs, e.pos);
        }
        if (keep == (f == "selectattr")) out.push_back(x);
      }
      return Value::list_of(std::move(out));
    }
    if (f == "map") {
      const Value attr = args.get(99, "attribute");
      List out;
      if (attr.is(Value::Kind::String)) {
        const Value def = args.get(99, "default");
        for (const Value& x : iterate(v, e.pos))
          out.push_back(x.is_mapping() && x.dict->find(attr.s) ? *x.dict->find(attr.s) : def);
        return Value::list_of(std::move(out));
      }
      const Value name = args.get(0, nullptr);
      if (!name.is(Value::Kind::String)) fail(e.pos, "map: needs attribute= or a filter name");
      for (const Value& x : iterate(v, e.pos)) {
        if (name.s == "string") out.push_back(Value::string(py_str(x)));
        else if (name.s == "trim") out.push_back(Value::string(strip_chars(py_str(x), Value::none(), true, true)));
        else if (name.s == "lower" || name.s == "upper") out.push_back(Value::string(change_case(py_str(x), name.s == "upper")));
        else if (name.s == "tojson") {
          std::string out_json, what;
          if (!to_json_text(x, -1, false, out_json, &what)) fail(e.pos, "tojson: " + what);
          out.push_back(Value::string(std::move(out_json)));
        } else fail(e.pos, "unsupported filter in map: '" + name.s + "'");
      }
      return Value::list_of(std::move(out));
    }
    if (f == "unique") {
      List out;
      for (const Value& x : iterate(v, e.pos))
        if (std::none_of(out.begin(), out.end(), [&](const Value& y) { return equal(x, y); })) out.push_back(x);
      return Value::list_of(std::move(out));
    }
    if (f == "indent") {
      const Value width = args.get(0, "width", Value::integer(4));
      const bool first = truthy(args.get(1, "first", Value::boolean(false)));
      const std::string pad = width.is(Value::Kind::String) ? width.s : std::string(size_t(std::max<int64_t>(0, std::min<int64_t>(width.i, 256))), ' ');
      std::string s = need_string(), out;
      for (size_t k = 0; k < s.size(); ++k) {
        out += s[k];
        if (s[k] == '\n' && k + 1 < s.size() && s[k + 1] != '\n') out += pad;
      }
      return Value::string(first ? pad + out : out);
    }
    fail(e.pos, "unsupported filter '" + f + "'");
  }

  static std::string title_case(const std::string& s, bool capitalize_only) {
    std::string out = s;
    bool start = true;
    for (char& c : out) {
      const bool alpha = std::isalpha(static_cast<unsigned char>(c)) != 0;
      if (capitalize_only) {
        c = char(start ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c)));
        start = false;
      } else {
        c = char(start ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c)));
        start = !alpha;
      }
    }
    return out;
  }

  std::string replace_all(const std::string& s, const std::string& from, const std::string& to, size_t pos) const {
    std::string out;
    if (from.empty()) {
      for (char c : s) out += to + c;
      out += to;
    } else {
      size_t k = 0;
      for (size_t f = s.find(from); f != std::string::npos; f = s.find(from, k)) {
        out.append(s, k, f - k);
        out += to;
        k = f + from.size();
        check_size(out.size(), pos);
      }
      out.append(s, k, std::string::npos);
    }
    check_size(out.size(), pos);
    return out;
  }

  static Value dict_items(const Value& v) {
    List out;
    for (const auto& kv : v.dict->items) out.push_back(Value::tuple_of({Value::string(kv.first), kv.second}));
    return Value::list_of(std::move(out));
  }

  // ---- tests ----
  bool test(const Expr& e) {
    const Value v = eval(*e.args[0]);
    CallArgs args = eval_args(e);
    pos_ = e.pos;
    return apply_test(e.name, v, args, e.pos);
  }

  bool apply_test(const std::string& t, const Value& v, const CallArgs& args, size_t pos) {
    using K = Value::Kind;
    if (t == "defined") return !v.is(K::Undefined);
    if (t == "undefined") return v.is(K::Undefined);
    if (t == "none") return v.is(K::None);
    if (t == "string") return v.is(K::String);
    if (t == "number") return v.is(K::Int) || v.is(K::Float);
    if (t == "integer") return v.is(K::Int);
    if (t == "float") return v.is(K::Float);
    if (t == "boolean") return v.is(K::Bool);
    if (t == "true") return v.is(K::Bool) && v.b;
    if (t == "false") return v.is(K::Bool) && !v.b;
    if (t == "mapping") return v.is_mapping();
    if (t == "sequence") return v.is(K::List) || v.is(K::String) || v.is(K::Dict);
    if (t == "iterable") return v.is(K::List) || v.is(K::String) || v.is(K::Dict);
    if (t == "callable") return v.is(K::Callable);
    if (t == "lower") return v.is(K::String) && change_case(v.s, false) == v.s;
    if (t == "upper") return v.is(K::String) && change_case(v.s, true) == v.s;
    if (t == "even" || t == "odd") {
      if (!v.is(K::Int)) fail(pos, "test '" + t + "' needs an integer");
      return (v.i % 2 == 0) == (t == "even");
    }
    if (t == "divisibleby") {
      const Value n = args.get(0, "num");
      if (!v.is(K::Int) || !n.is(K::Int) || n.i == 0) fail(pos, "test 'divisibleby' needs non-zero integers");
      return v.i % n.i == 0;
    }
    if (t == "eq" || t == "equalto" || t == "==") return equal(v, args.get(0, "other"));
    if (t == "ne" || t == "!=") return !equal(v, args.get(0, "other"));
    if (t == "sameas") {
      const Value o = args.get(0, "other");
      if (v.kind != o.kind) return false;
      if (v.is(K::None) || v.is(K::Undefined)) return true;
      if (v.is(K::Bool)) return v.b == o.b;
      return v.list == o.list && v.dict == o.dict && v.fn == o.fn && v.list && v.dict && v.fn;
    }
    if (t == "in") {
      const Value o = args.get(0, "seq");
      if (o.is(K::List)) return std::any_of(o.list->begin(), o.list->end(), [&](const Value& x) { return equal(v, x); });
      if (o.is(K::String)) return v.is(K::String) && o.s.find(v.s) != std::string::npos;
      if (o.is_mapping()) return v.is(K::String) && o.dict->find(v.s);
      fail(pos, "test 'in' needs a sequence");
    }
    fail(pos, "unsupported test '" + t + "'");
  }

  // ---- methods ----
  Value string_method(const Value& self, const std::string& name, size_t pos) {
    const std::string s = self.s;
    const auto method = [&](auto fn) { return Value::callable([fn](CallArgs& a) -> Value { return fn(a); }); };
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      const bool l = name != "rstrip", r = name != "lstrip";
      return method([s, l, r](CallArgs& a) { return Value::string(strip_chars(s, a.get(0, "chars", Value::none()), l, r)); });
    }
    if (name == "upper" || name == "lower")
      return method([s, name](CallArgs&) { return Value::string(change_case(s, name == "upper")); });
    if (name == "title" || name == "capitalize")
      return method([s, name](CallArgs&) { return Value::string(title_case(s, name == "capitalize")); });
    if (name == "startswith" || name == "endswith") {
      return method([this, s, name, pos](CallArgs& a) {
        const Value p = a.get(0, nullptr);
        List options;
        if (p.is(Value::Kind::String)) options.push_back(p);
        else if (p.is(Value::Kind::List)) options = *p.list;
        bool r = false;
        for (const Value& o : options) {
          if (!o.is(Value::Kind::String)) fail(pos, name + ": needs a string");
          r = r || (o.s.size() <= s.size() &&
                    (name == "startswith" ? s.compare(0, o.s.size(), o.s) == 0 : s.compare(s.size() - o.s.size(), o.s.size(), o.s) == 0));
        }
        if (options.empty()) fail(pos, name + ": needs a string");
        return Value::boolean(r);
      });
    }
    if (name == "split" || name == "rsplit") {
      return method([this, s, name, pos](CallArgs& a) {
        const Value sep = a.get(0, "sep", Value::none());
        const Value maxsplit_v = a.get(1, "maxsplit", Value::integer(-1));
        const int64_t maxsplit = maxsplit_v.is(Value::Kind::Int) ? maxsplit_v.i : -1;
        List parts;
        if (sep.is(Value::Kind::None)) {
          if (name == "rsplit" && maxsplit >= 0) fail(pos, "rsplit with maxsplit and no separator is unsupported");
          size_t k = 0;
          int64_t n = 0;
          while (k < s.size()) {
            while (k < s.size() && std::isspace(static_cast<unsigned char>(s[k]))) ++k;
            if (k >= s.size()) break;
            if (maxsplit >= 0 && n >= maxsplit) {
              size_t e = s.size();
              while (e > k && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
              parts.push_back(Value::string(s.substr(k, e - k)));
              break;
            }
            size_t e = k;
            while (e < s.size() && !std::isspace(static_cast<unsigned char>(s[e]))) ++e;
            parts.push_back(Value::string(s.substr(k, e - k)));
            ++n;
            k = e;
          }
          return Value::list_of(std::move(parts));
        }
        if (!sep.is(Value::Kind::String) || sep.s.empty()) fail(pos, name + ": the separator must be a non-empty string");
        if (name == "split") {
          size_t k = 0;
          int64_t n = 0;
          for (size_t f = s.find(sep.s); f != std::string::npos && (maxsplit < 0 || n < maxsplit); f = s.find(sep.s, k), ++n) {
            parts.push_back(Value::string(s.substr(k, f - k)));
            k = f + sep.s.size();
          }
          parts.push_back(Value::string(s.substr(k)));
        } else {
          size_t e = s.size();
          int64_t n = 0;
          while (maxsplit < 0 || n < maxsplit) {
            if (e < sep.s.size()) break;
            const size_t f = s.rfind(sep.s, e - sep.s.size());
            if (f == std::string::npos) break;
            parts.insert(parts.begin(), Value::string(s.substr(f + sep.s.size(), e - f - sep.s.size())));
            e = f;
            ++n;
          }
          parts.insert(parts.begin(), Value::string(s.substr(0, e)));
        }
        return Value::list_of(std::move(parts));
      });
    }
    if (name == "replace") {
      return method([this, s, pos](CallArgs& a) {
        const Value from = a.get(0, nullptr), to = a.get(1, nullptr);
        if (!from.is(Value::Kind::String) || !to.is(Value::Kind::String)) fail(pos, "replace: needs two strings");
        return Value::string(replace_all(s, from.s, to.s, pos));
      });
    }
    if (name == "join") {
      return method([this, s, pos](CallArgs& a) {
        std::string out;
        bool first = true;
        for (const Value& x : iterate(a.get(0, nullptr), pos)) {
          if (!x.is(Value::Kind::String)) fail(pos, "join: sequence item is not a string");
          if (!first) out += s;
          first = false;
          out += x.s;
          check_size(out.size(), pos);
        }
        return Value::string(std::move(out));
      });
    }
    if (name == "find" || name == "count") {
      return method([this, s, name, pos](CallArgs& a) {
        const Value sub = a.get(0, nullptr);
        if (!sub.is(Value::Kind::String)) fail(pos, name + ": needs a string");
        if (name == "find") {
          const size_t f = s.find(sub.s);
          return Value::integer(f == std::string::npos ? -1 : int64_t(code_point_starts(s.substr(0, f)).size() - 1));
        }
        int64_t n = 0;
        if (sub.s.empty()) return Value::integer(int64_t(code_point_starts(s).size()));
        for (size_t f = s.find(sub.s); f != std::string::npos; f = s.find(sub.s, f + sub.s.size())) ++n;
        return Value::integer(n);
      });
    }
    if (name == "isdigit" || name == "isspace" || name == "isalpha" || name == "isalnum") {
      return method([s, name](CallArgs&) {
        bool r = !s.empty();
        for (unsigned char c : s)
          r = r && (name == "isdigit" ? std::isdigit(c) : name == "isspace" ? std::isspace(c)
                    : name == "isalpha" ? std::isalpha(c) : std::isalnum(c));
        return Value::boolean(r);
      });
    }
    return Value::undefined();
  }

  Value dict_method(const Value& self, const std::string& name, size_t pos) {
    (void)pos;
    const Value d = self;
    if (name == "items") return Value::callable([d](CallArgs&) { return dict_items(d); });
    if (name == "keys" || name == "values") {
      return Value::callable([d, name](CallArgs&) {
        List out;
        for (const auto& kv : d.dict->items) out.push_back(name == "keys" ? Value::string(kv.first) : kv.second);
        return Value::list_of(std::move(out));
      });
    }
    if (name == "get") {
      return Value::callable([d](CallArgs& a) {
        const Value key = a.get(0, "key");
        if (key.is(Value::Kind::String))
          if (const Value* v = d.dict->find(key.s)) return *v;
        return a.get(1, "default", Value::none());
      });
    }
    return Value::undefined();
  }

  // ---- globals ----
  void install_globals(Scope& g) {
    g["raise_exception"] = Value::callable([this](CallArgs& a) -> Value {
      fail(pos_, "the template raised an error: " + py_str(a.get(0, "message")));
    });
    g["strftime_now"] = Value::callable([this](CallArgs& a) -> Value {
      const Value fmt = a.get(0, "format");
      if (!fmt.is(Value::Kind::String)) fail(pos_, "strftime_now: needs a format string");
      const std::time_t now = std::time(nullptr);
      std::tm tm{};
      localtime_r(&now, &tm);
      char buf[256];
      const size_t n = std::strftime(buf, sizeof buf, fmt.s.c_str(), &tm);
      return Value::string(std::string(buf, n));
    });
    const auto make_dict = [](Value::Kind kind) {
      return [kind](CallArgs& a) {
        Dict d;
        for (const Value& p : a.positional)
          if (p.is_mapping())
            for (const auto& kv : p.dict->items) d.set(kv.first, kv.second);
        for (const auto& kv : a.keyword) d.set(kv.first, kv.second);
        return Value::dict_of(std::move(d), kind);
      };
    };
    g["namespace"] = Value::callable(make_dict(Value::Kind::Namespace));
    g["dict"] = Value::callable(make_dict(Value::Kind::Dict));
    g["range"] = Value::callable([this](CallArgs& a) -> Value {
      for (const Value& v : a.positional)
        if (!v.is(Value::Kind::Int)) fail(pos_, "range: arguments must be integers");
      if (a.positional.empty() || a.positional.size() > 3) fail(pos_, "range: takes 1 to 3 arguments");
      const int64_t start = a.positional.size() > 1 ? a.positional[0].i : 0;
      const int64_t stop = a.positional.size() > 1 ? a.positional[1].i : a.positional[0].i;
      const int64_t stride = a.positional.size() > 2 ? a.positional[2].i : 1;
      if (stride == 0) fail(pos_, "range: step must not be zero");
      List out;
      for (int64_t k = start; stride > 0 ? k < stop : k > stop; k += stride) {
        if (out.size() >= kMaxListItems) fail(pos_, "range: more than " + std::to_string(kMaxListItems) + " items");
        out.push_back(Value::integer(k));
      }
      return Value::list_of(std::move(out));
    });
  }
};

}  // namespace

std::string render_template(const Source& source, const Body& root, const nlohmann::ordered_json& variables) {
  Renderer r(source, root);
  return r.run(variables);
}

}  // namespace endor::chat
