// Evaluates a parsed chat template: Jinja's scoping (a for-loop body is a fresh scope per
// iteration, so `set` inside it does not leak; namespace() objects carry state out), undefined
// values that print as "" but fail on attribute access or arithmetic, the operators and the
// globals of transformers' chat-template environment. Its filters, tests and methods are looked up
// by name in builtins.h's tables (filters.cpp, methods.cpp).
#include "render.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <unordered_map>

#include "builtins.h"

namespace endor::chat {
namespace {

enum class Flow { Normal, Break, Continue };

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

}  // namespace

void RenderContext::fail(size_t pos, const std::string& what) const { throw ChatTemplateError(src_.where(pos) + what); }

void RenderContext::check_size(size_t bytes, size_t pos) const {
  if (bytes > kMaxStringBytes) fail(pos, "a string grew past " + std::to_string(kMaxStringBytes) + " bytes");
}

List RenderContext::iterate(const Value& v, size_t pos) const {
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

namespace {

class Renderer : public RenderContext {
 public:
  Renderer(const Source& src, const Body& root) : RenderContext(src), root_(root) {}

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
      if (obj.is(Value::Kind::Dict))
        if (const MethodFn m = find_dict_method(name)) return m(*this, obj, name, pos);
      return Value::undefined(describe(from) + "." + name);
    }
    if (obj.is(Value::Kind::String))
      if (const MethodFn m = find_string_method(name)) return m(*this, obj, name, pos);
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
        if (key.is(Value::Kind::String) && obj.is(Value::Kind::String))
          if (const MethodFn m = find_string_method(key.s)) return m(*this, obj, key.s, pos);
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

  // ---- filters and tests: the operand and arguments evaluated here, the built-in looked up by name ----
  Value filter(const Expr& e) {
    const Value v = eval(*e.args[0]);
    const CallArgs args = eval_args(e);
    pos_ = e.pos;
    const FilterFn f = find_filter(e.name);
    if (!f) fail(e.pos, "unsupported filter '" + e.name + "'");
    return f(BuiltinCall{*this, e.name, v, args, e.pos});
  }

  bool test(const Expr& e) {
    const Value v = eval(*e.args[0]);
    const CallArgs args = eval_args(e);
    pos_ = e.pos;
    return apply_test(*this, e.name, v, args, e.pos);
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
