// The stored quantizers (int8 per row, int4 per group): the exact arithmetic the container's
// encodings use, so codes chosen inside SparseGPT are the codes stored. Built with
// -ffp-contract=off: x' = q·scale + min must not be fused into one rounding.
#include <algorithm>
#include <cmath>

#include "checks.h"
#include "endor/format.h"
#include "endor/pruning.h"

namespace endor::pruning {

float int8_row_scale(const float* row, size_t n) {
  float max_abs = 0.0f;
  for (size_t i = 0; i < n; ++i) max_abs = std::max(max_abs, std::fabs(row[i]));
  return std::max(max_abs, 1e-5f) / 127.0f;
}

int8_t int8_code(float w, float scale) {
  const float q = std::round(w / scale);
  return int8_t(std::clamp(q, -127.0f, 127.0f));
}

float int8_value(int8_t code, float scale) { return float(code) * scale; }

int8_t int8g_code(float w, float scale) { return scale == 0.0f ? int8_t(0) : int8_code(w, scale); }

Int4GroupParams int4_group_params(const float* x, size_t n) {
  if (n == 0) detail::fail("int4_group_params", "empty group");
  float mn = x[0], mx = x[0];
  for (size_t i = 1; i < n; ++i) {
    mn = std::min(mn, x[i]);
    mx = std::max(mx, x[i]);
  }
  // The container encoder's grid (one code exactly 0), so SparseGPT's codes meet the same grid.
  Int4Grid grid;
  try {
    grid = int4_grid(mn, mx);
  } catch (const Error& e) {
    detail::fail("int4_group_params", e.what());
  }
  Int4GroupParams p;
  p.scale_f16 = grid.scale_f16;
  p.min_f16 = grid.min_f16;
  p.scale = f16_to_f32(p.scale_f16);
  p.min = f16_to_f32(p.min_f16);
  return p;
}

uint8_t int4_code(float x, const Int4GroupParams& p) {
  const float q = std::round((x - p.min) / p.scale);
  return uint8_t(std::clamp(q, 0.0f, 15.0f));
}

float int4_value(uint8_t code, const Int4GroupParams& p) { return float(code) * p.scale + p.min; }

}  // namespace endor::pruning
