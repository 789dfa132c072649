// A table of hand-made corrupt containers (llama.cpp test-gguf style): each must be refused at
// open with a one-line message naming the file and the specific problem. Plus the integrity
// checks that run only under verify_all (group checksums, bitmap index).
#include <doctest/doctest.h>
#include <xxhash.h>

#include <functional>

#include "test_util.h"

using namespace endor;
using namespace endor::test;
using nlohmann::json;

namespace {

// Header field positions, from SPEC.md §3 (kept apart from the library's own constants).
constexpr size_t kMajorAt = 8, kFlagsAt = 20, kAlignmentAt = 16, kDataBytesAt = 40, kManifestBytesAt = 56,
                 kReservedAt = 72, kHeaderChecksumAt = 120;

uint64_t get_u64(const std::vector<uint8_t>& b, size_t at) {
  uint64_t v;
  std::memcpy(&v, b.data() + at, 8);
  return v;
}
template <class T>
void put(std::vector<uint8_t>& b, size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof v);
}
void reseal_header(std::vector<uint8_t>& b) { put<uint64_t>(b, kHeaderChecksumAt, XXH3_64bits(b.data(), 120)); }

// A valid container with three groups: dense f16, bitmap f16 + bitmap int4 + dense f32, a file.
struct GoodFile {
  TempDir dir;
  std::string path = dir.file("good.endor");
  std::vector<uint8_t> bytes;
  json manifest;
  Header header;

  GoodFile() {
    ContainerWriter w(path);
    auto add = [&](const std::string& name, std::vector<uint64_t> shape, EncodeOptions opt, double sparsity) {
      const auto x = random_tensor(numel_of(shape), sparsity, name.size(), opt.value_type);
      const EncodedTensor e = encode_tensor(x.data(), shape, opt);
      TensorInfo m;
      m.name = name;
      m.shape = shape;
      m.encoding = e.layout.encoding;
      m.value_type = e.layout.value_type;
      m.group_size = e.layout.group_size;
      m.nnz = e.layout.nnz;
      w.add_tensor(m, e.bytes.data(), e.bytes.size());
    };
    w.begin_group("embed", Tier::Gpu);
    add("embed.weight", {16, 8}, {Encoding::Dense, ValueType::F16, 0}, 0.0);
    w.end_group();
    w.begin_group("layers.0", Tier::Cpu);
    add("layers.0.w", {8, 100}, {Encoding::Bitmap, ValueType::F16, 0}, 0.5);
    add("layers.0.q", {4, 64}, {Encoding::Bitmap, ValueType::I4, 16}, 0.5);
    add("layers.0.bias", {8}, {Encoding::Dense, ValueType::F32, 0}, 0.0);
    w.end_group();
    w.begin_group("files", Tier::Disk);
    const std::string tok = "{\"model\": {}}";
    w.add_file("tokenizer.json", tok.data(), tok.size());
    w.end_group();
    w.commit(json{{"hidden_size", 8}}, nullptr, json{{"tool", "test"}});
    bytes = read_bytes(path);
    header = parse_header(bytes.data(), bytes.size(), path);
    manifest = json::parse(bytes.begin() + long(header.manifest_offset), bytes.end());
  }

  // The good file with its manifest replaced by `m`, every size and checksum made consistent.
  std::vector<uint8_t> with_manifest(const std::string& text) const {
    std::vector<uint8_t> b(bytes.begin(), bytes.begin() + long(header.manifest_offset));
    b.insert(b.end(), text.begin(), text.end());
    Header h = header;
    h.manifest_bytes = text.size();
    h.file_bytes = b.size();
    h.manifest_checksum = XXH3_64bits(text.data(), text.size());
    write_header(h, b.data());
    return b;
  }
  std::vector<uint8_t> with_manifest(const std::function<void(json&)>& edit) const {
    json m = manifest;
    edit(m);
    return with_manifest(m.dump());
  }
  std::vector<uint8_t> with_header(const std::function<void(std::vector<uint8_t>&)>& edit, bool reseal = true) const {
    std::vector<uint8_t> b = bytes;
    edit(b);
    if (reseal) reseal_header(b);
    return b;
  }
};

