// The methods of str and dict values a chat template calls (builtins.h): `s.strip()`,
// `message.content.split(...)`, `d.items()`, ... Each table entry binds `self` into a callable;
// calling it applies the method as Python does for the strings and dicts a template sees.
#include <cctype>
#include <unordered_map>

#include "builtins.h"

namespace endor::chat {
namespace {

using K = Value::Kind;

// ---- str ----

// strip, lstrip, rstrip
Value str_strip(const RenderContext&, const Value& self, const std::string& name, size_t) {
  const bool l = name != "rstrip", r = name != "lstrip";
  return Value::callable([s = self.s, l, r](CallArgs& a) {
    return Value::string(strip_chars(s, a.get(0, "chars", Value::none()), l, r));
  });
}

// upper, lower
Value str_upper(const RenderContext&, const Value& self, const std::string& name, size_t) {
  return Value::callable([s = self.s, name](CallArgs&) { return Value::string(change_case(s, name == "upper")); });
}

// title, capitalize
Value str_title(const RenderContext&, const Value& self, const std::string& name, size_t) {
  return Value::callable([s = self.s, name](CallArgs&) { return Value::string(title_case(s, name == "capitalize")); });
}

// startswith, endswith: a string or a list of strings.
Value str_startswith(const RenderContext& cx, const Value& self, const std::string& name, size_t pos) {
  return Value::callable([cx = &cx, s = self.s, name, pos](CallArgs& a) {
    const Value p = a.get(0, nullptr);
    List options;
    if (p.is(K::String)) options.push_back(p);
    else if (p.is(K::List)) options = *p.list;
    bool r = false;
    for (const Value& o : options) {
      if (!o.is(K::String)) cx->fail(pos, name + ": needs a string");
      r = r || (o.s.size() <= s.size() &&
                (name == "startswith" ? s.compare(0, o.s.size(), o.s) == 0 : s.compare(s.size() - o.s.size(), o.s.size(), o.s) == 0));
    }
    if (options.empty()) cx->fail(pos, name + ": needs a string");
    return Value::boolean(r);
  });
}

// str.split() with no separator: runs of whitespace, at most maxsplit splits (< 0: no limit).
List split_whitespace(const std::string& s, int64_t maxsplit) {
  List parts;
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
  return parts;
}

// str.split(sep) (from the left) or str.rsplit(sep) (from the right), sep non-empty.
List split_at(const std::string& s, const std::string& sep, int64_t maxsplit, bool from_right) {
  List parts;
  if (!from_right) {
    size_t k = 0;
    int64_t n = 0;
    for (size_t f = s.find(sep); f != std::string::npos && (maxsplit < 0 || n < maxsplit); f = s.find(sep, k), ++n) {
      parts.push_back(Value::string(s.substr(k, f - k)));
      k = f + sep.size();
    }
    parts.push_back(Value::string(s.substr(k)));
    return parts;
  }
  size_t e = s.size();
  int64_t n = 0;
  while (maxsplit < 0 || n < maxsplit) {
    if (e < sep.size()) break;
    const size_t f = s.rfind(sep, e - sep.size());
    if (f == std::string::npos) break;
    parts.insert(parts.begin(), Value::string(s.substr(f + sep.size(), e - f - sep.size())));
    e = f;
    ++n;
  }
  parts.insert(parts.begin(), Value::string(s.substr(0, e)));
  return parts;
}

// split, rsplit
Value str_split(const RenderContext& cx, const Value& self, const std::string& name, size_t pos) {
  return Value::callable([cx = &cx, s = self.s, name, pos](CallArgs& a) {
    const Value sep = a.get(0, "sep", Value::none());
    const Value maxsplit_v = a.get(1, "maxsplit", Value::integer(-1));
    const int64_t maxsplit = maxsplit_v.is(K::Int) ? maxsplit_v.i : -1;
    if (sep.is(K::None)) {
      if (name == "rsplit" && maxsplit >= 0) cx->fail(pos, "rsplit with maxsplit and no separator is unsupported");
      return Value::list_of(split_whitespace(s, maxsplit));
    }
    if (!sep.is(K::String) || sep.s.empty()) cx->fail(pos, name + ": the separator must be a non-empty string");
    return Value::list_of(split_at(s, sep.s, maxsplit, name == "rsplit"));
  });
}

Value str_replace(const RenderContext& cx, const Value& self, const std::string&, size_t pos) {
  return Value::callable([cx = &cx, s = self.s, pos](CallArgs& a) {
    const Value from = a.get(0, nullptr), to = a.get(1, nullptr);
    if (!from.is(K::String) || !to.is(K::String)) cx->fail(pos, "replace: needs two strings");
    return Value::string(replace_all(*cx, s, from.s, to.s, pos));
  });
}

Value str_join(const RenderContext& cx, const Value& self, const std::string&, size_t pos) {
  return Value::callable([cx = &cx, s = self.s, pos](CallArgs& a) {
    std::string out;
    bool first = true;
    for (const Value& x : cx->iterate(a.get(0, nullptr), pos)) {
      if (!x.is(K::String)) cx->fail(pos, "join: sequence item is not a string");
      if (!first) out += s;
      first = false;
      out += x.s;
      cx->check_size(out.size(), pos);
    }
    return Value::string(std::move(out));
  });
}

// find (a code-point index, -1 when absent), count (non-overlapping occurrences)
Value str_find(const RenderContext& cx, const Value& self, const std::string& name, size_t pos) {
  return Value::callable([cx = &cx, s = self.s, name, pos](CallArgs& a) {
    const Value sub = a.get(0, nullptr);
    if (!sub.is(K::String)) cx->fail(pos, name + ": needs a string");
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

// isdigit, isspace, isalpha, isalnum (ASCII classes; false for "")
Value str_isclass(const RenderContext&, const Value& self, const std::string& name, size_t) {
  return Value::callable([s = self.s, name](CallArgs&) {
    bool r = !s.empty();
    for (unsigned char c : s)
      r = r && (name == "isdigit" ? std::isdigit(c) : name == "isspace" ? std::isspace(c)
                : name == "isalpha" ? std::isalpha(c) : std::isalnum(c));
    return Value::boolean(r);
  });
}

// ---- dict ----

Value dict_items_method(const RenderContext&, const Value& self, const std::string&, size_t) {
  return Value::callable([d = self](CallArgs&) { return dict_items(d); });
}

// keys, values
Value dict_keys(const RenderContext&, const Value& self, const std::string& name, size_t) {
  return Value::callable([d = self, name](CallArgs&) {
    List out;
    for (const auto& kv : d.dict->items) out.push_back(name == "keys" ? Value::string(kv.first) : kv.second);
    return Value::list_of(std::move(out));
  });
}

Value dict_get(const RenderContext&, const Value& self, const std::string&, size_t) {
  return Value::callable([d = self](CallArgs& a) {
    const Value key = a.get(0, "key");
    if (key.is(K::String))
      if (const Value* v = d.dict->find(key.s)) return *v;
    return a.get(1, "default", Value::none());
  });
}

}  // namespace

MethodFn find_string_method(const std::string& name) {
  static const std::unordered_map<std::string, MethodFn> kMethods = {
      {"strip", str_strip},   {"lstrip", str_strip},     {"rstrip", str_strip},       {"upper", str_upper},
      {"lower", str_upper},   {"title", str_title},      {"capitalize", str_title},   {"startswith", str_startswith},
      {"endswith", str_startswith}, {"split", str_split}, {"rsplit", str_split},       {"replace", str_replace},
      {"join", str_join},     {"find", str_find},        {"count", str_find},         {"isdigit", str_isclass},
      {"isspace", str_isclass}, {"isalpha", str_isclass}, {"isalnum", str_isclass},
  };
  const auto it = kMethods.find(name);
  return it == kMethods.end() ? nullptr : it->second;
}

MethodFn find_dict_method(const std::string& name) {
  static const std::unordered_map<std::string, MethodFn> kMethods = {
      {"items", dict_items_method}, {"keys", dict_keys}, {"values", dict_keys}, {"get", dict_get}};
  const auto it = kMethods.find(name);
  return it == kMethods.end() ? nullptr : it->second;
}

}  // namespace endor::chat
