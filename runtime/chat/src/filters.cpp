// The built-in filters and tests of transformers' chat-template environment (builtins.h), with
// Jinja's semantics as jinja2 3.x has them for the values a chat template sees.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <unordered_map>

#include "builtins.h"

namespace endor::chat {

std::string strip_chars(const std::string& s, const Value& chars, bool left, bool right) {
  const std::string set = chars.is(Value::Kind::String) ? chars.s : std::string(" \t\n\r\f\v");
  size_t b = 0, e = s.size();
  if (left)
    while (b < e && set.find(s[b]) != std::string::npos) ++b;
  if (right)
    while (e > b && set.find(s[e - 1]) != std::string::npos) --e;
  return s.substr(b, e - b);
}

std::string title_case(const std::string& s, bool capitalize_only) {
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

std::string replace_all(const RenderContext& cx, const std::string& s, const std::string& from, const std::string& to,
                        size_t pos) {
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
      cx.check_size(out.size(), pos);
    }
    out.append(s, k, std::string::npos);
  }
  cx.check_size(out.size(), pos);
  return out;
}

Value dict_items(const Value& v) {
  List out;
  for (const auto& kv : v.dict->items) out.push_back(Value::tuple_of({Value::string(kv.first), kv.second}));
  return Value::list_of(std::move(out));
}

