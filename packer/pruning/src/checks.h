// Argument checks shared by the pruning sources: each throws endor::Error with one line that
// names the function and what is wrong.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

#include "endor/format.h"
#include "endor/pruning.h"

namespace endor::pruning::detail {

[[noreturn]] inline void fail(const char* fn, const std::string& what) {
  throw Error(std::string(fn) + ": " + what);
}

// rows·cols, refusing empty matrices and products that overflow size_t.
inline size_t checked_numel(const char* fn, size_t rows, size_t cols, const char* name) {
  if (rows == 0 || cols == 0)
    fail(fn, std::string(name) + " is empty (" + std::to_string(rows) + " x " + std::to_string(cols) + ")");
  if (rows > std::numeric_limits<size_t>::max() / cols)
    fail(fn, std::string(name) + " size overflows (" + std::to_string(rows) + " x " + std::to_string(cols) + ")");
  return rows * cols;
}

inline void check_finite(const char* fn, const float* x, size_t n, const char* name) {
  if (x == nullptr) fail(fn, std::string(name) + " is null");
  for (size_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) fail(fn, std::string(name) + " has a non-finite value at flat index " + std::to_string(i));
}

inline void check_target(const char* fn, const SparsityTarget& t, size_t n_in) {
  if (t.is_n_of_m()) {
    if (t.n == 0 || t.n >= t.m)
      fail(fn, "N:M needs 1 <= N < M (got " + std::to_string(t.n) + ":" + std::to_string(t.m) + ")");
    if (n_in % t.m != 0)
      fail(fn, "N:M group size " + std::to_string(t.m) + " does not divide the " + std::to_string(n_in) + " input columns");
  } else if (!(t.ratio > 0.0 && t.ratio < 1.0)) {
    fail(fn, "unstructured sparsity ratio must be in (0, 1) (got " + std::to_string(t.ratio) + ")");
  }
}

// Marks in mask[0..m) the n lowest of score[0..m), ties broken by lower index (a stable order).
void mark_lowest_n(const float* score, uint32_t m, uint32_t n, uint8_t* mask);

}  // namespace endor::pruning::detail
