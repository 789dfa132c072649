// Progress on stderr for long work: one line rewritten in place on a terminal, a line every
// 10 % (or 30 s) otherwise, so logs stay short.
#pragma once

#include <chrono>
#include <string>

#include "endor/pack.h"

namespace endor::cli {

class ProgressDisplay {
 public:
  ProgressDisplay();
  ~ProgressDisplay();
  void update(const PackProgress&);
  void finish();  // ends the in-place line (if any)

 private:
  bool tty_ = false, open_line_ = false;
  int last_decile_ = -1;
  std::string stage_;  // a new stage (convert, calibrate, pack) starts a new line
  std::chrono::steady_clock::time_point start_, last_draw_;
  std::chrono::steady_clock::time_point stage_start_ = std::chrono::steady_clock::now();  // rate and ETA per stage
};

}  // namespace endor::cli
