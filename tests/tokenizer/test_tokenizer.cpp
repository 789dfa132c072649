// endor::Tokenizer against the real HF `tokenizers` (references in tests/fixtures/tokenizers).
#include <doctest/doctest.h>

#include <string>
#include <thread>
#include <vector>

#include "endor/tokenizer.h"
#include "fixtures.h"
#include "unicode.h"

using endor::StreamingDecoder;
using endor::Tokenizer;
using endor::TokenizerError;
using tokenizer_test::family_tokenizer;
using tokenizer_test::read_fixture;
using tokenizer_test::refs;

namespace {

std::string stream_decode(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip_special) {
  StreamingDecoder stream(tok, skip_special);
  std::string out;
  for (int32_t id : ids) out += stream.push(id);
  return out + stream.flush();
}

// Checks every reference case of one family; reports the first few mismatches in full.
void check_family(const std::string& family) {
  const Tokenizer& tok = family_tokenizer(family);
  const auto& cases = refs().at("families").at(family).at("cases");
  size_t encode_bad = 0, plain_bad = 0, decode_bad = 0, stream_bad = 0;
  for (const auto& c : cases) {
    std::string text = c.at("text").get<std::string>();
    auto want = c.at("ids").get<std::vector<int32_t>>();
    auto got = tok.encode(text);
    if (got != want && ++encode_bad <= 3) {
      INFO(family, " text ", nlohmann::json(text).dump());
      CHECK(endor::format_ids(got) == endor::format_ids(want));
    }
    auto want_plain = c.contains("plain") ? c.at("plain").get<std::vector<int32_t>>() : want;
    if (tok.encode(text, false) != want_plain && ++plain_bad <= 3) {
      INFO(family, " add_special_tokens=false, text ", nlohmann::json(text).dump());
      CHECK(endor::format_ids(tok.encode(text, false)) == endor::format_ids(want_plain));
    }
    for (bool skip : {false, true}) {
      std::string want_text = c.at(skip ? "decoded_skip" : "decoded").get<std::string>();
      std::string decoded = tok.decode(want, skip);
      if (decoded != want_text && ++decode_bad <= 3) {
        INFO(family, " decode skip_special=", skip, " ids ", endor::format_ids(want));
        CHECK(decoded == want_text);
      }
      std::string streamed = stream_decode(tok, want, skip);
      if (streamed != want_text && ++stream_bad <= 3) {
        INFO(family, " streaming decode skip_special=", skip, " ids ", endor::format_ids(want));
        CHECK(streamed == want_text);
      }
    }
  }
  INFO(family, ": ", cases.size(), " cases");
  CHECK(cases.size() >= 600);
  CHECK(encode_bad == 0);
  CHECK(plain_bad == 0);
  CHECK(decode_bad == 0);
  CHECK(stream_bad == 0);
}

}  // namespace

TEST_CASE("shared/tokenizers/reference-encodings.json is reproduced exactly") {
  auto shared = nlohmann::json::parse(read_fixture("reference-encodings.json.zst"));
  for (std::string family : {"llama2", "llama3", "qwen3"}) {
    const Tokenizer& tok = family_tokenizer(family);
    REQUIRE(shared.at(family).size() == 30);
    for (const auto& c : shared.at(family)) {
      std::string text = c.at("text").get<std::string>();
      INFO(family, " text ", nlohmann::json(text).dump());
      auto ids = c.at("ids").get<std::vector<int32_t>>();
      CHECK(tok.encode(text) == ids);
      // decode(encode(text)) == text up to the added special tokens (and Qwen's NFC).
      bool has_special = text.find("<s>") != std::string::npos || text.find("</s>") != std::string::npos ||
                         text.find("<|") != std::string::npos;
      if (!has_special) CHECK(tok.decode(ids, true) == (family == "qwen3" ? endor::tok::unicode::nfc(text) : text));
    }
  }
}

