// The chat-template interpreter against transformers: every case of tests/fixtures/chat (real
// templates x conversations x add_generation_prompt, and one snippet per supported construct) must
// render byte for byte, or fail where jinja2 fails. Then bad templates: one clear error each, never
// a crash or hang.
#include <doctest/doctest.h>

#include <chrono>
#include <fstream>
#include <random>
#include <sstream>

#include "endor/chat_template.h"

namespace {

nlohmann::ordered_json load_fixture() {
  const std::string path = std::string(ENDOR_SOURCE_DIR) + "/tests/fixtures/chat/chat_templates.json";
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "missing fixture " << path);
  std::stringstream s;
  s << in.rdbuf();
  return nlohmann::ordered_json::parse(s.str());
}

const nlohmann::ordered_json& fixture() {
  static const nlohmann::ordered_json f = load_fixture();
  return f;
}

std::string render_error(const endor::ChatTemplate& t, const nlohmann::ordered_json& vars) {
  try {
    t.render(vars);
  } catch (const endor::ChatTemplateError& e) {
    return e.what();
  }
  return "";
}

std::string parse_error(const std::string& source) {
  try {
    endor::ChatTemplate::parse(source, "bad.jinja");
  } catch (const endor::ChatTemplateError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("real chat templates render as transformers' apply_chat_template") {
  const nlohmann::ordered_json& f = fixture();
  std::map<std::string, endor::ChatTemplate> templates;
  for (auto it = f["templates"].begin(); it != f["templates"].end(); ++it)
    templates.emplace(it.key(), endor::ChatTemplate::parse(it.value()["template"].get<std::string>(), it.key()));
  REQUIRE(templates.size() == 5);
  size_t n_checked = 0, n_errors = 0;
  for (const auto& c : f["cases"]) {
    const std::string name = c["template"];
    const nlohmann::ordered_json& t = f["templates"][name];
    nlohmann::ordered_json vars = {{"messages", f["conversations"][c["conversation"].get<std::string>()]},
                           {"add_generation_prompt", c["add_generation_prompt"]},
                           {"bos_token", t["bos_token"]},
                           {"eos_token", t["eos_token"]},
                           {"tools", nullptr},
                           {"documents", nullptr}};
    CAPTURE(name);
    CAPTURE(c["conversation"].get<std::string>());
    CAPTURE(c["add_generation_prompt"].get<bool>());
    if (c.contains("expected")) {
      CHECK(templates.at(name).render(vars) == c["expected"].get<std::string>());
    } else {
      // jinja2's message is "TemplateError: <text of raise_exception>"; ours names the position too.
      const std::string want = c["error"].get<std::string>().substr(c["error"].get<std::string>().find(": ") + 2);
      const std::string got = render_error(templates.at(name), vars);
      CHECK_MESSAGE(got.find(want) != std::string::npos, got);
      CHECK(got.find(name + ":1:") == 0);
      ++n_errors;
    }
    ++n_checked;
  }
  CHECK(n_checked == 70);
  CHECK(n_errors == 8);
}

TEST_CASE("render_chat passes messages, add_generation_prompt and the special tokens") {
  const nlohmann::ordered_json& t = fixture()["templates"]["llama3"];
  const endor::ChatTemplate tmpl = endor::ChatTemplate::parse(t["template"].get<std::string>(), "llama3");
  const std::string out = tmpl.render_chat({{"system", "S"}, {"user", " U "}}, true, "<|begin_of_text|>", "<|end_of_text|>");
  CHECK(out ==
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|><|start_header_id|>user"
        "<|end_header_id|>\n\nU<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST_CASE("every supported construct renders as jinja2 does") {
  for (const auto& s : fixture()["snippets"]) {
    const std::string source = s["template"];
    CAPTURE(source);
    const endor::ChatTemplate t = endor::ChatTemplate::parse(source, "snippet");
    if (s.contains("expected")) {
      std::string got;
      CHECK_NOTHROW(got = t.render(s["variables"]));
      CHECK(got == s["expected"].get<std::string>());
    } else {
      const std::string got = render_error(t, s["variables"]);
      CHECK_MESSAGE(got.rfind("snippet:1:", 0) == 0, got);
    }
  }
}

TEST_CASE("strftime_now formats the current time") {
  const endor::ChatTemplate t = endor::ChatTemplate::parse("{{ strftime_now('%Y') }}|{{ strftime_now('%d %b %Y') | length }}", "t");
  const std::string out = t.render(nlohmann::ordered_json::object());
  REQUIRE(out.size() == 7);
  CHECK(out.substr(0, 2) == "20");
  CHECK(out.substr(4) == "|11");
}

TEST_CASE("find_chat_template: chat_template.jinja, a string, or the list's \"default\"") {
  const auto a = endor::find_chat_template(std::string_view(R"({"chat_template": "A", "bos_token": "<s>",
      "eos_token": {"content": "</s>", "special": true}})"), std::nullopt, "m:");
  REQUIRE(a);
  CHECK(a->text == "A");
  CHECK(a->bos_token == "<s>");
  CHECK(a->eos_token == "</s>");
  CHECK(a->source_name == "m:tokenizer_config.json chat_template");
  const auto b = endor::find_chat_template(
      std::string_view(R"({"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]})"),
      std::nullopt, "m:");
  REQUIRE(b);
  CHECK(b->text == "D");
  const auto c = endor::find_chat_template(std::string_view(R"({"chat_template": "A", "eos_token": "<e>"})"),
                                           std::string_view("J"), "m:");
  REQUIRE(c);
  CHECK(c->text == "J");
  CHECK(c->eos_token == "<e>");
  CHECK(c->source_name == "m:chat_template.jinja");
  CHECK_FALSE(endor::find_chat_template(std::string_view(R"({"bos_token": "<s>"})"), std::nullopt, "m:"));
  CHECK_FALSE(endor::find_chat_template(std::nullopt, std::nullopt, "m:"));
  CHECK_THROWS_AS(endor::find_chat_template(std::string_view("[1]"), std::nullopt, "m:"), endor::ChatTemplateError);
  CHECK_THROWS_AS(endor::find_chat_template(std::string_view(R"({"chat_template": 3})"), std::nullopt, "m:"),
                  endor::ChatTemplateError);
  CHECK_THROWS_AS(endor::find_chat_template(std::string_view(R"({"chat_template": [{"name": "x", "template": "T"}]})"),
                                            std::nullopt, "m:"),
                  endor::ChatTemplateError);
}

TEST_CASE("bad templates: one line naming the construct and its position") {
  struct Bad {
    const char* source;
    const char* message;  // expected in the error
  };
  const Bad table[] = {
      {"{{ x", "bad.jinja:1:1: unclosed '{{'"},
      {"{% if x %}a", "bad.jinja:1:1: this tag is never closed (expected 'endif')"},
      {"a\n{% for x in y %}", "bad.jinja:2:1: this tag is never closed"},
      {"{% endif %}", "unexpected 'endif'"},
      {"{% else %}", "unexpected 'else'"},
      {"{% include 'x' %}", "bad.jinja:1:1: unsupported tag 'include'"},
      {"{% raw %}x{% endraw %}", "unsupported tag 'raw'"},
      {"{% extends 'base' %}", "unsupported tag 'extends'"},
      {"{{ }}", "empty expression"},
      {"{{ 1 + }}", "bad.jinja:1:8: unexpected end of tag"},
      {"{{ 'abc }}", "unterminated string literal"},
      {"{{ x ! y }}", "bad.jinja:1:6: unexpected character '!'"},
      {"{{ x | }}", "expected a filter name"},
      {"{{ x is }}", "expected a test name"},
      {"{% for in xs %}{% endfor %}", "expected a loop variable before 'in'"},
      {"{% for x xs %}{% endfor %}", "expected 'in'"},
      {"{% for x in xs recursive %}{% endfor %}", "unsupported: recursive"},
      {"{% set = 1 %}", "expected a variable name"},
      {"{% set a, b = 1, 2 %}", "unsupported: assigning to several names"},
      {"{% if x %}{% else %}{% else %}{% endif %}", "a second 'else'"},
      {"{% if x %}{% else %}{% elif y %}{% endif %}", "'elif' after 'else'"},
      {"{{ f(*args) }}", "unsupported: *args"},
      {"{{ (1 }}", "expected ')'"},
      {"{{ [1, 2 }}", "expected ']'"},
      {"{# never closed", "unclosed '{#'"},
      {"{% %}", "expected a tag name"},
      {"{{ 99999999999999999999 }}", "too large"},
      {"{{ '\\u12' }}", "escape"},
      {"{{ x }}\xff{{ \xfe }}", "unexpected byte 254"},
  };
  for (const Bad& b : table) {
    const std::string source = b.source;
    CAPTURE(source);
    const std::string e = parse_error(b.source);
    CHECK_MESSAGE(e.find(b.message) != std::string::npos, e);
    CHECK(e.find('\n') == std::string::npos);
  }
}

TEST_CASE("bad templates at render time: one line, never a crash") {
  struct Bad {
    const char* source;
    const char* message;
  };
  const Bad table[] = {
      {"{{ x | wordwrap }}", "bad.jinja:1:6: unsupported filter 'wordwrap'"},
      {"{{ x is fancy }}", "unsupported test 'fancy'"},
      {"{{ raise_exception('no system role') }}", "the template raised an error: no system role"},
      {"{{ missing.attr }}", "'missing' is undefined"},
      {"{{ messages[0].role.x.y }}", "'messages[0].role.x' is undefined"},
      {"{{ 'a' + 1 }}", "unsupported operand types for +: str and int"},
      {"{{ 1 // 0 }}", "division by zero"},
      {"{{ 5(1) }}", "a int is not callable"},
      {"{% for x in 5 %}{% endfor %}", "cannot iterate over a int"},
      {"{% set x = 1 %}{% set x.a = 2 %}", "only namespace() objects take attributes"},
      {"{{ range(1000000) }}", "range: more than"},
      {"{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "steps"},
      {"{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
       "a string grew past"},
      {"{{ 'x' * 100000000 }}", "a string grew past"},
      {"{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", "macro calls nested more than"},
      {"{{ [1] | tojson(indent='x') }}", "indent must be an integer"},
      {"{{ x | tojson }}", "not JSON serializable"},
      {"{{ [][1:2:0] }}", "slice step cannot be zero"},
      {"{{ 'a'.startswith(1) }}", "startswith: needs a string"},
      {"{{ namespace }}", "cannot print a function"},
  };
  for (const Bad& b : table) {
    const std::string source = b.source;
    CAPTURE(source);
    std::string e;
    try {
      const endor::ChatTemplate t = endor::ChatTemplate::parse(b.source, "bad.jinja");
      e = render_error(t, {{"messages", {{{"role", "user"}}}}});
    } catch (const endor::ChatTemplateError& err) {
      e = err.what();
    }
    CHECK_MESSAGE(e.find(b.message) != std::string::npos, e);
    CHECK(e.find('\n') == std::string::npos);
  }
}

TEST_CASE("deep nesting and huge templates end in an error, not a stack overflow") {
  CHECK(parse_error("{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}").find("nested more than") !=
        std::string::npos);
  CHECK(parse_error("{{ " + std::string(100000, '[') + " }}").find("nested more than") != std::string::npos);
  std::string not_chain = "{{ ";
  for (int k = 0; k < 50000; ++k) not_chain += "not ";
  CHECK(parse_error(not_chain + "x }}").find("nested more than") != std::string::npos);
  std::string ifs;
  for (int k = 0; k < 1000; ++k) ifs += "{% if x %}";
  CHECK(parse_error(ifs).find("nested more than") != std::string::npos);
  CHECK(parse_error(std::string(2u << 20, 'a')).find("more than the limit") != std::string::npos);
  // A long operator chain is a deep tree too: limited, while real lengths pass.
  std::string sum = "{{ 0";
  for (int k = 0; k < 20000; ++k) sum += " + 1";
  CHECK(parse_error(sum + " }}").find("nested more than") != std::string::npos);
  sum = "{{ 0";
  for (int k = 0; k < 100; ++k) sum += " + 1";
  CHECK(endor::ChatTemplate::parse(sum + " }}", "t").render(nlohmann::ordered_json::object()) == "100");
}

TEST_CASE("mutated real templates: an error or a rendering, never a crash or hang") {
  // Deterministic mutations (delete / duplicate / replace a byte with template punctuation) of every
  // real template; each must parse and render, or throw ChatTemplateError, quickly.
  const nlohmann::ordered_json& f = fixture();
  std::mt19937 rng(1234);
  const std::string alphabet = "{}%#-+()[]'\".|~=<>!:, \nifsetforendmacro0123456789";
  const auto t0 = std::chrono::steady_clock::now();
  size_t n_ok = 0, n_err = 0;
  for (auto it = f["templates"].begin(); it != f["templates"].end(); ++it) {
    const std::string base = it.value()["template"];
    nlohmann::ordered_json vars = {{"messages", f["conversations"]["system_multi"]}, {"add_generation_prompt", true},
                           {"bos_token", "<s>"}, {"eos_token", "</s>"}};
    for (int n = 0; n < 400; ++n) {
      std::string s = base;
      const int edits = 1 + int(rng() % 4);
      for (int k = 0; k < edits && !s.empty(); ++k) {
        const size_t at = rng() % s.size();
        switch (rng() % 3) {
          case 0: s.erase(at, 1 + rng() % 8); break;
          case 1: s.insert(at, s.substr(at, 1 + rng() % 16)); break;
          default: s[at] = alphabet[rng() % alphabet.size()];
        }
      }
      try {
        endor::ChatTemplate::parse(s, "mutant").render(vars);
        ++n_ok;
      } catch (const endor::ChatTemplateError& e) {
        CHECK(std::string(e.what()).rfind("mutant", 0) == 0);
        ++n_err;
      }
    }
  }
  CHECK(n_err > 100);
  CHECK(n_ok > 10);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30));
}
