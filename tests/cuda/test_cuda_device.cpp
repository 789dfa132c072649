// The CUDA backend's device handling: availability (and the skip line without a device), memory
// (zeroed alloc, upload/download, copy incl. overlapping ranges, ownership checks), and the
// checks prepare_weight makes before trusting a weight.
#include <cstdio>

#include "cuda_test_util.h"

using namespace endor;
using namespace endor::cudatest;

TEST_CASE("cuda: device availability") {
  std::string why;
  if (!gpu_available(&why)) {
    std::printf("no CUDA device: skipping %d GPU tests (%s)\n", gpu_test_count(), why.c_str());
    std::fflush(stdout);
    CHECK_THROWS_AS(make_cuda_backend(), Error);  // a clear error, not a crash
    return;
  }
  auto b = make_cuda_backend();
  std::printf("CUDA device: %s; running %d GPU tests\n", b->name().c_str(), gpu_test_count());
  CHECK(b->name().rfind("cuda (", 0) == 0);
}

GPU_TEST_CASE("cuda: a device that does not exist is a clear error") {
  REQUIRE_GPU();
  CHECK_THROWS_AS(make_cuda_backend(1000), Error);
  cuda::Options opt;
  opt.fused_max_tokens = 0;
  CHECK_THROWS_AS(make_cuda_backend(opt), Error);
}

GPU_TEST_CASE("cuda: alloc is zeroed; upload, download and copy move exact bits") {
  REQUIRE_GPU();
  auto b = make_cuda_backend();
  const size_t n = 100003;  // not a multiple of anything convenient
  DeviceFloats a(*b, n);
  for (float v : a.download()) CHECK_UNARY(bits(v) == 0u);

  std::vector<float> host = random_normal(n, 1);
  host[0] = -0.0f;
  host[1] = std::numeric_limits<float>::infinity();
  host[2] = std::numeric_limits<float>::denorm_min();
  b->upload(a.get(), host.data(), n);
  const std::vector<float> back = a.download();
  size_t differ = 0;
  for (size_t i = 0; i < n; ++i) differ += bits(back[i]) != bits(host[i]);
  CHECK(differ == 0);

  DeviceFloats c(*b, n);
  b->copy(c.get(), a.get(), n);
  differ = 0;
  const std::vector<float> copied = c.download();
  for (size_t i = 0; i < n; ++i) differ += bits(copied[i]) != bits(host[i]);
  CHECK(differ == 0);

  // Overlapping ranges behave like memmove, both directions.
  b->copy(a.get() + 7, a.get(), n - 7);
  std::vector<float> expect = host;
  std::memmove(expect.data() + 7, expect.data(), (n - 7) * sizeof(float));
  CHECK(a.download() == expect);
  b->copy(a.get(), a.get() + 5, n - 5);
  std::memmove(expect.data(), expect.data() + 5, (n - 5) * sizeof(float));
  CHECK(a.download() == expect);
}

GPU_TEST_CASE("cuda: free checks ownership; raw byte buffers round-trip") {
  REQUIRE_GPU();
  auto b = make_cuda_backend();
  auto other = make_cuda_backend();
  float* p = other->alloc(16);
  CHECK_THROWS_AS(b->free(p), Error);  // not this backend's pointer
  other->free(p);
  CHECK_THROWS_AS(other->free(p), Error);  // double free is refused, not passed to cudaFree
  b->free(nullptr);

  std::vector<uint16_t> host(999);
  for (size_t i = 0; i < host.size(); ++i) host[i] = uint16_t(i * 37u);
  // Uploaded through the f32 interface: 999 u16 are 499.5 floats, so round the buffer up.
  std::vector<float> staging((host.size() * 2 + 3) / 4, 0.0f);
  std::memcpy(staging.data(), host.data(), host.size() * 2);
  void* raw = cuda::alloc_bytes(*b, staging.size() * 4);
  std::vector<uint16_t> zero(host.size(), 1);
  cuda::download_bytes(*b, zero.data(), raw, zero.size() * 2);
  CHECK(std::all_of(zero.begin(), zero.end(), [](uint16_t v) { return v == 0; }));
  b->upload(static_cast<float*>(raw), staging.data(), staging.size());
  std::vector<uint16_t> back(host.size());
  cuda::download_bytes(*b, back.data(), raw, back.size() * 2);
  CHECK(back == host);
  cuda::free_bytes(*b, raw);
  CHECK_THROWS_AS(cuda::free_bytes(*b, raw), Error);

  auto cpu = make_exact_cpu_backend(1);
  CHECK_THROWS_AS(cuda::alloc_bytes(*cpu, 16), Error);  // the cuda:: helpers need a CUDA backend
}

GPU_TEST_CASE("cuda: prepare_weight refuses inconsistent layouts and indexes; weights stay with their backend") {
  REQUIRE_GPU();
  auto b = make_cuda_backend();
  const auto w = random_weights(5, 5000, 0.5, 3);
  const EncodedWeight ew = encode(w, 5, 5000, Encoding::Bitmap, ValueType::F16);

  TensorView bad = ew.view();
  bad.layout.words_per_row += 1;  // sections no longer where the format puts them
  CHECK_THROWS_AS(b->prepare_weight(bad), Error);

  EncodedWeight disordered = ew;  // row 1's first index entry claims more values than row 1, block 1 has
  uint32_t e0, e1;
  uint8_t* index = disordered.enc.bytes.data() + disordered.enc.layout.index_offset;
  std::memcpy(&e0, index + 4 * 2, 4);
  std::memcpy(&e1, index + 4 * 3, 4);
  REQUIRE(e1 > e0);
  const uint32_t swapped = e1 + 1;
  std::memcpy(index + 4 * 2, &swapped, 4);
  CHECK_THROWS_AS(b->prepare_weight(disordered.view()), Error);

  TensorView no_data = ew.view();
  no_data.data = nullptr;
  CHECK_THROWS_AS(b->prepare_weight(no_data), Error);

  // int8g (format 1.2): a group size or a scales section that disagrees with the shape is refused
  // before anything reads the scales; the consistent weight is accepted.
  const EncodedWeight g32 = encode(w, 5, 5000, Encoding::Bitmap, ValueType::I8G, 32);
  CHECK(b->prepare_weight(g32.view()) != nullptr);
  for (int what = 0; what < 3; ++what) {
    CAPTURE(what);
    TensorView bad_groups = g32.view();
    if (what == 0) bad_groups.layout.group_size = 64;       // groups_per_row still ceil(5000/32)
    if (what == 1) bad_groups.layout.group_size = 0;        // no groups at all
    if (what == 2) bad_groups.layout.scales_bytes -= 16;    // the last row's scales cut short
    CHECK_THROWS_AS(b->prepare_weight(bad_groups), Error);
  }

  auto cpu = make_exact_cpu_backend(1);
  auto cpu_weight = cpu->prepare_weight(ew.view());
  DeviceFloats x(*b, 5000), y(*b, 5);
  CHECK_THROWS_AS(b->linear(*cpu_weight, x.get(), 1, nullptr, y.get()), Error);
  auto cuda_weight = b->prepare_weight(ew.view());
  CHECK(cuda_weight->out_features() == 5);
  CHECK(cuda_weight->in_features() == 5000);
  std::vector<float> host_y(5);
  CHECK_THROWS_AS(cpu->linear(*cuda_weight, x.get(), 1, nullptr, host_y.data()), Error);
}
