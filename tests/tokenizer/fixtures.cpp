#include "fixtures.h"

#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>

#include <zstd.h>

namespace tokenizer_test {

std::string fixture_path(const std::string& relative) {
  return std::string(ENDOR_SOURCE_DIR) + "/tests/fixtures/tokenizers/" + relative;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string read_fixture(const std::string& relative) {
  std::string data = read_file(fixture_path(relative));
  if (relative.size() < 4 || relative.compare(relative.size() - 4, 4, ".zst") != 0) return data;
  std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> ctx(ZSTD_createDCtx(), ZSTD_freeDCtx);
  std::string out;
  std::string buffer(ZSTD_DStreamOutSize(), '\0');
  ZSTD_inBuffer in{data.data(), data.size(), 0};
  size_t ret = 1;
  while (in.pos < in.size) {
    ZSTD_outBuffer o{buffer.data(), buffer.size(), 0};
    ret = ZSTD_decompressStream(ctx.get(), &o, &in);
    if (ZSTD_isError(ret)) throw std::runtime_error(relative + ": " + ZSTD_getErrorName(ret));
    out.append(buffer.data(), o.pos);
  }
  if (ret != 0) throw std::runtime_error(relative + ": truncated zstd frame");
  return out;
}

const nlohmann::json& refs() {
  static const nlohmann::json j = nlohmann::json::parse(read_fixture("refs.json.zst"));
  return j;
}

const endor::Tokenizer& family_tokenizer(const std::string& family) {
  static std::map<std::string, endor::Tokenizer> loaded;
  auto it = loaded.find(family);
  if (it != loaded.end()) return it->second;
  const nlohmann::json& fam = refs().at("families").at(family);
  std::string text = read_fixture(fam.at("tokenizer").get<std::string>());
  if (!fam.at("patch").is_null()) {
    nlohmann::json j = nlohmann::json::parse(text);
    j.update(fam.at("patch"));
    text = j.dump();
  }
  return loaded.emplace(family, endor::Tokenizer::from_json(text, family)).first->second;
}

}  // namespace tokenizer_test
