// Python semantics of template values: truth, ==, str(), repr(), json.dumps().
#include "value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace endor::chat {

const Value* Dict::find(const std::string& key) const {
  for (const auto& kv : items)
    if (kv.first == key) return &kv.second;
  return nullptr;
}

void Dict::set(const std::string& key, Value v) {
  for (auto& kv : items)
    if (kv.first == key) {
      kv.second = std::move(v);
      return;
    }
  items.emplace_back(key, std::move(v));
}

Value Value::list_of(List items) {
  Value v;
  v.kind = Kind::List;
  v.list = std::make_shared<List>(std::move(items));
  return v;
}

Value Value::dict_of(Dict d, Kind kind) {
  Value v;
  v.kind = kind;
  v.dict = std::make_shared<Dict>(std::move(d));
  return v;
}

Value Value::callable(Builtin f) {
  Value v;
  v.kind = Kind::Callable;
  v.fn = std::make_shared<Builtin>(std::move(f));
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return none();
    case nlohmann::ordered_json::value_t::boolean: return boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      return u > uint64_t(INT64_MAX) ? number(double(u)) : integer(int64_t(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return number(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List l;
      for (const auto& e : j) l.push_back(from_json(e));
      return list_of(std::move(l));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      for (auto it = j.begin(); it != j.end(); ++it) d.items.emplace_back(it.key(), from_json(it.value()));
      return dict_of(std::move(d));
    }
    default: return none();
  }
}

Value CallArgs::get(size_t n, const char* name, Value fallback) const {
  if (n < positional.size()) return positional[n];
  if (name)
    for (const auto& kv : keyword)
      if (kv.first == name) return kv.second;
  return fallback;
}

const char* kind_name(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined: return "undefined";
    case Value::Kind::None: return "NoneType";
    case Value::Kind::Bool: return "bool";
    case Value::Kind::Int: return "int";
    case Value::Kind::Float: return "float";
    case Value::Kind::String: return "str";
    case Value::Kind::List: return "list";
    case Value::Kind::Dict: return "dict";
    case Value::Kind::Namespace: return "namespace";
    case Value::Kind::Callable: return "function";
  }
  return "?";
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return false;
    case Value::Kind::Bool: return v.b;
    case Value::Kind::Int: return v.i != 0;
    case Value::Kind::Float: return v.f != 0;
    case Value::Kind::String: return !v.s.empty();
    case Value::Kind::List: return !v.list->empty();
    case Value::Kind::Dict: return !v.dict->items.empty();
    default: return true;
  }
}

bool equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind != Value::Kind::Float && b.kind != Value::Kind::Float)
      return (a.kind == Value::Kind::Bool ? int64_t(a.b) : a.i) == (b.kind == Value::Kind::Bool ? int64_t(b.b) : b.i);
    return a.as_double() == b.as_double();
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return true;
    case Value::Kind::String: return a.s == b.s;
    case Value::Kind::List:
      if (a.list->size() != b.list->size()) return false;
      for (size_t k = 0; k < a.list->size(); ++k)
        if (!equal((*a.list)[k], (*b.list)[k])) return false;
      return true;
    case Value::Kind::Dict:
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& kv : a.dict->items) {
        const Value* other = b.dict->find(kv.first);
        if (!other || !equal(kv.second, *other)) return false;
      }
      return true;
    default: return a.dict == b.dict && a.fn == b.fn;  // identity
  }
}

std::string py_float_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  // Shortest digits that round-trip, then Python's layout: fixed for 1e-4 <= |x| < 1e16.
  char buf[40];
  int precision = 1;
  for (; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*e", precision - 1, x);
    if (std::strtod(buf, nullptr) == x) break;
  }
  std::string text = buf;
  const size_t e = text.find('e');
  const int exponent = std::atoi(text.c_str() + e + 1);
  std::string digits;
  bool negative = false;
  for (size_t k = 0; k < e; ++k) {
    if (text[k] == '-') negative = true;
    else if (text[k] != '.') digits += text[k];
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out += "0." + std::string(size_t(-exponent - 1), '0') + digits;
    } else if (size_t(exponent) + 1 >= digits.size()) {
      out += digits + std::string(size_t(exponent) + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, size_t(exponent) + 1) + "." + digits.substr(size_t(exponent) + 1);
    }
  } else {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp[16];
    std::snprintf(exp, sizeof exp, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += exp;
  }
  return out;
}

namespace {

std::string repr_string(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos, has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == quote) out += std::string("\\") + char(c);
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  out += quote;
  return out;
}

void json_string(const std::string& s, std::string& out) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += char(c);
        }
    }
  }
  out += '"';
}