std::string open_error(const std::string& path) {
  try {
    ContainerReader::open(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "<opened without error>";
}

std::string open_bytes_error(const std::vector<uint8_t>& b, const std::string& name) {
  try {
    ContainerReader::open_bytes(b.data(), b.size(), name);
  } catch (const Error& e) {
    return e.what();
  }
  return "<opened without error>";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Writes `bytes` as <case>.endor and checks both open paths refuse it with `phrase`.
void expect_refused(const GoodFile& g, const std::string& name, const std::vector<uint8_t>& bytes,
                    const std::string& phrase) {
  const std::string path = g.dir.file(name + ".endor");
  write_bytes(path, bytes);
  const std::string msg = open_error(path);
  CAPTURE(name);
  CAPTURE(msg);
  CHECK(contains(msg, phrase));
  CHECK(msg.rfind(path + ": ", 0) == 0);              // names the file, first
  CHECK(msg.find('\n') == std::string::npos);          // one line
  CHECK(contains(open_bytes_error(bytes, name), phrase));
  CHECK(read_bytes(path) == bytes);                    // input never modified
}

}  // namespace

TEST_CASE("header fields sit at the byte positions of SPEC.md §3") {
  GoodFile g;
  const auto& b = g.bytes;
  CHECK(std::memcmp(b.data(), "\x89" "ENDOR\r\n", 8) == 0);
  uint16_t major, minor;
  uint32_t header_bytes, alignment, flags;
  std::memcpy(&major, &b[8], 2);
  std::memcpy(&minor, &b[10], 2);
  std::memcpy(&header_bytes, &b[12], 4);
  std::memcpy(&alignment, &b[16], 4);
  std::memcpy(&flags, &b[20], 4);
  CHECK(major == 1);
  CHECK(minor == 0);
  CHECK(header_bytes == 128);
  CHECK(alignment == 4096);
  CHECK(flags == 0);
  CHECK(get_u64(b, 24) == b.size());                                   // file_bytes
  CHECK(get_u64(b, 32) == 4096);                                       // data_offset
  CHECK(get_u64(b, 32) + get_u64(b, 40) == get_u64(b, 48));           // data then manifest
  CHECK(get_u64(b, 48) + get_u64(b, 56) == b.size());                  // manifest ends the file
  CHECK(get_u64(b, 64) == XXH3_64bits(b.data() + get_u64(b, 48), get_u64(b, 56)));
  for (size_t i = 72; i < 120; ++i) REQUIRE(b[i] == 0);
  CHECK(get_u64(b, 120) == XXH3_64bits(b.data(), 120));
  for (size_t i = 128; i < 4096; ++i) REQUIRE(b[i] == 0);              // padding to data_offset
  CHECK(b[get_u64(b, 48)] == '{');
  // Groups' checksums cover [offset, offset + size) including padding between blobs.
  for (const json& grp : g.manifest["groups"]) {
    const uint64_t off = grp["offset"], size = grp["size"];
    CHECK(grp["checksum"] == [&] {
      char buf[17];
      std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)XXH3_64bits(b.data() + off, size));
      return std::string(buf);
    }());
  }
  CHECK_NOTHROW(ContainerReader::open(g.path)->verify_all());
}

