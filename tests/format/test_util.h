// Shared helpers of the format tests: temporary directories, file bytes, random tensors.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "endor/format.h"

namespace endor::test {

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string templ = std::string(base && *base ? base : "/tmp") + "/endor-format-test-XXXXXX";
    if (!::mkdtemp(templ.data())) throw std::runtime_error("mkdtemp failed");
    path_ = templ;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all, ec);
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

inline bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

inline uint64_t numel_of(const std::vector<uint64_t>& shape) {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

// Random values in roughly N(0, 1) with a fraction `sparsity` of exact zeros (some of them -0.0,
// which must also count as absent). Values are rounded through `exact_type` (F16/BF16) when
// given, so an f16/bf16 encoding must reproduce them bit for bit.
inline std::vector<float> random_tensor(uint64_t n, double sparsity, uint64_t seed,
                                        ValueType exact_type = ValueType::F32) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<float> x(n);
  for (uint64_t i = 0; i < n; ++i) {
    if (unit(rng) < sparsity) {
      x[i] = (i % 3 == 0) ? -0.0f : 0.0f;
      continue;
    }
    float v = normal(rng);
    if (v == 0.0f) v = 0.5f;
    if (exact_type == ValueType::F16) v = f16_to_f32(f32_to_f16(v));
    if (exact_type == ValueType::BF16) v = bf16_to_f32(f32_to_bf16(v));
    x[i] = v;
  }
  return x;
}

inline std::vector<float> decode_all(const TensorView& view) {
  std::vector<float> out(view.layout.rows * view.layout.cols);
  decode_rows_f32(view, 0, view.layout.rows, out.data());
  return out;
}

// A TensorView over an EncodedTensor held in memory.
inline TensorView view_of(const EncodedTensor& e) {
  TensorView v;
  v.layout = e.layout;
  v.data = e.bytes.data();
  return v;
}

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

}  // namespace endor::test
