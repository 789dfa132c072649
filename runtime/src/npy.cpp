// NumPy .npy output (format version 1.0), written to a temporary name and renamed at the end.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "endor/runtime.h"

namespace endor {

void write_npy_f32(const std::string& path, const float* data, size_t rows, size_t cols) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows) +
                       ", " + std::to_string(cols) + "), }";
  // Magic (6) + version (2) + length (2) + header, padded with spaces to a multiple of 64 and
  // ending in '\n' (the NEP 1 layout numpy itself writes).
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  const uint16_t header_len = static_cast<uint16_t>(header.size());

  const std::string temp = path + ".tmp-" + std::to_string(::getpid());
  std::FILE* f = std::fopen(temp.c_str(), "wb");
  if (!f) throw Error(path + ": cannot create " + temp + ": " + std::strerror(errno));
  const unsigned char prefix[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
                                    static_cast<unsigned char>(header_len & 0xff),
                                    static_cast<unsigned char>(header_len >> 8)};
  bool ok = std::fwrite(prefix, 1, sizeof prefix, f) == sizeof prefix &&
            std::fwrite(header.data(), 1, header.size(), f) == header.size();
  // The data is little-endian f32: this runtime only builds for little-endian hosts.
  const size_t n = rows * cols;
  ok = ok && (n == 0 || std::fwrite(data, sizeof(float), n, f) == n);
  ok = (std::fflush(f) == 0) && ok;
  ok = (::fsync(::fileno(f)) == 0) && ok;
  const int saved_errno = errno;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::remove(temp.c_str());
    throw Error(path + ": write failed: " + std::strerror(saved_errno));
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    std::remove(temp.c_str());
    throw Error(path + ": cannot rename " + temp + ": " + std::strerror(e));
  }
}

}  // namespace endor
