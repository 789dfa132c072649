// Container round trip through ContainerWriter / ContainerReader, and the writer's file hygiene.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <algorithm>
#include <map>

#include "test_util.h"

using namespace endor;
using namespace endor::test;

namespace {

struct Planned {
  std::string name;
  std::vector<uint64_t> shape;
  EncodeOptions opt;
  double sparsity;
};

TensorInfo meta_of(const std::string& name, const std::vector<uint64_t>& shape, const EncodedTensor& e,
                   const char* source_dtype) {
  TensorInfo m;
  m.name = name;
  m.shape = shape;
  m.encoding = e.layout.encoding;
  m.value_type = e.layout.value_type;
  m.group_size = e.layout.group_size;
  m.nnz = e.layout.nnz;
  m.source_dtype = source_dtype;
  return m;
}

}  // namespace

TEST_CASE("container round trip: tensors, files, config, provenance, tiers") {
  TempDir dir;
  const std::string path = dir.file("model.endor");
  const std::vector<Planned> plan = {
      {"embed.weight", {11, 9}, {Encoding::Dense, ValueType::F16, 0}, 0.0},
      {"layers.0.q.weight", {7, 130}, {Encoding::Bitmap, ValueType::F16, 0}, 0.5},
      {"layers.0.q.bias", {7}, {Encoding::Dense, ValueType::F32, 0}, 0.0},
      {"layers.0.k.weight", {5, 33}, {Encoding::Bitmap, ValueType::BF16, 0}, 0.6},
      {"layers.1.q.weight", {6, 70}, {Encoding::Bitmap, ValueType::I8, 0}, 0.5},
      {"layers.1.k.weight", {3, 2, 20}, {Encoding::Bitmap, ValueType::I4, 16}, 0.5},
      {"head.weight", {4, 9}, {Encoding::Dense, ValueType::I4, 4}, 0.0},
  };
  const std::vector<std::vector<std::string>> groups = {
      {"embed.weight"}, {"layers.0.q.weight", "layers.0.q.bias", "layers.0.k.weight"},
      {"layers.1.q.weight", "layers.1.k.weight"}, {"head.weight"}};
  const std::vector<Tier> tiers = {Tier::Gpu, Tier::Cpu, Tier::Disk, Tier::Gpu};
  const std::string tokenizer = R"({"model": {"type": "BPE"}})";
  const nlohmann::json config = {{"architectures", {"OPTForCausalLM"}}, {"hidden_size", 9}, {"eps", 1e-5}};
  const nlohmann::json provenance = {{"source", "unit-test"}, {"sparsity", 0.5}, {"quant", "mixed"}};

  std::map<std::string, EncodedTensor> encoded;
  for (size_t i = 0; i < plan.size(); ++i) {
    const auto x = random_tensor(numel_of(plan[i].shape), plan[i].sparsity, 100 + i, plan[i].opt.value_type);
    encoded[plan[i].name] = encode_tensor(x.data(), plan[i].shape, plan[i].opt);
  }
  {
    ContainerWriter w(path);
    for (size_t g = 0; g < groups.size(); ++g) {
      w.begin_group(g == 0 ? "embed" : g == 3 ? "head" : "layers." + std::to_string(g - 1), Tier::Gpu);
      for (const std::string& name : groups[g]) {
        const Planned& p = *std::find_if(plan.begin(), plan.end(), [&](const Planned& q) { return q.name == name; });
        const EncodedTensor& e = encoded[name];
        w.add_tensor(meta_of(name, p.shape, e, "F16"), e.bytes.data(), e.bytes.size());
      }
      if (g == 3) w.add_file("tokenizer.json", tokenizer.data(), tokenizer.size());
      w.end_group();
    }
    for (size_t g = 0; g < tiers.size(); ++g) w.groups()[g].tier = tiers[g];  // planned after sizes are known
    w.commit(config, nullptr, provenance);
    CHECK_FALSE(file_exists(w.temp_path()));
  }

  auto r = ContainerReader::open(path);
  CHECK(r->file_bytes() == read_bytes(path).size());
  CHECK(r->header().data_offset == kGroupAlignment);
  CHECK(r->header().manifest_offset + r->header().manifest_bytes == r->file_bytes());
  const Manifest& m = r->manifest();
  CHECK(m.config == config);
  CHECK(m.generation_config.is_null());
  CHECK(m.provenance == provenance);
  REQUIRE(m.groups.size() == 4);
  CHECK(m.groups[1].name == "layers.0");
  for (size_t g = 0; g < tiers.size(); ++g) {
    CHECK(m.groups[g].tier == tiers[g]);
    CHECK(m.groups[g].offset % kGroupAlignment == 0);
    CHECK(r->verify_group(g));
  }
  CHECK(m.groups[1].tensors.size() == 3);
  CHECK_NOTHROW(r->verify_all());

  for (const Planned& p : plan) {
    auto view = r->find_tensor(p.name);
    REQUIRE(view.has_value());
    CHECK(view->info->shape == p.shape);
    CHECK(view->info->offset % kTensorAlignment == 0);
    CHECK(view->info->source_dtype == "F16");
    CHECK(reinterpret_cast<uintptr_t>(view->data) % kTensorAlignment == 0);
    const EncodedTensor& e = encoded[p.name];
    REQUIRE(view->layout.total_bytes == e.bytes.size());
    CHECK(std::memcmp(view->data, e.bytes.data(), e.bytes.size()) == 0);
    CHECK(decode_all(*view) == decode_all(view_of(e)));
  }
  CHECK_FALSE(r->find_tensor("missing").has_value());
  auto tok = r->file("tokenizer.json");
  REQUIRE(tok.has_value());
  CHECK(*tok == tokenizer);
  CHECK_FALSE(r->file("missing.json").has_value());

  // The in-memory path sees the same container.
  const auto bytes = read_bytes(path);
  auto mem = ContainerReader::open_bytes(bytes.data(), bytes.size(), "memory");
  CHECK(mem->manifest().tensors.size() == plan.size());
  CHECK_NOTHROW(mem->verify_all());
}

