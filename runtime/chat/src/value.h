// The values a chat template computes with: Python/Jinja semantics for truth, equality, str(),
// repr() and json.dumps(), over JSON-like data (none, bool, int, float, str, list, dict) plus
// Jinja's undefined, namespace objects and callables.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace endor::chat {

struct Value;
using List = std::vector<Value>;
// Insertion-ordered, string keys (templates only see JSON objects and namespace()/dict() results).
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value v);
};

struct CallArgs;
using Builtin = std::function<Value(CallArgs&)>;

struct Value {
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Callable };
  Kind kind = Kind::Undefined;
  bool b = false;
  bool tuple = false;             // List: a Python tuple (repr with parentheses)
  int64_t i = 0;
  double f = 0;
  std::string s;                 // String; Undefined: the name that was missing (for errors)
  std::shared_ptr<List> list;    // List (also tuples)
  std::shared_ptr<Dict> dict;    // Dict and Namespace (a namespace is mutable and shared)
  std::shared_ptr<Builtin> fn;   // Callable

  static Value undefined(std::string name = {}) { Value v; v.s = std::move(name); return v; }
  static Value none() { Value v; v.kind = Kind::None; return v; }
  static Value boolean(bool x) { Value v; v.kind = Kind::Bool; v.b = x; return v; }
  static Value integer(int64_t x) { Value v; v.kind = Kind::Int; v.i = x; return v; }
  static Value number(double x) { Value v; v.kind = Kind::Float; v.f = x; return v; }
  static Value string(std::string x) { Value v; v.kind = Kind::String; v.s = std::move(x); return v; }
  static Value list_of(List items);
  static Value tuple_of(List items) { Value v = list_of(std::move(items)); v.tuple = true; return v; }
  static Value dict_of(Dict d, Kind kind = Kind::Dict);
  static Value callable(Builtin f);
  static Value from_json(const nlohmann::ordered_json& j);

  bool is(Kind k) const { return kind == k; }
  bool is_number() const { return kind == Kind::Int || kind == Kind::Float || kind == Kind::Bool; }
  bool is_mapping() const { return kind == Kind::Dict || kind == Kind::Namespace; }
  double as_double() const { return kind == Kind::Float ? f : double(kind == Kind::Bool ? int64_t(b) : i); }
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  // The n-th positional or the keyword `name`, else `fallback`.
  Value get(size_t n, const char* name, Value fallback = Value::undefined()) const;
};

const char* kind_name(const Value& v);  // Python-ish type names for errors: "str", "list", ...
bool truthy(const Value& v);
bool equal(const Value& a, const Value& b);
std::string py_str(const Value& v);   // str(v) / what {{ v }} prints (undefined prints "")
std::string py_repr(const Value& v);  // repr(v)
std::string py_float_repr(double x);
// json.dumps(v, ensure_ascii=False, indent, sort_keys) with Python's default separators. Returns
// false (and sets *what) when v holds something JSON cannot encode (undefined, callables).
bool to_json_text(const Value& v, int indent, bool sort_keys, std::string& out, std::string* what);

// str.upper() / str.lower() for ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic (other
// scripts pass through unchanged; ß upper-cases to "SS" as in Python).
std::string change_case(const std::string& s, bool upper);

// UTF-8 helpers: strings are indexed, sliced and measured in code points, as in Python.
std::vector<size_t> code_point_starts(const std::string& s);  // byte offset of each code point, + s.size()

}  // namespace endor::chat