namespace {

using K = Value::Kind;

// The operand of a string filter: undefined is "" (Jinja's undefined prints as nothing).
std::string need_string(const Value& v) { return v.is(K::Undefined) ? std::string() : py_str(v); }

// ---- filters ----

Value filter_safe(const BuiltinCall& c) { return c.value; }  // no autoescape in this environment
Value filter_trim(const BuiltinCall& c) {
  return Value::string(strip_chars(need_string(c.value), c.args.get(0, "chars"), true, true));
}
Value filter_upper(const BuiltinCall& c) { return Value::string(change_case(need_string(c.value), true)); }
Value filter_lower(const BuiltinCall& c) { return Value::string(change_case(need_string(c.value), false)); }
Value filter_string(const BuiltinCall& c) { return Value::string(py_str(c.value)); }
// title, capitalize
Value filter_title(const BuiltinCall& c) {
  return Value::string(title_case(need_string(c.value), c.name == "capitalize"));
}

// length, count
Value filter_length(const BuiltinCall& c) {
  const Value& v = c.value;
  switch (v.kind) {
    case K::Undefined: return Value::integer(0);
    case K::String: return Value::integer(int64_t(code_point_starts(v.s).size() - 1));
    case K::List: return Value::integer(int64_t(v.list->size()));
    case K::Dict:
    case K::Namespace: return Value::integer(int64_t(v.dict->items.size()));
    default: c.cx.fail(c.pos, std::string("object of type ") + kind_name(v) + " has no length");
  }
}

// default, d
Value filter_default(const BuiltinCall& c) {
  const bool boolean = truthy(c.args.get(1, "boolean", Value::boolean(false)));
  if (c.value.is(K::Undefined) || (boolean && !truthy(c.value))) return c.args.get(0, "default_value", Value::string(""));
  return c.value;
}

Value filter_tojson(const BuiltinCall& c) {
  const Value indent = c.args.get(0, "indent", Value::none());
  if (!indent.is(K::None) && !indent.is(K::Int)) c.cx.fail(c.pos, "tojson: indent must be an integer");
  std::string out, what;
  if (!to_json_text(c.value, indent.is(K::Int) ? int(std::max<int64_t>(0, std::min<int64_t>(indent.i, 64))) : -1,
                    truthy(c.args.get(3, "sort_keys", Value::boolean(false))), out, &what))
    c.cx.fail(c.pos, "tojson: " + what);
  c.cx.check_size(out.size(), c.pos);
  return Value::string(std::move(out));
}

Value filter_int(const BuiltinCall& c) {
  const Value& v = c.value;
  if (v.is(K::Int)) return v;
  if (v.is_number()) return Value::integer(int64_t(v.as_double()));
  if (v.is(K::String)) {
    char* end = nullptr;
    const long long x = std::strtoll(v.s.c_str(), &end, 10);
    if (end && *end == '\0' && !v.s.empty()) return Value::integer(x);
  }
  return c.args.get(0, "default", Value::integer(0));
}

Value filter_float(const BuiltinCall& c) {
  if (c.value.is_number()) return Value::number(c.value.as_double());
  return c.args.get(0, "default", Value::number(0.0));
}

Value filter_abs(const BuiltinCall& c) {
  const Value& v = c.value;
  if (v.is(K::Int)) return Value::integer(v.i < 0 ? -v.i : v.i);
  if (v.is(K::Float)) return Value::number(std::fabs(v.f));
  c.cx.fail(c.pos, std::string("abs: bad operand ") + kind_name(v));
}

Value filter_list(const BuiltinCall& c) { return Value::list_of(c.cx.iterate(c.value, c.pos)); }

// first, last
Value filter_first(const BuiltinCall& c) {
  const List items = c.cx.iterate(c.value, c.pos);
  if (items.empty()) return Value::undefined("first/last of an empty sequence");
  return c.name == "first" ? items.front() : items.back();
}

Value filter_reverse(const BuiltinCall& c) {
  if (c.value.is(K::String)) {
    List chars = c.cx.iterate(c.value, c.pos);
    std::string out;
    for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += it->s;
    return Value::string(std::move(out));
  }
  List items = c.cx.iterate(c.value, c.pos);
  std::reverse(items.begin(), items.end());
  return Value::list_of(std::move(items));
}

Value filter_join(const BuiltinCall& c) {
  const Value sep = c.args.get(0, "d", Value::string(""));
  const Value attr = c.args.get(1, "attribute", Value::none());
  std::string out;
  bool first = true;
  for (const Value& x : c.cx.iterate(c.value, c.pos)) {
    if (!first) out += py_str(sep);
    first = false;
    out += py_str(attr.is(K::String) && x.is_mapping() && x.dict->find(attr.s) ? *x.dict->find(attr.s) : x);
    c.cx.check_size(out.size(), c.pos);
  }
  return Value::string(std::move(out));
}

Value filter_replace(const BuiltinCall& c) {
  const Value from = c.args.get(0, "old"), to = c.args.get(1, "new");
  if (!from.is(K::String) || !to.is(K::String)) c.cx.fail(c.pos, "replace: needs two strings");
  return Value::string(replace_all(c.cx, need_string(c.value), from.s, to.s, c.pos));
}

Value filter_items(const BuiltinCall& c) {
  if (c.value.is(K::Undefined)) return Value::list_of({});
  if (!c.value.is_mapping()) c.cx.fail(c.pos, std::string("items: not a mapping but a ") + kind_name(c.value));
  return dict_items(c.value);
}

// selectattr, rejectattr: items whose attribute passes (fails) the test named by the second
// argument (its further arguments the test's), or is truthy (falsy) without one.
Value filter_selectattr(const BuiltinCall& c) {
  const Value attr = c.args.get(0, nullptr);
  if (!attr.is(K::String)) c.cx.fail(c.pos, c.name + ": needs an attribute name");
  List out;
  for (const Value& x : c.cx.iterate(c.value, c.pos)) {
    const Value a = x.is_mapping() && x.dict->find(attr.s) ? *x.dict->find(attr.s) : Value::undefined(attr.s);
    bool keep;
    if (c.args.positional.size() < 2) {
      keep = truthy(a);
    } else {
      const Value name = c.args.positional[1];
      if (!name.is(K::String)) c.cx.fail(c.pos, c.name + ": the test name must be a string");
      CallArgs targs;
      targs.positional.assign(c.args.positional.begin() + 2, c.args.positional.end());
      keep = apply_test(c.cx, name.s, a, targs, c.pos);
    }
    if (keep == (c.name == "selectattr")) out.push_back(x);
  }
  return Value::list_of(std::move(out));
}

// map(attribute=...) or map(filter name) for the filters a chat template maps with.
Value filter_map(const BuiltinCall& c) {
  const Value attr = c.args.get(99, "attribute");
  List out;
  if (attr.is(K::String)) {
    const Value def = c.args.get(99, "default");
    for (const Value& x : c.cx.iterate(c.value, c.pos))
      out.push_back(x.is_mapping() && x.dict->find(attr.s) ? *x.dict->find(attr.s) : def);
    return Value::list_of(std::move(out));
  }
  const Value name = c.args.get(0, nullptr);
  if (!name.is(K::String)) c.cx.fail(c.pos, "map: needs attribute= or a filter name");
  for (const Value& x : c.cx.iterate(c.value, c.pos)) {
    if (name.s == "string") out.push_back(Value::string(py_str(x)));
    else if (name.s == "trim") out.push_back(Value::string(strip_chars(py_str(x), Value::none(), true, true)));
    else if (name.s == "lower" || name.s == "upper") out.push_back(Value::string(change_case(py_str(x), name.s == "upper")));
    else if (name.s == "tojson") {
      std::string out_json, what;
      if (!to_json_text(x, -1, false, out_json, &what)) c.cx.fail(c.pos, "tojson: " + what);
      out.push_back(Value::string(std::move(out_json)));
    } else c.cx.fail(c.pos, "unsupported filter in map: '" + name.s + "'");
  }
  return Value::list_of(std::move(out));
}

Value filter_unique(const BuiltinCall& c) {
  List out;
  for (const Value& x : c.cx.iterate(c.value, c.pos))
    if (std::none_of(out.begin(), out.end(), [&](const Value& y) { return equal(x, y); })) out.push_back(x);
  return Value::list_of(std::move(out));
}

Value filter_indent(const BuiltinCall& c) {
  const Value width = c.args.get(0, "width", Value::integer(4));
  const bool first = truthy(c.args.get(1, "first", Value::boolean(false)));
  const std::string pad = width.is(K::String) ? width.s : std::string(size_t(std::max<int64_t>(0, std::min<int64_t>(width.i, 256))), ' ');
  std::string s = need_string(c.value), out;
  for (size_t k = 0; k < s.size(); ++k) {
    out += s[k];
    if (s[k] == '\n' && k + 1 < s.size() && s[k + 1] != '\n') out += pad;
  }
  return Value::string(first ? pad + out : out);
}

// ---- tests ----

// even, odd
bool test_even(const BuiltinCall& c) {
  if (!c.value.is(K::Int)) c.cx.fail(c.pos, "test '" + c.name + "' needs an integer");
  return (c.value.i % 2 == 0) == (c.name == "even");
}

bool test_divisibleby(const BuiltinCall& c) {
  const Value n = c.args.get(0, "num");
  if (!c.value.is(K::Int) || !n.is(K::Int) || n.i == 0) c.cx.fail(c.pos, "test 'divisibleby' needs non-zero integers");
  return c.value.i % n.i == 0;
}

bool test_sameas(const BuiltinCall& c) {
  const Value& v = c.value;
  const Value o = c.args.get(0, "other");
  if (v.kind != o.kind) return false;
  if (v.is(K::None) || v.is(K::Undefined)) return true;
  if (v.is(K::Bool)) return v.b == o.b;
  return v.list == o.list && v.dict == o.dict && v.fn == o.fn && v.list && v.dict && v.fn;
}

bool test_in(const BuiltinCall& c) {
  const Value& v = c.value;
  const Value o = c.args.get(0, "seq");
  if (o.is(K::List)) return std::any_of(o.list->begin(), o.list->end(), [&](const Value& x) { return equal(v, x); });
  if (o.is(K::String)) return v.is(K::String) && o.s.find(v.s) != std::string::npos;
  if (o.is_mapping()) return v.is(K::String) && o.dict->find(v.s);
  c.cx.fail(c.pos, "test 'in' needs a sequence");
}

template <Value::Kind kKind>
bool test_kind(const BuiltinCall& c) { return c.value.is(kKind); }
bool test_defined(const BuiltinCall& c) { return !c.value.is(K::Undefined); }
bool test_number(const BuiltinCall& c) { return c.value.is(K::Int) || c.value.is(K::Float); }
// true, false: the booleans themselves, not truthiness
bool test_true(const BuiltinCall& c) { return c.value.is(K::Bool) && c.value.b == (c.name == "true"); }
bool test_mapping(const BuiltinCall& c) { return c.value.is_mapping(); }
// sequence, iterable
bool test_iterable(const BuiltinCall& c) { return c.value.is(K::List) || c.value.is(K::String) || c.value.is(K::Dict); }
// lower, upper: a string that the case change leaves as it is
bool test_lower(const BuiltinCall& c) {
  return c.value.is(K::String) && change_case(c.value.s, c.name == "upper") == c.value.s;
}
// eq, equalto, ==
bool test_eq(const BuiltinCall& c) { return equal(c.value, c.args.get(0, "other")); }
// ne, !=
bool test_ne(const BuiltinCall& c) { return !equal(c.value, c.args.get(0, "other")); }

}  // namespace

