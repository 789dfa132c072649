// Atomic text outputs (CSV, JSON, SVG): temp file + fsync + rename, never a partial file.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "detail.h"
#include "endor/output_file.h"

namespace endor {

void write_file_atomic(const std::string& path, const std::string& content,
                       const TempFileCallback& on_temp_file) {
  const std::string temp = path + ".tmp-" + std::to_string(::getpid());
  if (on_temp_file) on_temp_file(temp, true);  // before the file exists: a signal cannot leave it behind
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    if (on_temp_file) on_temp_file(temp, false);
    packer_detail::fail(path, std::string("cannot create: ") + std::strerror(err));
  }
  auto abandon = [&](const std::string& what) {
    const int err = errno;
    ::close(fd);
    ::unlink(temp.c_str());
    if (on_temp_file) on_temp_file(temp, false);
    packer_detail::fail(path, what + ": " + std::strerror(err));
  };
  const char* p = content.data();
  size_t left = content.size();
  while (left > 0) {
    const ssize_t w = ::write(fd, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) abandon("cannot write");
    p += w;
    left -= size_t(w);
  }
  if (::fsync(fd) != 0) abandon("cannot sync");
  if (::close(fd) != 0) {
    ::unlink(temp.c_str());
    if (on_temp_file) on_temp_file(temp, false);
    packer_detail::fail(path, std::string("cannot close: ") + std::strerror(errno));
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    if (on_temp_file) on_temp_file(temp, false);
    packer_detail::fail(path, std::string("cannot rename the temporary file into place: ") + std::strerror(err));
  }
  if (on_temp_file) on_temp_file(temp, false);
}

}  // namespace endor