TEST_CASE("corrupt headers are refused with a specific message naming the file") {
  GoodFile g;
  const uint64_t n = g.bytes.size();
  struct Case {
    const char* name;
    std::vector<uint8_t> bytes;
    std::string phrase;
  };
  const std::vector<Case> cases = {
      {"bad-magic", g.with_header([](auto& b) { b[1] = 'X'; }, false), "not an .endor file (bad magic)"},
      {"future-major", g.with_header([](auto& b) { put<uint16_t>(b, kMajorAt, 2); }, false),
       "unsupported format version 2.0 (this build reads 1.x)"},
      {"header-checksum", g.with_header([](auto& b) { b[kDataBytesAt] ^= 1; }, false), "header checksum mismatch"},
      {"flags", g.with_header([](auto& b) { put<uint32_t>(b, kFlagsAt, 1); }), "header flags 0x00000001 are not 0"},
      {"alignment", g.with_header([](auto& b) { put<uint32_t>(b, kAlignmentAt, 8192); }), "alignment is 8192"},
      {"header-bytes", g.with_header([](auto& b) { put<uint32_t>(b, 12, 256); }), "header_bytes is 256"},
      {"reserved", g.with_header([](auto& b) { b[kReservedAt + 5] = 7; }), "reserved header byte 77 is not 0"},
      {"manifest-1TB", g.with_header([](auto& b) { put<uint64_t>(b, kManifestBytesAt, 1ull << 40); }),
       "manifest of 1099511627776 bytes exceeds the 64 MiB limit"},
      {"manifest-empty",
       g.with_header([](auto& b) { put<uint64_t>(b, kManifestBytesAt, 0); }), "manifest is empty"},
      {"data-region", g.with_header([](auto& b) { put<uint64_t>(b, kDataBytesAt, get_u64(b, kDataBytesAt) + 64); }),
       "does not end where the manifest starts"},
      {"data-wraps",
       g.with_header([](auto& b) { put<uint64_t>(b, kDataBytesAt, ~0ull - 100); }), "does not end where the manifest starts"},
      {"data-offset", g.with_header([](auto& b) { put<uint64_t>(b, 32, 64); }), "data_offset 64 is not a multiple"},
      {"manifest-past-end",
       g.with_header([&](auto& b) {
         put<uint64_t>(b, 48, get_u64(b, 48) + 1);
         put<uint64_t>(b, kDataBytesAt, get_u64(b, kDataBytesAt) + 1);
       }),
       "does not end at the end of the file"},
      {"appended", [&] { auto b = g.bytes; b.push_back(0); return b; }(), "appended to"},
      {"file-bytes-lie", g.with_header([&](auto& b) { put<uint64_t>(b, 24, n + 4096); }), "truncated"},
      {"manifest-checksum",
       [&] { auto b = g.bytes; b[g.header.manifest_offset + 3] ^= 0x20; return b; }(), "manifest checksum mismatch"},
  };
  for (const Case& c : cases) expect_refused(g, c.name, c.bytes, c.phrase);
}

TEST_CASE("truncation anywhere is refused: every 1/37 of the file and at the boundaries") {
  GoodFile g;
  const uint64_t n = g.bytes.size();
  std::vector<uint64_t> cuts = {0, 1, 7, 8, 127, 128, 129, 4095, 4096, 4097, g.header.manifest_offset,
                                g.header.manifest_offset + 1, n - 1};
  for (uint64_t k = 1; k < 37; ++k) cuts.push_back(n * k / 37);
  for (uint64_t cut : cuts) {
    std::vector<uint8_t> b(g.bytes.begin(), g.bytes.begin() + long(cut));
    expect_refused(g, "truncated-" + std::to_string(cut), b, "truncated");
  }
}

