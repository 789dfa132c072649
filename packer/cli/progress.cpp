#include "progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>

namespace endor::cli {

ProgressDisplay::ProgressDisplay()
    : tty_(::isatty(STDERR_FILENO) == 1), start_(std::chrono::steady_clock::now()), last_draw_(start_) {}

ProgressDisplay::~ProgressDisplay() { finish(); }

void ProgressDisplay::update(const PackProgress& p) {
  // A stage after the first (calibration: convert, calibrate, pack) shows its first update.
  const bool new_stage = !stage_.empty() && p.stage != stage_;
  if (p.stage != stage_) {
    finish();
    stage_ = p.stage;
    last_decile_ = -1;
    stage_start_ = std::chrono::steady_clock::now();
  }
  const auto now = std::chrono::steady_clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double stage_elapsed = std::chrono::duration<double>(now - stage_start_).count();
  const double frac = p.bytes_total ? double(p.bytes_done) / double(p.bytes_total)
                      : p.tensors_total ? double(p.tensors_done) / double(p.tensors_total) : 0.0;
  const bool done = p.tensors_total > 0 && p.tensors_done == p.tensors_total;
  char line[512];
  std::snprintf(line, sizeof line, "%s: %3.0f%%  %llu/%llu %s", p.stage.c_str(), 100.0 * frac,
                (unsigned long long)p.tensors_done, (unsigned long long)p.tensors_total, p.unit);
  std::string text = line;
  if (p.bytes_total) text += "  " + format_bytes(p.bytes_done) + " / " + format_bytes(p.bytes_total);
  std::snprintf(line, sizeof line, "  %.0f s", elapsed);
  text += line;
  // The stage's rate and time left, once it has run a while (the first steps include warm-up).
  if (!done && frac > 0.0 && stage_elapsed >= 2.0) {
    if (p.bytes_total)
      std::snprintf(line, sizeof line, "  %.1f MB/s", double(p.bytes_done) / 1e6 / stage_elapsed);
    else
      std::snprintf(line, sizeof line, "  %.2f %s/s", double(p.tensors_done) / stage_elapsed, p.unit);
    text += line;
    const double left = stage_elapsed * (1.0 - frac) / frac;
    if (left >= 90.0)
      std::snprintf(line, sizeof line, "  ETA %.0f min %02.0f s", std::floor(left / 60.0), std::fmod(left, 60.0));
    else
      std::snprintf(line, sizeof line, "  ETA %.0f s", left);
    text += line;
  }
  if (tty_) {
    if (!done && std::chrono::duration<double>(now - last_draw_).count() < 0.1 && open_line_) return;
    std::string name = p.tensor;
    if (name.size() > 48) name = "..." + name.substr(name.size() - 45);
    std::fprintf(stderr, "\r\033[K%s  %s", text.c_str(), name.c_str());
    std::fflush(stderr);
    open_line_ = true;
  } else {
    // A line per 10 % step, at most one per 5 s (and one every 30 s when a step takes long),
    // plus the final one: short runs print a single line.
    const int decile = int(frac * 10.0);
    const double since = std::chrono::duration<double>(now - last_draw_).count();
    if (done) {
      if (last_decile_ == 10) return;
    } else if (!new_stage && !((decile != last_decile_ && since >= 5.0) || since >= 30.0)) {
      return;
    }
    last_decile_ = done ? 10 : decile;
    std::fprintf(stderr, "%s\n", text.c_str());
  }
  last_draw_ = now;
}

void ProgressDisplay::finish() {
  if (open_line_) {
    std::fprintf(stderr, "\n");
    open_line_ = false;
  }
}

}  // namespace endor::cli