FilterFn find_filter(const std::string& name) {
  static const std::unordered_map<std::string, FilterFn> kFilters = {
      {"safe", filter_safe},           {"trim", filter_trim},
      {"upper", filter_upper},         {"lower", filter_lower},
      {"string", filter_string},       {"capitalize", filter_title},
      {"title", filter_title},         {"length", filter_length},
      {"count", filter_length},        {"default", filter_default},
      {"d", filter_default},           {"tojson", filter_tojson},
      {"int", filter_int},             {"float", filter_float},
      {"abs", filter_abs},             {"list", filter_list},
      {"first", filter_first},         {"last", filter_first},
      {"reverse", filter_reverse},     {"join", filter_join},
      {"replace", filter_replace},     {"items", filter_items},
      {"selectattr", filter_selectattr}, {"rejectattr", filter_selectattr},
      {"map", filter_map},             {"unique", filter_unique},
      {"indent", filter_indent},
  };
  const auto it = kFilters.find(name);
  return it == kFilters.end() ? nullptr : it->second;
}

TestFn find_test(const std::string& name) {
  static const std::unordered_map<std::string, TestFn> kTests = {
      {"defined", test_defined},       {"undefined", test_kind<K::Undefined>},
      {"none", test_kind<K::None>},    {"string", test_kind<K::String>},
      {"number", test_number},         {"integer", test_kind<K::Int>},
      {"float", test_kind<K::Float>},  {"boolean", test_kind<K::Bool>},
      {"true", test_true},             {"false", test_true},
      {"mapping", test_mapping},       {"sequence", test_iterable},
      {"iterable", test_iterable},     {"callable", test_kind<K::Callable>},
      {"lower", test_lower},           {"upper", test_lower},
      {"even", test_even},             {"odd", test_even},
      {"divisibleby", test_divisibleby}, {"eq", test_eq},
      {"equalto", test_eq},            {"==", test_eq},
      {"ne", test_ne},                 {"!=", test_ne},
      {"sameas", test_sameas},         {"in", test_in},
  };
  const auto it = kTests.find(name);
  return it == kTests.end() ? nullptr : it->second;
}

bool apply_test(const RenderContext& cx, const std::string& name, const Value& v, const CallArgs& args, size_t pos) {
  const TestFn test = find_test(name);
  if (!test) cx.fail(pos, "unsupported test '" + name + "'");
  return test(BuiltinCall{cx, name, v, args, pos});
}

}  // namespace endor::chat