TEST_CASE("llama2 (SentencePiece BPE, byte fallback) matches HF on the generated strings") { check_family("llama2"); }
TEST_CASE("llama3 (byte-level BPE, ignore_merges) matches HF on the generated strings") { check_family("llama3"); }
TEST_CASE("qwen3 (byte-level BPE, NFC) matches HF on the generated strings") { check_family("qwen3"); }
TEST_CASE("GPT-2-style byte-level BPE matches HF on the generated strings") { check_family("bytebpe"); }
TEST_CASE("added-token flags, NFC + Replace normalizer, RobertaProcessing match HF") { check_family("bytebpe-added"); }
TEST_CASE("ByteLevel add_prefix_space, NFD + Strip normalizer, template BOS+EOS match HF") { check_family("bytebpe-prefix"); }
TEST_CASE("Split behaviors, Digits and regex Replace match HF") { check_family("bytebpe-splits"); }
TEST_CASE("WhitespaceSplit, inverted/removed splits, Replace/Strip decoders match HF") { check_family("bytebpe-splits2"); }
TEST_CASE("llama2 vocab with a Metaspace pre-tokenizer (prepend first) and Metaspace decoder matches HF") {
  check_family("llama2-metaspace");
}
TEST_CASE("llama3 with Meta's Sequence[ByteLevel, TemplateProcessing] post-processor matches HF") {
  check_family("llama3-bos");
  CHECK(family_tokenizer("llama3-bos").adds_bos());
  CHECK(family_tokenizer("llama3-bos").bos_id() == 128000);
}
TEST_CASE("Metaspace BPE with unk, fuse_unk, subword prefix and word suffix matches HF") { check_family("wordbpe"); }

TEST_CASE("vocab.json + merges.txt loads the same tokenizer as its tokenizer.json") {
  Tokenizer tok = Tokenizer::from_vocab_merges(read_fixture("bytebpe/vocab.json"), read_fixture("bytebpe/merges.txt"),
                                               "bytebpe vocab+merges");
  const auto& cases = refs().at("families").at("bytebpe").at("cases");
  size_t bad = 0;
  for (const auto& c : cases) {
    auto want = c.at("ids").get<std::vector<int32_t>>();
    if (tok.encode(c.at("text").get<std::string>()) != want) ++bad;
    if (tok.decode(want, true) != c.at("decoded_skip").get<std::string>()) ++bad;
  }
  CHECK(bad == 0);
  CHECK(tok.is_special(0));
  CHECK(tok.token_text(0) == "<|endoftext|>");
  CHECK(tok.vocab_size() == 1000);
}

TEST_CASE("special ids, vocab size and token lookups") {
  const Tokenizer& llama2 = family_tokenizer("llama2");
  CHECK(llama2.bos_id() == 1);
  CHECK(llama2.eos_id() == 2);
  CHECK(llama2.adds_bos());
  CHECK(llama2.vocab_size() == 32000);
  CHECK(llama2.token_text(1) == "<s>");
  CHECK(llama2.token_id("<0x0A>") == 13);
  CHECK(llama2.is_special(1));
  CHECK_FALSE(llama2.is_special(13));
  CHECK(llama2.token_text(-1).empty());
  CHECK(llama2.token_text(32000).empty());

  const Tokenizer& llama3 = family_tokenizer("llama3");
  CHECK(llama3.bos_id() == 128000);
  CHECK(llama3.eos_id() == 128001);
  CHECK_FALSE(llama3.adds_bos());
  CHECK(llama3.vocab_size() == 128256);
  CHECK(llama3.token_text(128000) == "<|begin_of_text|>");
  CHECK(llama3.encode("<|begin_of_text|>hi") == std::vector<int32_t>{128000, 6151});

  const Tokenizer& qwen3 = family_tokenizer("qwen3");
  CHECK(qwen3.vocab_size() == 151669);
  CHECK(qwen3.token_id("<think>").has_value());
  CHECK_FALSE(qwen3.is_special(*qwen3.token_id("<think>")));  // "special": false in the file
  CHECK(qwen3.is_special(*qwen3.token_id("<|im_end|>")));
}

TEST_CASE("invalid UTF-8 input is encoded as U+FFFD, unknown ids are skipped by decode") {
  const Tokenizer& llama3 = family_tokenizer("llama3");
  CHECK(llama3.encode("a\xFF" "b") == llama3.encode("a\xEF\xBF\xBD" "b"));
  CHECK(llama3.encode("\xE4\xB8") == llama3.encode("\xEF\xBF\xBD"));
  CHECK(llama3.decode({9906, 999999, -5, 1917}) == llama3.decode({9906, 1917}));
  CHECK(llama3.encode("").empty());
  CHECK(family_tokenizer("llama2").encode("") == std::vector<int32_t>{1});
}

