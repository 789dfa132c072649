// Rendering a parsed template with JSON variables as its globals.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "syntax.h"

namespace endor::chat {

// Throws ChatTemplateError naming the position for runtime errors (raise_exception, undefined
// attribute access, bad operands, unsupported filters and tests, limits).
std::string render_template(const Source& source, const Body& root, const nlohmann::ordered_json& variables);

}  // namespace endor::chat
