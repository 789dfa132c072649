#include "scratch_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "detail.h"

namespace endor::packer_detail {

ScratchFile::ScratchFile(const std::string& path, const TempFileCallback& on_temp_file) : path_(path) {
  if (on_temp_file) on_temp_file(path_, true);
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  const int err = errno;
  if (fd_ >= 0) ::unlink(path_.c_str());
  if (on_temp_file) on_temp_file(path_, false);
  if (fd_ < 0) fail(path_, std::string("cannot create a temporary file: ") + std::strerror(err));
}

ScratchFile::~ScratchFile() {
  if (fd_ >= 0) ::close(fd_);
}

void ScratchFile::write(uint64_t offset, const void* bytes, uint64_t n) {
  const char* p = static_cast<const char*>(bytes);
  const uint64_t end = offset + n;
  while (n > 0) {
    const ssize_t w = ::pwrite(fd_, p, size_t(std::min<uint64_t>(n, 1u << 30)), off_t(offset));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail(path_, std::string("cannot write the temporary file: ") + std::strerror(errno));
    p += w;
    offset += uint64_t(w);
    n -= uint64_t(w);
  }
  end_ = std::max(end_, end);
}

void ScratchFile::read(uint64_t offset, void* bytes, uint64_t n) const {
  char* p = static_cast<char*>(bytes);
  while (n > 0) {
    const ssize_t r = ::pread(fd_, p, size_t(std::min<uint64_t>(n, 1u << 30)), off_t(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail(path_, std::string("cannot read the temporary file: ") + std::strerror(errno));
    if (r == 0) fail(path_, "temporary file shorter than what was written to it");
    p += r;
    offset += uint64_t(r);
    n -= uint64_t(r);
  }
}

uint64_t ScratchFile::append(const void* bytes, uint64_t n) {
  const uint64_t at = end_;
  write(at, bytes, n);
  return at;
}

}  // namespace endor::packer_detail