TEST_CASE("streaming decode holds back incomplete UTF-8") {
  const Tokenizer& llama3 = family_tokenizer("llama3");
  // A character split across byte-level tokens: nothing is emitted until it is complete.
  std::vector<int32_t> ids = llama3.encode("\xF0\x9F\xA6\x99");  // U+1F999, several byte tokens
  REQUIRE(ids.size() >= 2);
  StreamingDecoder stream(llama3);
  for (size_t i = 0; i + 1 < ids.size(); ++i) CHECK(stream.push(ids[i]).empty());
  CHECK(stream.push(ids.back()) == "\xF0\x9F\xA6\x99");
  // An unfinished character at the end becomes U+FFFD on flush.
  CHECK(stream.push(ids[0]).empty());
  CHECK(stream.flush() == "\xEF\xBF\xBD");
  CHECK(stream.flush().empty());

  const Tokenizer& llama2 = family_tokenizer("llama2");
  std::vector<int32_t> han = llama2.encode("\xF0\xA0\x80\x80 x", false);  // U+20000: byte fallback
  StreamingDecoder s2(llama2);
  std::string out;
  size_t emitted_at = 0;
  for (size_t i = 0; i < han.size(); ++i) {
    std::string piece = s2.push(han[i]);
    if (!piece.empty() && emitted_at == 0) emitted_at = i + 1;
    out += piece;
  }
  out += s2.flush();
  CHECK(out == llama2.decode(han));
  CHECK(emitted_at >= 4);  // the four <0xXX> tokens of the character come first
}

// What a generation prints after its prompt: decode(prompt + new) minus decode(prompt). Metaspace with a
// Strip decoder (llama2) drops the space of the first token of a sequence, so a continuation decoded
// alone loses it ("In the beginningand"); follow(prompt) keeps it.
TEST_CASE("streaming decode after a prompt gives the text the new ids add to the prompt's") {
  for (const char* family : {"llama2", "llama3", "qwen3"}) {
    const Tokenizer& tok = family_tokenizer(family);
    const std::vector<int32_t> prompt = tok.encode("In the beginning God created");
    const std::vector<int32_t> more = tok.encode(" the heaven and the earth. \xC3\xA9t\xC3\xA9 \xF0\x9F\xA6\x99 done", false);
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), more.begin(), more.end());
    for (bool skip : {false, true}) {
      const std::string whole = tok.decode(all, skip), head = tok.decode(prompt, skip);
      REQUIRE(whole.compare(0, head.size(), head) == 0);
      StreamingDecoder stream(tok, skip);
      stream.follow(prompt);
      std::string out;
      for (int32_t id : more) out += stream.push(id);
      out += stream.flush();
      INFO(family, " skip_special=", skip);
      CHECK(out == whole.substr(head.size()));
    }
  }
  // The case the context is for: the continuation's first word keeps its space.
  const Tokenizer& llama2 = family_tokenizer("llama2");
  StreamingDecoder stream(llama2, true);
  stream.follow(llama2.encode("In the beginning"));
  CHECK(stream.push(llama2.encode(" God", false).front()).front() == ' ');
}

TEST_CASE("malformed tokenizer.json is rejected with a one-line error naming the source") {
  auto rejects = [](const std::string& json, const std::string& needle) {
    try {
      Tokenizer::from_json(json, "bad.json");
    } catch (const TokenizerError& e) {
      std::string what = e.what();
      INFO(what);
      CHECK(what.find("bad.json") != std::string::npos);
      CHECK(what.find(needle) != std::string::npos);
      CHECK(what.find('\n') == std::string::npos);
      return;
    }
    FAIL("no error for ", json);
  };
  const std::string vocab = R"("vocab": {"a": 0, "b": 1, "ab": 2})";
  auto with_model = [&](const std::string& model_rest, const std::string& top = "") {
    return R"({"model": {"type": "BPE", )" + vocab + model_rest + "}" + top + "}";
  };
  rejects("this is not json", "not valid JSON");
  rejects("[1, 2]", "no 'model'");
  rejects(R"({"model": {"type": "WordPiece", "vocab": {}}})", "'WordPiece' is not supported");
  rejects(R"({"model": {"type": "Unigram", "vocab": []}})", "'Unigram' is not supported");
  rejects(with_model(R"(, "merges": ["a c"])"), "'c' that is not in the vocab");
  rejects(with_model(R"(, "merges": [["x", "b"]])"), "'x' that is not in the vocab");
  rejects(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b"]}})", "makes token 'ab'");
  rejects(with_model(R"(, "merges": ["a b c"])"), "not two tokens");
  rejects(with_model(R"(, "merges": [1])"), "neither");
  rejects(with_model(""), "no 'merges'");
  rejects(R"({"model": {"type": "BPE", "vocab": {"a": -1}, "merges": []}})", "out of range");
  rejects(R"({"model": {"type": "BPE", "vocab": {"a": 99999999999}, "merges": []}})", "out of range");
  rejects(with_model(R"(, "merges": [])", R"(, "normalizer": {"type": "Lowercase"})"), "normalizer type 'Lowercase'");
  rejects(with_model(R"(, "merges": [])", R"(, "pre_tokenizer": {"type": "BertPreTokenizer"})"), "'BertPreTokenizer'");
  rejects(with_model(R"(, "merges": [])", R"(, "decoder": {"type": "WordPiece"})"), "decoder type 'WordPiece'");
  rejects(with_model(R"(, "merges": [])",
                     R"(, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(?<=a)b"}, "behavior": "Isolated"})"),
          "unsupported regex syntax");
  rejects(with_model(R"(, "merges": [])",
                     R"(, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "a"}, "behavior": "Sideways"})"),
          "split behavior type 'Sideways'");
  rejects(with_model(R"(, "merges": [])", R"(, "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>"}}, {"Sequence": {"id": "A"}}], "special_tokens": {}})"),
          "'<s>' it does not define");
  rejects(with_model(R"(, "merges": [])", R"(, "added_tokens": [{"content": "x"}])"), "malformed tokenizer.json");
  rejects(with_model(R"(, "merges": [], "dropout": 0.1)"), "dropout");
  CHECK_THROWS_AS(Tokenizer::from_file("/nonexistent/tokenizer.json"), TokenizerError);
  CHECK_THROWS_WITH_AS(Tokenizer::from_vocab_merges(R"({"a": 0})", "#version: 0.2\na b\n", "v"),
                       doctest::Contains("not in the vocab"), TokenizerError);
  CHECK_THROWS_WITH_AS(Tokenizer::from_vocab_merges(R"({"a": 0})", "a\n", "v"),
                       doctest::Contains("merges.txt line 1"), TokenizerError);
}

