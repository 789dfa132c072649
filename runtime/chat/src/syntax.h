// The parsed form of a chat template: a tree of statements (text, output, if, for, set, macro...)
// over expressions. Positions are byte offsets into the template source (for line:column errors).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "endor/chat_template.h"
#include "value.h"

namespace endor::chat {

// Caps that keep garbage templates from exhausting the stack, memory or time.
constexpr size_t kMaxTemplateBytes = 1u << 20;
constexpr size_t kMaxNesting = 128;          // expression and block nesting at parse time
constexpr size_t kMaxCallDepth = 16;         // macro calls within macro calls
constexpr size_t kMaxSteps = 1'000'000;      // statements + expressions evaluated per render
constexpr size_t kMaxStringBytes = 64u << 20;  // output and any string value
constexpr size_t kMaxListItems = 100'000;

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Literal,   // value
    Name,      // name
    List,      // args = items (also tuples)
    DictLit,   // args = alternating key, value
    Attr,      // args[0].name
    Item,      // args[0][args[1]]
    Slice,     // args[0][args[1]:args[2]:args[3]] (null parts omitted)
    Call,      // args[0](args[1..], kwargs)
    Filter,    // args[0] | name(args[1..], kwargs)
    Test,      // args[0] is [not] name(args[1..])
    Unary,     // name = "-", "+", "not"; args[0]
    Binary,    // name = operator; args[0], args[1]
    Cond,      // args[1] if args[0] else args[2] (args[2] null: undefined)
  };
  Kind kind;
  size_t pos = 0;
  Value value;
  std::string name;
  bool negated = false;  // Test: "is not"
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Kind { Text, Output, If, For, Set, SetBlock, Macro, Break, Continue, Scope };
  Kind kind;
  size_t pos = 0;
  std::string text;                  // Text
  ExprPtr expr;                      // Output; Set value; For iterable
  std::vector<std::pair<ExprPtr, Body>> branches;  // If: (condition, body); condition null = else
  std::vector<std::string> targets;  // For loop variables; Set/SetBlock name; Macro name
  std::string attr;                  // Set: `set ns.attr = ...`
  ExprPtr condition;                 // For: `for x in xs if condition`
  Body body, else_body;              // For, SetBlock, Macro, Scope (e.g. {% generation %})
  std::vector<std::pair<std::string, ExprPtr>> params;  // Macro parameters and defaults (null: none)
};

struct Source {
  std::string text;
  std::string name;
  // "NAME:LINE:COL: " for byte offset `pos`.
  std::string where(size_t pos) const;
};

// Throws ChatTemplateError naming the position.
Body parse_template(const Source& source);

}  // namespace endor::chat