TEST_CASE("corrupt manifests are refused with the key path or tensor named") {
  GoodFile g;
  using E = std::function<void(json&)>;
  struct Case {
    const char* name;
    std::vector<uint8_t> bytes;
    std::string phrase;
  };
  auto edit = [&](E e) { return g.with_manifest(e); };
  const uint64_t data_end = g.header.manifest_offset;
  const std::vector<Case> cases = {
      // Not JSON / wrong top-level shape.
      {"not-json", g.with_manifest(std::string("{\"format\": \"endor\", oops")), "manifest is not valid JSON"},
      {"not-utf8", g.with_manifest(std::string("{\"format\": \"\xff\xfe\"}")), "manifest is not valid JSON"},
      {"top-array", g.with_manifest(std::string("[1, 2]")), "the top level must be an object"},
      {"deep-nesting", g.with_manifest("{\"config\": " + std::string(100000, '[') + std::string(100000, ']') + "}"),
       "manifest nests arrays/objects deeper than 64 levels"},
      {"nesting-in-string-ok", g.with_manifest(std::string("{\"x\": \"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\\\"\"}")),
       "missing key format"},
      {"format-name", edit([](json& m) { m["format"] = "gguf"; }), "format must be \"endor\""},
      {"version-mismatch", edit([](json& m) { m["version"] = {1, 3}; }), "version 1.3 disagrees with the header's 1.0"},
      {"version-type", edit([](json& m) { m["version"] = "1.0"; }), "version must be an array"},
      // Wrong JSON types, reported with the key path.
      {"config-type", edit([](json& m) { m["config"] = json::array(); }), "config must be an object"},
      {"gencfg-type", edit([](json& m) { m["generation_config"] = 3; }), "generation_config must be an object or null"},
      {"provenance-missing", edit([](json& m) { m.erase("provenance"); }), "missing key provenance"},
      {"tensors-type", edit([](json& m) { m["tensors"] = json::object(); }), "tensors must be an array"},
      {"tensor-type", edit([](json& m) { m["tensors"][1] = "x"; }), "tensors[1] must be an object"},
      {"shape-type", edit([](json& m) { m["tensors"][0]["shape"] = "16x8"; }), "tensors[0].shape must be an array"},
      {"dim-float", edit([](json& m) { m["tensors"][1]["shape"][1] = 2.5; }),
       "tensors[1].shape[1] must be a non-negative integer"},
      {"offset-negative", edit([](json& m) { m["groups"][0]["offset"] = -4096; }),
       "groups[0].offset must be a non-negative integer"},
      {"offset-string", edit([](json& m) { m["tensors"][2]["offset"] = "4096"; }),
       "tensors[2].offset must be a non-negative integer"},
      {"name-type", edit([](json& m) { m["files"][0]["name"] = 1; }), "files[0].name must be a string"},
      {"nnz-missing", edit([](json& m) { m["tensors"][0].erase("nnz"); }), "missing key tensors[0].nnz"},
      {"checksum-format", edit([](json& m) { m["groups"][1]["checksum"] = "ABCDEF0123456789"; }),
       "groups[1].checksum must be 16 lowercase hex digits"},
      {"group-size-huge", edit([](json& m) { m["tensors"][2]["group_size"] = 1ull << 40; }),
       "tensors[2].group_size = 1099511627776 does not fit in 32 bits"},
      // Unknown enum values.
      {"unknown-encoding", edit([](json& m) { m["tensors"][1]["encoding"] = "bitmap-tile"; }),
       "tensor 'layers.0.w': unsupported encoding 'bitmap-tile'"},
      {"unknown-dtype", edit([](json& m) { m["tensors"][1]["dtype"] = "fp8"; }),
       "tensor 'layers.0.w': unsupported dtype 'fp8'"},
      {"unknown-tier", edit([](json& m) { m["groups"][0]["tier"] = "nvme"; }), "group 'embed': unknown tier 'nvme'"},
      {"unknown-group", edit([](json& m) { m["tensors"][0]["group"] = "nope"; }),
       "tensor 'embed.weight': unknown group 'nope'"},
      // Names.
      {"dup-tensor", edit([](json& m) { m["tensors"][3]["name"] = "layers.0.w"; }), "duplicate tensor name 'layers.0.w'"},
      {"dup-group", edit([](json& m) { m["groups"][1]["name"] = "embed"; }), "duplicate group name 'embed'"},
      {"dup-file", edit([](json& m) { m["files"].push_back(m["files"][0]); }), "duplicate file name 'tokenizer.json'"},
      {"empty-name", edit([](json& m) { m["tensors"][0]["name"] = ""; }), "tensors[0].name is empty"},
      // Extents.
      {"group-unaligned", edit([](json& m) { m["groups"][1]["offset"] = uint64_t(m["groups"][1]["offset"]) + 64; }),
       "group 'layers.0': offset"},
      {"group-outside", edit([&](json& m) { m["groups"][2]["offset"] = (data_end / 4096 + 1) * 4096; }),
       "group 'files': extent"},
      {"group-size-wraps", edit([](json& m) { m["groups"][2]["size"] = ~0ull; }), "outside the data region"},
      {"group-before-data", edit([](json& m) { m["groups"][0]["offset"] = 0; }), "outside the data region"},
      {"groups-out-of-order", edit([](json& m) { std::swap(m["groups"][0], m["groups"][1]); }),
       "before the previous group ends"},
      {"group-too-long", edit([](json& m) { m["groups"][1]["size"] = uint64_t(m["groups"][1]["size"]) + 64; }),
       "does not span exactly"},
      {"tensor-outside", edit([](json& m) { m["tensors"][0]["offset"] = m["groups"][1]["offset"]; }),
       "tensor 'embed.weight': extent"},
      {"tensor-offset-wraps", edit([](json& m) { m["tensors"][3]["offset"] = ~0ull - 63; }),
       "tensor 'layers.0.bias': extent"},
      {"tensor-unaligned", edit([](json& m) { m["tensors"][2]["offset"] = uint64_t(m["tensors"][2]["offset"]) + 16; }),
       "is not a multiple of 64"},
      {"tensor-overlap", edit([](json& m) { m["tensors"][2]["offset"] = uint64_t(m["tensors"][1]["offset"]) + 64; }),
       "tensor 'layers.0.q' overlaps tensor 'layers.0.w'"},
      {"file-overlap", edit([](json& m) {
         m["files"][0]["group"] = "layers.0";
         m["files"][0]["offset"] = m["tensors"][3]["offset"];
       }),
       "overlaps"},
      {"tensors-out-of-order", edit([](json& m) { std::swap(m["tensors"][1], m["tensors"][2]); }),
       "tensors are not listed in file order"},
      // Shape / dtype / size / nnz against the layout formula.
      {"shape-mismatch", edit([](json& m) { m["tensors"][0]["shape"] = {16, 9}; }),
       "tensor 'embed.weight': dense tensor needs nnz == numel (144), got 128"},
      {"shape-and-nnz", edit([](json& m) { m["tensors"][0]["shape"] = {16, 9}; m["tensors"][0]["nnz"] = 144; }),
       "tensor 'embed.weight': size 256 does not match"},
      {"dtype-mismatch", edit([](json& m) { m["tensors"][3]["dtype"] = "f16"; }),
       "tensor 'layers.0.bias': size 32 does not match"},
      {"size-mismatch", edit([](json& m) { m["tensors"][1]["size"] = uint64_t(m["tensors"][1]["size"]) - 1; }),
       "does not match its shape/encoding/dtype/nnz"},
      {"nnz-gt-numel", edit([](json& m) { m["tensors"][1]["nnz"] = 801; }),
       "tensor 'layers.0.w': nnz 801 exceeds the element count 800"},
      {"dense-nnz", edit([](json& m) { m["tensors"][0]["nnz"] = 100; }), "dense tensor needs nnz == numel"},
      {"rank-0", edit([](json& m) { m["tensors"][0]["shape"] = json::array(); }), "shape must have 1 to 8 dimensions"},
      {"rank-9", edit([](json& m) { m["tensors"][0]["shape"] = {1, 1, 1, 1, 1, 1, 1, 1, 128}; }),
       "shape must have 1 to 8 dimensions"},
      {"dim-0", edit([](json& m) { m["tensors"][0]["shape"] = {0, 8}; }), "shape dimensions must be >= 1"},
      {"numel-overflow", edit([](json& m) { m["tensors"][0]["shape"] = {1ull << 40, 1ull << 40}; }),
       "integer overflow"},
      {"int4-group-size-0", edit([](json& m) { m["tensors"][2]["group_size"] = 0; }), "int4 needs group_size >= 1"},
      {"int4-no-group-size", edit([](json& m) { m["tensors"][2].erase("group_size"); }), "int4 needs group_size >= 1"},
      {"f16-group-size", edit([](json& m) { m["tensors"][1]["group_size"] = 128; }), "group_size must be 0 for f16"},
      // int8g (format 1.2): a group size of its own; int8's scales are per row.
      {"int8g-no-group-size", edit([](json& m) { m["tensors"][2]["dtype"] = "int8g"; m["tensors"][2].erase("group_size"); }),
       "int8g needs group_size >= 1"},
      {"int4-as-int8g", edit([](json& m) { m["tensors"][2]["dtype"] = "int8g"; }),
       "tensor 'layers.0.q': size"},
      {"int8-group-size", edit([](json& m) { m["tensors"][2]["dtype"] = "int8"; }), "group_size must be 0 for int8"},
  };
  for (const Case& c : cases) expect_refused(g, c.name, c.bytes, c.phrase);
}