bool json_value(const Value& v, int indent, bool sort_keys, int level, std::string& out, std::string* what) {
  const auto newline = [&](int lvl) {
    if (indent >= 0) out += "\n" + std::string(size_t(indent) * size_t(lvl), ' ');
  };
  const char* item_sep = indent >= 0 ? "," : ", ";
  switch (v.kind) {
    case Value::Kind::None: out += "null"; return true;
    case Value::Kind::Bool: out += v.b ? "true" : "false"; return true;
    case Value::Kind::Int: out += std::to_string(v.i); return true;
    case Value::Kind::Float:
      out += std::isnan(v.f) ? "NaN" : std::isinf(v.f) ? (v.f > 0 ? "Infinity" : "-Infinity") : py_float_repr(v.f);
      return true;
    case Value::Kind::String: json_string(v.s, out); return true;
    case Value::Kind::List: {
      if (v.list->empty()) {
        out += "[]";
        return true;
      }
      out += '[';
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += item_sep;
        newline(level + 1);
        if (!json_value((*v.list)[k], indent, sort_keys, level + 1, out, what)) return false;
      }
      newline(level);
      out += ']';
      return true;
    }
    case Value::Kind::Dict:
    case Value::Kind::Namespace: {
      if (v.dict->items.empty()) {
        out += "{}";
        return true;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.dict->items) items.push_back(&kv);
      if (sort_keys)
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      out += '{';
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += item_sep;
        newline(level + 1);
        json_string(items[k]->first, out);
        out += ": ";
        if (!json_value(items[k]->second, indent, sort_keys, level + 1, out, what)) return false;
      }
      newline(level);
      out += '}';
      return true;
    }
    default:
      if (what) *what = std::string("Object of type ") + kind_name(v) + " is not JSON serializable";
      return false;
  }
}

}  // namespace

std::string py_repr(const Value& v) {
  switch (v.kind) {
    case Value::Kind::String: return repr_string(v.s);
    case Value::Kind::List: {
      std::string out = v.tuple ? "(" : "[";
      for (size_t k = 0; k < v.list->size(); ++k) out += (k ? ", " : "") + py_repr((*v.list)[k]);
      if (v.tuple && v.list->size() == 1) out += ",";
      return out + (v.tuple ? ")" : "]");
    }
    case Value::Kind::Dict: {
      std::string out = "{";
      for (size_t k = 0; k < v.dict->items.size(); ++k)
        out += (k ? ", " : "") + repr_string(v.dict->items[k].first) + ": " + py_repr(v.dict->items[k].second);
      return out + "}";
    }
    default: return py_str(v);
  }
}

std::string py_str(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined: return "";
    case Value::Kind::None: return "None";
    case Value::Kind::Bool: return v.b ? "True" : "False";
    case Value::Kind::Int: return std::to_string(v.i);
    case Value::Kind::Float: return py_float_repr(v.f);
    case Value::Kind::String: return v.s;
    case Value::Kind::Namespace: return "<Namespace>";
    case Value::Kind::Callable: return "<function>";
    default: return py_repr(v);
  }
}

bool to_json_text(const Value& v, int indent, bool sort_keys, std::string& out, std::string* what) {
  return json_value(v, indent, sort_keys, 0, out, what);
}

namespace {

uint32_t upper_of(uint32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0x80) return c;
  if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c == 0xB5) return 0x39C;
  if (c >= 0x100 && c <= 0x17F) {
    if (c == 0x131) return 'I';
    if (c == 0x17F) return 'S';
    const bool odd_lower = (c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177);
    const bool even_lower = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    if (odd_lower && (c & 1)) return c - 1;
    if (even_lower && !(c & 1)) return c - 1;
    return c;
  }
  if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 32;
  if (c == 0x3C2) return 0x3A3;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}

uint32_t lower_of(uint32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0x80) return c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c == 0x178) return 0xFF;
  if (c >= 0x100 && c <= 0x17F) {
    if (c == 0x130) return 'i';  // Python gives "i̇"; close enough for templates
    const bool odd_lower = (c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177);
    const bool even_lower = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    if (odd_lower && !(c & 1)) return c + 1;
    if (even_lower && (c & 1)) return c + 1;
    return c;
  }
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

void put_utf8(std::string& out, uint32_t cp) {
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

}  // namespace

std::string change_case(const std::string& s, bool upper) {
  std::string out;
  out.reserve(s.size());
  for (size_t k = 0; k < s.size();) {
    const unsigned char b = static_cast<unsigned char>(s[k]);
    // Only 1- and 2-byte sequences have case pairs here; longer ones are copied as they are.
    if (b < 0x80) {
      out += char(upper ? upper_of(b) : lower_of(b));
      ++k;
    } else if ((b & 0xE0) == 0xC0 && k + 1 < s.size() && (static_cast<unsigned char>(s[k + 1]) & 0xC0) == 0x80) {
      const uint32_t cp = (uint32_t(b & 0x1F) << 6) | (static_cast<unsigned char>(s[k + 1]) & 0x3F);
      if (upper && cp == 0xDF) out += "SS";
      else put_utf8(out, upper ? upper_of(cp) : lower_of(cp));
      k += 2;
    } else {
      out += s[k++];
    }
  }
  return out;
}

std::vector<size_t> code_point_starts(const std::string& s) {
  std::vector<size_t> starts;
  for (size_t k = 0; k < s.size(); ++k)
    if ((static_cast<unsigned char>(s[k]) & 0xC0) != 0x80) starts.push_back(k);
  starts.push_back(s.size());
  return starts;
}

}  // namespace endor::chat
