// endor-infer --chat end to end on the sample model, packed from a copy of its folder with a chat
// template added to tokenizer_config.json: the exact prompt ids each turn (special tokens in the
// rendered text encoded as their ids, the BOS written once), answers equal to plain generation from
// those ids (so the KV-cache reuse between turns changes nothing), and the error paths.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "endor/tokenizer.h"
#include "infer_test_util.h"

using namespace endor;
using endor::test::TempDir;

namespace {

// Llama-2-like turns over the sample's own special tokens <s> (id 0) and </s> (id 1).
const char* kTemplate =
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}"
    "{{ 'Question: ' + m['content'] | trim + '\\nAnswer:' }}{% elif m['role'] == 'assistant' %}"
    "{{ ' ' + m['content'] | trim + eos_token }}{% else %}{{ raise_exception('no ' + m['role'] + ' role') }}"
    "{% endif %}{% endfor %}";

// The sample folder with `tmpl` in tokenizer_config.json (null: none), packed into dir/name;
// `jinja` (when not empty) is written as chat_template.jinja beside it (transformers 5's layout).
std::string pack_with_template(const TempDir& dir, const std::string& name, const nlohmann::json& tmpl,
                               const std::string& jinja = "") {
  const std::string folder = dir.file(name + ".src");
  std::filesystem::create_directory(folder);
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json"})
    std::filesystem::copy_file(test::sample_dir() + "/" + f, folder + "/" + f);
  nlohmann::json config = test::read_json(test::sample_dir() + "/tokenizer_config.json");
  if (!tmpl.is_null()) config["chat_template"] = tmpl;
  std::ofstream(folder + "/tokenizer_config.json") << config.dump(1);
  if (!jinja.empty()) std::ofstream(folder + "/chat_template.jinja") << jinja;
  const std::string out = dir.file(name);
  const auto r = test::run_capture(test::endor_pack() + " convert " + folder + " -o " + out, dir);
  INFO("endor-pack stderr: ", r.err);
  REQUIRE(r.status == 0);
  return out;
}

// The ids after "chat prompt ids: " on each such stderr line.
std::vector<std::vector<int32_t>> prompt_ids(const std::string& err) {
  std::vector<std::vector<int32_t>> out;
  const std::string key = "chat prompt ids: ";
  for (size_t at = err.find(key); at != std::string::npos; at = err.find(key, at + 1)) {
    const size_t end = err.find('\n', at);
    out.push_back(parse_ids(err.substr(at + key.size(), end - at - key.size())));
  }
  return out;
}

// Greedy plain generation from `ids` (--ids), decoded without special tokens, cut at the first
// end token (the sample's </s>, id 1): what a chat turn with this prompt must answer.
std::string plain_answer(const TempDir& dir, const std::string& model, const Tokenizer& tok,
                         const std::vector<int32_t>& ids, int n) {
  const auto r = test::infer(dir, model + " --ids \"" + format_ids(ids) + "\" -n " + std::to_string(n) +
                                      " --temperature 0");
  INFO("stderr: ", r.err);
  REQUIRE(r.status == 0);
  std::vector<int32_t> out = parse_ids(r.out);
  for (size_t k = 0; k < out.size(); ++k)
    if (out[k] == 1) out.resize(k);
  return tok.decode(out, true);
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\n"), e = s.find_last_not_of(" \t\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

}  // namespace

TEST_CASE("--chat: exact prompt ids per turn, answers as plain generation, cache reused") {
  TempDir dir;
  const std::string model = pack_with_template(dir, "chat.endor", kTemplate);
  const Tokenizer tok = Tokenizer::from_file(test::sample_dir() + "/tokenizer.json");
  const int n = 8;

  // One turn with -p: <s> once (the tokenizer's post-processor would add a second), then the text.
  auto r = test::infer(dir, model + " --chat -p \"Who begat Enos?\" -n 8 --temperature 0 --dump-prompt");
  INFO("stderr: ", r.err);
  REQUIRE(r.status == 0);
  std::vector<int32_t> want = {0};
  for (int32_t id : tok.encode("Question: Who begat Enos?\nAnswer:", false)) want.push_back(id);
  auto turns = prompt_ids(r.err);
  REQUIRE(turns.size() == 1);
  CHECK(turns[0] == want);
  CHECK(r.err.find("<s>Question: Who begat Enos?\nAnswer:\n") != std::string::npos);
  const std::string answer1 = plain_answer(dir, model, tok, want, n);
  CHECK(!trim(answer1).empty());
  CHECK(r.out == answer1 + "\n");

  // Two turns on stdin: the second prompt holds the first answer and </s> as id 1, and reuses the
  // cached prefix; its answer equals plain generation from its ids.
  const std::string input = "Who begat Enos?\nAnd who begat Cainan?\n";
  r = test::infer(dir, model + " --chat -n 8 --temperature 0 --dump-prompt", &input);
  REQUIRE(r.status == 0);
  turns = prompt_ids(r.err);
  REQUIRE(turns.size() == 2);
  CHECK(turns[0] == want);
  std::vector<int32_t> want2 = {0};
  for (int32_t id : tok.encode("Question: Who begat Enos?\nAnswer: " + trim(answer1), false)) want2.push_back(id);
  want2.push_back(1);
  for (int32_t id : tok.encode("Question: And who begat Cainan?\nAnswer:", false)) want2.push_back(id);
  CHECK(turns[1] == want2);
  CHECK(r.err.find("(" + std::to_string(want2.size()) + " tokens, 0 reused") == std::string::npos);
  CHECK(r.err.find("reused from the cache") != std::string::npos);
  const std::string answer2 = plain_answer(dir, model, tok, want2, n);
  CHECK(r.out == answer1 + "\n" + answer2 + "\n");
  CHECK(r.out.find("> ") == std::string::npos);  // no prompt when stdin is not a terminal
}

