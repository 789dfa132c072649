// cuFile (GPUDirect Storage) availability. Disk blocks take the staged path (O_DIRECT into pinned
// staging, then a copy on the copy stream) in every build; this says why cuFile is not used, so a
// run on a machine that has GPUDirect Storage shows what is missing.
#include <sys/stat.h>

#include "endor/offload.h"

namespace endor {

bool cufile_available(std::string* why) {
  std::string reason;
#ifndef ENDOR_OFFLOAD_HAVE_CUFILE_H
  reason = "this build found no cufile.h (the GPUDirect Storage headers)";
#else
  struct stat st {};
  if (::stat("/proc/driver/nvidia-fs", &st) != 0)
    reason = "the nvidia-fs driver is not loaded here (no /proc/driver/nvidia-fs), so cuFile would only "
             "emulate GPUDirect Storage with POSIX reads";
  else
    reason = "cufile.h and the nvidia-fs driver are present, but Endor's cuFile read path is not implemented yet";
#endif
  if (why) *why = reason + "; disk blocks are read with O_DIRECT into staging buffers";
  return false;
}

}  // namespace endor
