// Minimal .npy reader for the pruning fixtures: version 1/2 headers, little-endian or 1-byte
// dtypes, C order. Throws std::runtime_error on anything else.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace npy {

struct Array {
  std::string descr;           // e.g. "<f4", "|u1", "<u2", "|i1"
  std::vector<size_t> shape;
  std::vector<uint8_t> bytes;  // raw data, C order

  size_t numel() const {
    size_t n = 1;
    for (size_t d : shape) n *= d;
    return n;
  }

  template <typename T>
  std::vector<T> as() const {
    const char kind = std::is_floating_point_v<T> ? 'f' : (std::is_signed_v<T> ? 'i' : 'u');
    const std::string want = std::string(sizeof(T) == 1 ? "|" : "<") + kind + std::to_string(sizeof(T));
    if (descr != want) throw std::runtime_error("npy: dtype " + descr + ", wanted " + want);
    std::vector<T> out(numel());
    std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
    return out;
  }
};

inline std::string header_value(const std::string& header, const std::string& key) {
  const size_t k = header.find("'" + key + "'");
  if (k == std::string::npos) throw std::runtime_error("npy: header lacks " + key);
  size_t v = header.find(':', k) + 1;
  while (header[v] == ' ') ++v;
  const char close = header[v] == '(' ? ')' : (header[v] == '\'' ? '\'' : ',');
  const size_t end = header.find(close, v + 1);
  return header.substr(v, end - v + 1);
}

inline Array read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("npy: cannot open " + path);
  char magic[8];
  f.read(magic, 8);
  if (!f || std::memcmp(magic, "\x93NUMPY", 6) != 0) throw std::runtime_error("npy: bad magic in " + path);
  uint32_t header_len = 0;
  if (magic[6] == 1) {
    uint8_t b[2];
    f.read(reinterpret_cast<char*>(b), 2);
    header_len = b[0] | (b[1] << 8);
  } else {
    uint8_t b[4];
    f.read(reinterpret_cast<char*>(b), 4);
    header_len = b[0] | (b[1] << 8) | (b[2] << 16) | (uint32_t(b[3]) << 24);
  }
  std::string header(header_len, '\0');
  f.read(header.data(), header_len);
  if (!f) throw std::runtime_error("npy: truncated header in " + path);
  Array a;
  std::string descr = header_value(header, "descr");
  a.descr = descr.substr(1, descr.size() - 2);
  if (header_value(header, "fortran_order").rfind("False", 0) != 0) throw std::runtime_error("npy: Fortran order in " + path);
  const std::string shape = header_value(header, "shape");
  for (size_t i = 1; i < shape.size();) {
    while (i < shape.size() && !isdigit(static_cast<unsigned char>(shape[i]))) ++i;
    if (i >= shape.size()) break;
    size_t j = i;
    while (isdigit(static_cast<unsigned char>(shape[j]))) ++j;
    a.shape.push_back(std::stoull(shape.substr(i, j - i)));
    i = j;
  }
  const size_t elem = std::stoul(a.descr.substr(2));
  a.bytes.resize(a.numel() * elem);
  f.read(reinterpret_cast<char*>(a.bytes.data()), std::streamsize(a.bytes.size()));
  if (!f) throw std::runtime_error("npy: truncated data in " + path);
  return a;
}

}  // namespace npy