TEST_CASE("--chat errors: no template, bad template, a turn the template refuses, usage") {
  TempDir dir;
  const std::string plain = test::pack_sample(dir, "plain.endor", "convert");
  auto r = test::infer(dir, plain + " --chat -p hi");
  CHECK(r.status == 1);
  CHECK(test::one_error_line(r.err));
  CHECK(r.err.find("plain.endor: the container holds no chat template (neither chat_template.jinja nor a "
                   "\"chat_template\" in tokenizer_config.json), so --chat cannot format a conversation; use -p "
                   "for plain text continuation\n") != std::string::npos);
  CHECK(r.out.empty());

  const std::string bad = pack_with_template(dir, "bad.endor", "{% for m in messages %}{{ m.content | wordwrap }}");
  r = test::infer(dir, bad + " --chat -p hi");
  CHECK(r.status == 1);
  CHECK(test::one_error_line(r.err));
  CHECK(r.err.find("bad.endor:tokenizer_config.json chat_template:1:1: this tag is never closed") != std::string::npos);

  // The list form: the "default" entry is the template.
  const std::string listed = pack_with_template(
      dir, "listed.endor", nlohmann::json::array({{{"name", "tool_use"}, {"template", "{{ raise_exception('wrong') }}"}},
                                                  {{"name", "default"}, {"template", kTemplate}}}));
  r = test::infer(dir, listed + " --chat -p hi -n 2 --temperature 0 --dump-prompt");
  CHECK(r.status == 0);
  CHECK(r.err.find("<s>Question: hi\nAnswer:") != std::string::npos);

  // chat_template.jinja beside tokenizer_config.json wins over its "chat_template".
  const std::string jinja = pack_with_template(dir, "jinja.endor", "{{ raise_exception('not this one') }}",
                                               std::string(kTemplate) + "{{ ' (jinja file)' }}");
  r = test::infer(dir, jinja + " --chat -p hi -n 2 --temperature 0 --dump-prompt");
  CHECK(r.status == 0);
  CHECK(r.err.find("<s>Question: hi\nAnswer: (jinja file)") != std::string::npos);

  // A second turn is refused by this template: on stdin the error is reported and the conversation
  // goes on.
  const std::string strict = pack_with_template(dir, "strict.endor",
      "{% if messages | length > 1 %}{{ raise_exception('one turn only') }}{% endif %}" + std::string(kTemplate));
  const std::string input = "first\nsecond\n";
  r = test::infer(dir, strict + " --chat -n 2 --temperature 0", &input);
  CHECK(r.status == 0);
  CHECK(r.err.find("error: " + dir.file("strict.endor") + ":tokenizer_config.json chat_template:1:") == 0);
  CHECK(r.err.find("the template raised an error: one turn only") != std::string::npos);
  CHECK(!r.out.empty());

  // A conversation longer than --ctx: refused before anything is generated.
  r = test::infer(dir, listed + " --chat -p \"Who begat Enos, and who begat Cainan?\" --ctx 8");
  CHECK(r.status == 1);
  CHECK(test::one_error_line(r.err));
  CHECK(r.err.find("the context holds 8") != std::string::npos);
  CHECK(r.out.empty());

  r = test::infer(dir, plain + " --chat --ids \"1 2\"");
  CHECK(r.status == 2);
  CHECK(test::one_error_line(r.err));
  r = test::infer(dir, plain + " -p hi --dump-prompt");
  CHECK(r.status == 2);
  CHECK(test::one_error_line(r.err));
}