TEST_CASE("forward compatibility: unknown keys are ignored, a newer minor version opens") {
  GoodFile g;
  const auto with_keys = g.with_manifest([](json& m) {
    m["future_top_level"] = {{"anything", 1}};
    m["tensors"][0]["future_codec_param"] = 3;
    m["groups"][0]["prefetch_hint"] = "x";
    m["files"][0]["mime"] = "application/json";
  });
  CHECK_NOTHROW(ContainerReader::open_bytes(with_keys.data(), with_keys.size(), "keys")->verify_all());

  auto minor = g.with_manifest([](json& m) { m["version"] = {1, 7}; });
  put<uint16_t>(minor, 10, 7);
  reseal_header(minor);
  auto r = ContainerReader::open_bytes(minor.data(), minor.size(), "minor");
  CHECK(r->header().version_minor == 7);
  CHECK(r->manifest().version_minor == 7);
}

TEST_CASE("open: missing file, directory, and empty file") {
  GoodFile g;
  const std::string missing = g.dir.file("missing.endor");
  CHECK(open_error(missing) == missing + ": cannot open: No such file or directory");
  CHECK(open_error(g.dir.path()) == g.dir.path() + ": not a regular file");
  const std::string empty = g.dir.file("empty.endor");
  write_bytes(empty, {});
  CHECK(contains(open_error(empty), "file is too short (0 bytes)"));
}