TEST_CASE("a minimal tokenizer.json without normalizer, pre-tokenizer or decoder") {
  Tokenizer tok = Tokenizer::from_json(
      R"({"model": {"vocab": {"a": 0, "b": 1, "ab": 2, "c": 3}, "merges": ["a b"]}})", "mini");
  CHECK(tok.encode("abcab") == std::vector<int32_t>{2, 3, 2});
  CHECK(tok.encode("abx") == std::vector<int32_t>{2});  // no unk token: unknown characters vanish, as in HF
  CHECK(tok.decode({2, 3}) == "ab c");                  // no decoder: tokens joined by spaces, as in HF
  CHECK_FALSE(tok.bos_id().has_value());
  CHECK(tok.vocab_size() == 4);
}

TEST_CASE("one Tokenizer encodes and decodes from several threads at once") {
  const Tokenizer& qwen3 = family_tokenizer("qwen3");
  const auto& cases = refs().at("families").at("qwen3").at("cases");
  size_t bad[2] = {0, 0};
  std::vector<std::thread> threads;
  for (size_t t = 0; t < 2; ++t)
    threads.emplace_back([&, t] {
      for (size_t i = t; i < cases.size(); i += 2) {
        auto want = cases[i].at("ids").get<std::vector<int32_t>>();
        if (qwen3.encode(cases[i].at("text").get<std::string>()) != want) ++bad[t];
        if (qwen3.decode(want) != cases[i].at("decoded").get<std::string>()) ++bad[t];
      }
    });
  for (auto& th : threads) th.join();
  CHECK(bad[0] == 0);
  CHECK(bad[1] == 0);
  Tokenizer copy = qwen3;  // copies share the tables
  CHECK(copy.encode("hello world") == qwen3.encode("hello world"));
}

TEST_CASE("format_ids and parse_ids") {
  CHECK(endor::format_ids({}) == "");
  CHECK(endor::format_ids({1, 22557, 0}) == "1 22557 0");
  CHECK(endor::parse_ids("1 22557 0\n") == std::vector<int32_t>{1, 22557, 0});
  CHECK(endor::parse_ids("  7\t8\r\n9  ") == std::vector<int32_t>{7, 8, 9});
  CHECK(endor::parse_ids("").empty());
  CHECK(endor::parse_ids("2147483647") == std::vector<int32_t>{2147483647});
  CHECK_THROWS_AS(endor::parse_ids("2147483648"), TokenizerError);
  CHECK_THROWS_AS(endor::parse_ids("-1"), TokenizerError);
  CHECK_THROWS_AS(endor::parse_ids("1,2"), TokenizerError);
  CHECK_THROWS_WITH_AS(endor::parse_ids("12 abc"), doctest::Contains("'abc' is not a token id"), TokenizerError);
  CHECK_THROWS_AS(endor::parse_ids("99999999999999999999"), TokenizerError);
}
