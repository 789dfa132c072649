// endor_chat's public API: parse once, render conversations; find a model's template among its
// tokenizer files.
#include "endor/chat_template.h"

#include "render.h"
#include "syntax.h"

namespace endor {

struct ChatTemplate::Impl {
  chat::Source source;
  chat::Body root;
};

ChatTemplate ChatTemplate::parse(std::string_view source, const std::string& source_name) {
  auto impl = std::make_shared<Impl>();
  impl->source.text = std::string(source);
  impl->source.name = source_name;
  impl->root = chat::parse_template(impl->source);
  return ChatTemplate(std::move(impl));
}

std::string ChatTemplate::render(const nlohmann::ordered_json& variables) const {
  return chat::render_template(impl_->source, impl_->root, variables);
}

std::string ChatTemplate::render_chat(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                      const std::string& bos_token, const std::string& eos_token) const {
  nlohmann::ordered_json vars = nlohmann::ordered_json::object();
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const ChatMessage& m : messages) list.push_back({{"role", m.role}, {"content", m.content}});
  vars["messages"] = std::move(list);
  vars["add_generation_prompt"] = add_generation_prompt;
  vars["bos_token"] = bos_token;
  vars["eos_token"] = eos_token;
  vars["tools"] = nullptr;
  vars["documents"] = nullptr;
  return render(vars);
}

const std::string& ChatTemplate::source_name() const { return impl_->source.name; }

namespace {

// A special token in tokenizer_config.json: "<s>" or {"content": "<s>", ...}; "" when absent/null.
std::string token_string(const nlohmann::json& config, const char* key, const std::string& where) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    auto c = it->find("content");
    if (c != it->end() && c->is_string()) return c->get<std::string>();
  }
  throw ChatTemplateError(where + ": \"" + key + "\" is neither a string nor an object with a \"content\" string");
}

}  // namespace

std::optional<ChatTemplateSource> find_chat_template(std::optional<std::string_view> tokenizer_config_json,
                                                     std::optional<std::string_view> chat_template_jinja,
                                                     const std::string& name_prefix) {
  ChatTemplateSource out;
  bool found = false;
  if (tokenizer_config_json) {
    const std::string where = name_prefix + "tokenizer_config.json";
    nlohmann::json config = nlohmann::json::parse(*tokenizer_config_json, nullptr, false);
    if (config.is_discarded() || !config.is_object()) throw ChatTemplateError(where + ": not a JSON object");
    out.bos_token = token_string(config, "bos_token", where);
    out.eos_token = token_string(config, "eos_token", where);
    auto it = config.find("chat_template");
    if (it != config.end() && !it->is_null()) {
      out.source_name = where + " chat_template";
      if (it->is_string()) {
        out.text = it->get<std::string>();
        found = true;
      } else if (it->is_array()) {
        for (const auto& entry : *it) {
          if (!entry.is_object() || !entry.contains("name") || !entry.contains("template") ||
              !entry["name"].is_string() || !entry["template"].is_string())
            throw ChatTemplateError(where + ": \"chat_template\" list entries must be {\"name\": ..., \"template\": ...} strings");
          if (entry["name"] == "default") {
            out.text = entry["template"].get<std::string>();
            out.source_name = where + " chat_template \"default\"";
            found = true;
          }
        }
        if (!found) throw ChatTemplateError(where + ": \"chat_template\" lists no template named \"default\"");
      } else {
        throw ChatTemplateError(where + ": \"chat_template\" is neither a string nor a list of named templates");
      }
    }
  }
  if (chat_template_jinja) {  // transformers 5 saves it beside tokenizer_config.json; it wins there too
    out.text = std::string(*chat_template_jinja);
    out.source_name = name_prefix + "chat_template.jinja";
    found = true;
  }
  if (!found) return std::nullopt;
  return out;
}

}  // namespace endor