TEST_CASE("verify_all detects a group checksum mismatch that open does not read") {
  GoodFile g;
  const json& t = g.manifest["tensors"][0];  // embed.weight, dense: any byte flip is data corruption
  auto b = g.bytes;
  b[uint64_t(t["offset"]) + 5] ^= 0x01;
  const std::string path = g.dir.file("flipped.endor");
  write_bytes(path, b);
  auto r = ContainerReader::open(path);  // open does not hash the data
  CHECK_FALSE(r->verify_group(0));
  CHECK(r->verify_group(1));
  CHECK_THROWS_WITH_AS(r->verify_all(), doctest::Contains((path + ": group 'embed' checksum mismatch").c_str()), Error);
}

TEST_CASE("verify_all runs validate_bitmap: an inconsistent index with a correct checksum is caught") {
  GoodFile g;
  auto b = g.bytes;
  // layers.0.w is bitmap f16 [8, 100]: index at blob offset 8·2·8 = 128, entry (row 3, block 0).
  const uint64_t blob = g.manifest["tensors"][1]["offset"];
  uint32_t entry;
  std::memcpy(&entry, &b[blob + 128 + 3 * 4], 4);
  entry += 1;
  std::memcpy(&b[blob + 128 + 3 * 4], &entry, 4);
  // Re-seal the group checksum so only the index is wrong.
  const json& grp = g.manifest["groups"][1];
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx",
                (unsigned long long)XXH3_64bits(b.data() + uint64_t(grp["offset"]), uint64_t(grp["size"])));
  GoodFile& gm = g;
  gm.bytes = b;
  const auto sealed = gm.with_manifest([&](json& m) { m["groups"][1]["checksum"] = hex; });
  const std::string path = g.dir.file("bad-index.endor");
  write_bytes(path, sealed);
  auto r = ContainerReader::open(path);
  CHECK(r->verify_group(1));
  CHECK_THROWS_WITH_AS(r->verify_all(),
                       doctest::Contains((path + ": tensor 'layers.0.w': bitmap index entry (row 3, block 0)").c_str()),
                       Error);
}
