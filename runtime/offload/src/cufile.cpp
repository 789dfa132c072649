// cuFile (GPUDirect Storage) availability. The staged path (O_DIRECT into pinned staging, then a
// copy on the copy stream) is what every build uses today; cuFile is reported, not yet used.
#include "endor/offload.h"

namespace endor {

bool cufile_available(std::string* why) {
  if (why) *why = "not supported by this build (cuFile reads straight into device slots are not implemented; "
                  "disk blocks use O_DIRECT into pinned staging)";
  return false;
}

}  // namespace endor
