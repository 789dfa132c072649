// endor-infer tokenize / detokenize: ids equal the tokenizer library's (and `tokenizers`' on the
// perplexity fixture), round trips are exact, bad input gives one line and a non-zero exit.
#include <string>
#include <vector>

#include "endor/tokenizer.h"
#include "infer_test_util.h"

using namespace endor;
using endor::test::TempDir;

namespace {

const std::vector<std::string> kTexts = {
    "In the beginning God created the heaven and the earth.\n",
    "And the LORD spake unto Moses, saying,",
    "  leading spaces, tabs\tand\n\nblank lines\n",
    "caf\xc3\xa9 \xe2\x80\x94 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x99\x82 (non-ASCII: bytes the KJV tokenizer never saw)",
    "</s> and <s> written as text",
    "",
};

}  // namespace

TEST_CASE("tokenize prints the tokenizer library's ids, from the container and from tokenizer.json") {
  TempDir dir;
  const std::string model = test::pack_sample(dir, "kjv.endor", "convert");
  const std::string json = test::sample_dir() + "/tokenizer.json";
  const Tokenizer tok = Tokenizer::from_file(json);
  for (const std::string& text : kTexts) {
    INFO("text: ", text);
    const std::string want = format_ids(tok.encode(text, true)) + "\n";
    auto r = test::infer(dir, "tokenize " + model, &text);
    INFO("stderr: ", r.err);
    CHECK(r.status == 0);
    CHECK(r.out == want);
    r = test::infer(dir, "tokenize " + json, &text);
    CHECK(r.status == 0);
    CHECK(r.out == want);
    r = test::infer(dir, "tokenize --no-special " + model, &text);
    CHECK(r.status == 0);
    CHECK(r.out == format_ids(tok.encode(text, false)) + "\n");
  }
  // The perplexity fixture's text: exactly the ids `tokenizers` produced (one <s> first).
  const nlohmann::json ref = test::read_json(test::ppl_fixture("reference.json"));
  const std::string text = test::read_text(test::ppl_fixture("text.txt"));
  const auto r = test::infer(dir, "tokenize " + model, &text);
  REQUIRE(r.status == 0);
  CHECK(parse_ids(r.out) == ref["token_ids"].get<std::vector<int32_t>>());
}

TEST_CASE("detokenize(tokenize(text)) == text; --keep-special prints the BOS") {
  TempDir dir;
  const std::string model = test::pack_sample(dir, "kjv.endor", "convert");
  const Tokenizer tok = Tokenizer::from_file(test::sample_dir() + "/tokenizer.json");
  std::vector<std::string> texts;
  for (const std::string& t : kTexts)
    if (t.find("</s>") == std::string::npos) texts.push_back(t);  // special tokens: below
  texts.push_back(test::read_text(test::ppl_fixture("text.txt")));
  for (const std::string& text : texts) {
    INFO("text: ", text.substr(0, 80));
    const auto ids = test::infer(dir, "tokenize " + model, &text);
    REQUIRE(ids.status == 0);
    const auto back = test::infer(dir, "detokenize " + model, &ids.out);
    INFO("stderr: ", back.err);
    CHECK(back.status == 0);
    CHECK(back.out == text);
  }
  const std::string ids = format_ids(tok.encode("And God said", true));
  auto r = test::infer(dir, "detokenize --keep-special " + model, &ids);
  CHECK(r.status == 0);
  CHECK(r.out == "<s>And God said");

  // Special tokens typed as text are split out as those tokens: skipped by default (as the BOS
  // is), kept by --keep-special, so the round trip without the added BOS is then exact.
  const std::string special = "</s> and <s> written as text";
  const auto special_ids = test::infer(dir, "tokenize --no-special " + model, &special);
  REQUIRE(special_ids.status == 0);
  CHECK(parse_ids(special_ids.out) == tok.encode(special, false));
  r = test::infer(dir, "detokenize --keep-special " + model, &special_ids.out);
  CHECK(r.out == special);
  r = test::infer(dir, "detokenize " + model, &special_ids.out);
  CHECK(r.out == " and  written as text");
}

TEST_CASE("tokenize / detokenize bad input: one line, non-zero exit, nothing on stdout") {
  TempDir dir;
  const std::string model = test::pack_sample(dir, "kjv.endor", "convert");
  const nlohmann::json cfg = test::synthetic_llama_config();
  const std::string bare = dir.file("bare.endor");  // a container without tokenizer.json
  test::write_synthetic_container(bare, cfg, test::synthetic_llama_tensors(cfg), 3);
  const std::string text = "And God said";

  struct Case {
    std::string args, stdin_text, must_mention;
    int status;
  };
  const std::vector<Case> cases = {
      {"detokenize " + model, "0 297 x 391", "'x' is not a token id", 1},
      {"detokenize " + model, "0 297 -5", "'-5' is not a token id", 1},
      {"detokenize " + model, "0 297 4096", "token id 4096 is outside the vocabulary", 1},
      {"detokenize " + model, "99999999999", "not a token id", 1},
      {"tokenize " + dir.file("absent.endor"), text, "absent.endor", 1},
      {"detokenize " + dir.file("absent.json"), "1", "absent.json", 1},
      {"tokenize " + bare, text, "holds no tokenizer.json", 1},
      {"tokenize " + dir.path(), text, "is a directory", 1},
      {"tokenize " + test::ppl_fixture("text.txt"), text, "text.txt", 1},  // not JSON at all
      {"tokenize", text, "missing FILE", 2},
      {"tokenize " + model + " " + model, text, "give one FILE", 2},
      {"detokenize " + model + " --bogus", "1", "bogus", 2},
  };
  for (const Case& c : cases) {
    INFO("endor-infer ", c.args, " < \"", c.stdin_text, "\"");
    const auto r = test::infer(dir, c.args, &c.stdin_text);
    INFO("stderr: ", r.err);
    CHECK(r.status == c.status);
    CHECK(test::one_error_line(r.err));
    CHECK(r.err.find(c.must_mention) != std::string::npos);
    CHECK(r.out.empty());
  }
  // Inputs untouched.
  CHECK(test::read_text(bare).size() > 0);
  const auto ok = test::infer(dir, "tokenize " + model, &text);
  CHECK(ok.status == 0);
}
