// Private to endor_packer: a temporary file without a name, for data too large to keep in memory
// (the calibration activations, the encoded tensors waiting for the output pass).
#pragma once

#include <cstdint>
#include <string>

#include "endor/output_file.h"

namespace endor::packer_detail {

// Created at `path` (O_EXCL) and unlinked at once, so the file is gone however the process ends
// (even SIGKILL); the kernel frees its blocks when the descriptor closes. on_temp_file sees the
// path registered before creation and released after the unlink. Reads and writes are pread /
// pwrite of whole ranges; errors (ENOSPC, EIO) throw endor::Error naming the path.
class ScratchFile {
 public:
  ScratchFile(const std::string& path, const TempFileCallback& on_temp_file);
  ~ScratchFile();
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

  void write(uint64_t offset, const void* bytes, uint64_t n);
  void read(uint64_t offset, void* bytes, uint64_t n) const;
  // Appends at the end of what was written so far; returns the offset.
  uint64_t append(const void* bytes, uint64_t n);

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t end_ = 0;  // one past the last byte written
};

}  // namespace endor::packer_detail
