// The built-in filters, tests and methods of transformers' chat-template environment, as name ->
// function tables (filters.cpp: filters and tests; methods.cpp: str and dict methods). The
// renderer (render.cpp) evaluates the operand and the arguments, then looks the name up here; a
// new built-in is one function and one table row.
#pragma once

#include <string>

#include "syntax.h"

namespace endor::chat {

// What a built-in needs from the render in progress: errors that name the template position, the
// string size limit, and Jinja's iteration of a value. The renderer is one.
class RenderContext {
 public:
  explicit RenderContext(const Source& src) : src_(src) {}
  // Throws ChatTemplateError: "NAME:LINE:COL: what" for byte offset pos.
  [[noreturn]] void fail(size_t pos, const std::string& what) const;
  // Fails when a string of `bytes` would pass kMaxStringBytes.
  void check_size(size_t bytes, size_t pos) const;
  // The items `for x in v` visits: a list's items, a dict's keys, a string's code points, nothing
  // for undefined; fails for anything else.
  List iterate(const Value& v, size_t pos) const;

 protected:
  const Source& src_;
};

// One application of a filter (`value | name(args)`) or test (`value is name(args)`) at byte
// offset pos. name is as written: aliases ("d" and "default", "count" and "length") share a
// function, which may read it.
struct BuiltinCall {
  const RenderContext& cx;
  const std::string& name;
  const Value& value;
  const CallArgs& args;
  size_t pos;
};
using FilterFn = Value (*)(const BuiltinCall&);
using TestFn = bool (*)(const BuiltinCall&);
// `self.name` for a str or dict self: the callable bound to self (self captured by value, so it
// outlives the expression; cx only for the render it was made in).
using MethodFn = Value (*)(const RenderContext& cx, const Value& self, const std::string& name, size_t pos);

// The function of a built-in, or null when there is none of that name.
FilterFn find_filter(const std::string& name);
TestFn find_test(const std::string& name);
MethodFn find_string_method(const std::string& name);
MethodFn find_dict_method(const std::string& name);

// `v is name(args)`, failing at pos for a test that is not built in (the `is` operator and the
// select/reject filters).
bool apply_test(const RenderContext& cx, const std::string& name, const Value& v, const CallArgs& args, size_t pos);

// Helpers the filters and the methods share.
// str.strip/lstrip/rstrip: chars a string of characters to remove, else Python's whitespace.
std::string strip_chars(const std::string& s, const Value& chars, bool left, bool right);
// str.title() (capitalize_only: str.capitalize()) over ASCII letters.
std::string title_case(const std::string& s, bool capitalize_only);
// str.replace(from, to) with every occurrence replaced, checked against the size limit.
std::string replace_all(const RenderContext& cx, const std::string& s, const std::string& from, const std::string& to,
                        size_t pos);
// dict.items(): (key, value) tuples in insertion order.
Value dict_items(const Value& v);

}  // namespace endor::chat