TEST_CASE("container with no groups and an empty file is valid") {
  TempDir dir;
  const std::string path = dir.file("empty.endor");
  {
    ContainerWriter w(path);
    w.begin_group("files", Tier::Cpu);
    w.add_file("empty.txt", "", 0);
    w.add_file("empty2.txt", nullptr, 0);
    w.end_group();
    w.commit(nlohmann::json::object(), nlohmann::json::object(), nlohmann::json::object());
  }
  auto r = ContainerReader::open(path);
  CHECK(r->manifest().groups.size() == 1);
  CHECK(r->manifest().groups[0].size == 0);
  CHECK(r->file("empty.txt")->empty());
  CHECK(r->file("empty2.txt")->empty());
  CHECK_NOTHROW(r->verify_all());

  const std::string path2 = dir.file("nothing.endor");
  {
    ContainerWriter w(path2);
    w.commit(nlohmann::json::object(), nullptr, nlohmann::json::object());
  }
  CHECK(ContainerReader::open(path2)->manifest().tensors.empty());
}

TEST_CASE("writer: destroying without commit leaves no file") {
  TempDir dir;
  const std::string path = dir.file("out.endor");
  std::string temp;
  {
    ContainerWriter w(path);
    temp = w.temp_path();
    CHECK(temp.find(path + ".tmp-") == 0);
    CHECK(file_exists(temp));
    w.begin_group("g", Tier::Gpu);
    const std::vector<float> x = {1, 0, 2, 0};
    const EncodedTensor e = encode_tensor(x.data(), {2, 2}, {Encoding::Bitmap, ValueType::F32, 0});
    w.add_tensor(meta_of("t", {2, 2}, e, "F32"), e.bytes.data(), e.bytes.size());
  }
  CHECK_FALSE(file_exists(temp));
  CHECK_FALSE(file_exists(path));
}

TEST_CASE("writer: a failed pack leaves an existing output untouched") {
  TempDir dir;
  const std::string path = dir.file("out.endor");
  write_bytes(path, {1, 2, 3});
  {
    ContainerWriter w(path);
    w.begin_group("g", Tier::Gpu);
  }
  CHECK(read_bytes(path) == std::vector<uint8_t>{1, 2, 3});
}

TEST_CASE("writer: unwritable directory gives a clear error naming the output") {
  TempDir dir;
  if (::geteuid() == 0) {
    // root ignores permission bits; a missing directory exercises the same error path.
    const std::string path = dir.file("no/such/dir/out.endor");
    CHECK_THROWS_WITH_AS(ContainerWriter{path}, doctest::Contains(("cannot create " + path + ": No such file").c_str()), Error);
    return;
  }
  const std::string locked = dir.file("locked");
  REQUIRE(::mkdir(locked.c_str(), 0500) == 0);
  const std::string path = locked + "/out.endor";
  CHECK_THROWS_WITH_AS(ContainerWriter{path}, doctest::Contains(("cannot create " + path + ": Permission denied").c_str()), Error);
  CHECK_FALSE(file_exists(path));
}

TEST_CASE("writer: misuse is refused with a message") {
  TempDir dir;
  const std::string path = dir.file("out.endor");
  ContainerWriter w(path);
  const std::vector<float> x = {1, 2, 3, 4};
  const EncodedTensor e = encode_tensor(x.data(), {4}, {Encoding::Dense, ValueType::F32, 0});
  CHECK_THROWS_WITH_AS(w.add_tensor(meta_of("t", {4}, e, ""), e.bytes.data(), e.bytes.size()),
                       doctest::Contains("outside a group"), Error);
  w.begin_group("g", Tier::Gpu);
  CHECK_THROWS_WITH_AS(w.begin_group("h", Tier::Gpu), doctest::Contains("while group 'g' is open"), Error);
  w.add_tensor(meta_of("t", {4}, e, ""), e.bytes.data(), e.bytes.size());
  CHECK_THROWS_WITH_AS(w.add_tensor(meta_of("t", {4}, e, ""), e.bytes.data(), e.bytes.size()),
                       doctest::Contains("duplicate tensor name 't'"), Error);
  TensorInfo longer = meta_of("u", {5}, e, "");
  longer.nnz = 5;
  CHECK_THROWS_WITH_AS(w.add_tensor(longer, e.bytes.data(), e.bytes.size()),
                       doctest::Contains("16 bytes given, the layout needs 20"), Error);
  TensorInfo bad = meta_of("v", {2, 2}, e, "");
  bad.nnz = 5;
  CHECK_THROWS_WITH_AS(w.add_tensor(bad, e.bytes.data(), e.bytes.size()), doctest::Contains("nnz == numel"), Error);
  CHECK_THROWS_WITH_AS(w.commit(nlohmann::json::object(), nullptr, nlohmann::json::object()),
                       doctest::Contains("while group 'g' is open"), Error);
  w.end_group();
  CHECK_THROWS_WITH_AS(w.begin_group("g", Tier::Gpu), doctest::Contains("duplicate group name 'g'"), Error);
  CHECK_THROWS_WITH_AS(w.commit(nlohmann::json::array(), nullptr, nlohmann::json::object()),
                       doctest::Contains("config must be an object"), Error);
}
