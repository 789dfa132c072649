// Static int4 group parameters for a whole matrix (GPTQ's static groups): the zero-code grid of
// SPEC.md §7.2 and int4k's coded float-minimum grid of §6.7/§7.4, each optionally with a range
// search that minimises the group's column-weighted squared rounding error.
#include <algorithm>
#include <cmath>
#include <limits>

#include "checks.h"
#include "endor/format.h"
#include "endor/pruning.h"

namespace endor::pruning {

namespace {

constexpr const char* kFn = "choose_int4_params";

// Σ wt·(w − dq(w))² of one group on a parameter pair (x and wt hold the group's kept entries).
double group_error(const float* x, const float* wt, size_t n, float scale, float min) {
  double e = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const float q = float(int4_code_on(x[i], scale, min)) * scale + min;
    const double d = double(x[i]) - double(q);
    e += (wt ? wt[i] : 1.0) * d * d;
  }
  return e;
}

// The zero-code grid over the group's range, or over the range scaled by the factor that rounds
// the group best (1, 0.95, ..., 0.70 when searching).
void zero_code_params(const float* x, const float* wt, size_t n, bool search, uint16_t* s16, uint16_t* m16) {
  float mn = x[0], mx = x[0];
  for (size_t i = 1; i < n; ++i) {
    mn = std::min(mn, x[i]);
    mx = std::max(mx, x[i]);
  }
  Int4Grid best = int4_grid(mn, mx);
  if (search) {
    double best_e = group_error(x, wt, n, f16_to_f32(best.scale_f16), f16_to_f32(best.min_f16));
    for (int k = 1; k <= 6; ++k) {
      const float a = 1.0f - 0.05f * float(k);
      const Int4Grid g = int4_grid(a * mn, a * mx);
      const double e = group_error(x, wt, n, f16_to_f32(g.scale_f16), f16_to_f32(g.min_f16));
      if (e < best_e) {
        best_e = e;
        best = g;
      }
    }
  }
  *s16 = best.scale_f16;
  *m16 = best.min_f16;
}

// The float-minimum grid a group wants (before int4k codes its parameters): scale S >= 0 and
// min M <= 0 spanning [min(mn, 0), mx]; when searching, candidate steps around that span each
// followed by the least-squares (S, M) for the codes they give (M kept <= 0), the best kept.
void float_min_params(const float* x, const float* wt, size_t n, bool search, float* S, float* M) {
  float mn = x[0], mx = x[0];
  for (size_t i = 1; i < n; ++i) {
    mn = std::min(mn, x[i]);
    mx = std::max(mx, x[i]);
  }
  const float lo = std::min(mn, 0.0f);
  *S = (mx - lo) / 15.0f;
  *M = lo;
  if (!search || mx == lo) return;
  double best_e = group_error(x, wt, n, *S, *M);
  for (int k = 0; k <= 20; ++k) {
    const float iscale = (15.0f - 1.0f + 0.1f * float(k)) / (mx - lo);
    double sw = 0, sl = 0, sl2 = 0, sx = 0, sxl = 0;
    for (size_t i = 0; i < n; ++i) {
      const double w = wt ? wt[i] : 1.0;
      const double l = double(std::clamp(std::lround(iscale * (x[i] - lo)), 0L, 15L));
      sw += w;
      sl += w * l;
      sl2 += w * l * l;
      sx += w * x[i];
      sxl += w * l * x[i];
    }
    const double det = sw * sl2 - sl * sl;
    if (!(det > 0.0)) continue;
    double s = (sw * sxl - sx * sl) / det, m = (sl2 * sx - sl * sxl) / det;
    if (m > 0.0) {
      m = 0.0;
      s = sxl / sl2;
    }
    if (!(s > 0.0)) continue;
    const double e = group_error(x, wt, n, float(s), float(m));
    if (e < best_e) {
      best_e = e;
      *S = float(s);
      *M = float(m);
    }
  }
}

}  // namespace

uint8_t int4_code_on(float x, float scale, float min) {
  if (scale == 0.0f) return 0;
  const float q = std::round((x - min) / scale);
  return uint8_t(std::clamp(q, 0.0f, 15.0f));
}

StaticInt4Params choose_int4_params(const float* w, size_t n_out, size_t n_in, const QuantSpec& spec,
                                    const float* col_weight, const uint8_t* pruned) {
  if (!spec.dtype || !is_int4(*spec.dtype))
    detail::fail(kFn, "needs an int4 scheme");
  if (spec.group_size == 0) detail::fail(kFn, "int4 group_size must be positive");
  const size_t numel = detail::checked_numel(kFn, n_out, n_in, "weight");
  for (size_t i = 0; i < numel; ++i)
    if (!std::isfinite(w[i]) || std::fabs(w[i]) > 65504.0f)
      detail::fail(kFn, "weight " + std::to_string(w[i]) + " at flat index " + std::to_string(i) +
                            " is not finite or past the f16 range");
  StaticInt4Params p;
  p.dtype = *spec.dtype;
  p.group_size = spec.group_size;
  const size_t G = spec.group_size, gpr = (n_in + G - 1) / G, n_params = n_out * gpr;
  p.groups_per_row = gpr;
  p.scales.resize(n_params);
  p.mins.resize(n_params);
  const bool coded = spec.dtype == Dtype::Int4k;
  if (!coded) {
    p.scales_f16.resize(n_params);
    p.mins_f16.resize(n_params);
  }
#pragma omp parallel for schedule(static)
  for (long long rr = 0; rr < (long long)n_out; ++rr) {
    const size_t r = size_t(rr);
    std::vector<float> kept_x, kept_wt;  // a group's kept entries, when some are pruned
    for (size_t g = 0; g < gpr; ++g) {
      const size_t c0 = g * G, i = r * gpr + g;
      size_t n = std::min(G, n_in - c0);
      const float* x = w + r * n_in + c0;
      const float* wt = col_weight ? col_weight + c0 : nullptr;
      if (pruned) {
        kept_x.clear();
        kept_wt.clear();
        for (size_t c = 0; c < n; ++c)
          if (!pruned[r * n_in + c0 + c]) {
            kept_x.push_back(x[c]);
            kept_wt.push_back(wt ? wt[c] : 1.0f);
          }
        n = kept_x.size();
        x = kept_x.data();
        wt = kept_wt.data();
      }
      if (n == 0) {  // nothing kept: the group decodes nothing
        p.scales[i] = p.mins[i] = 0.0f;
        if (!coded) p.scales_f16[i] = p.mins_f16[i] = 0;
        continue;
      }
      if (coded) {
        float_min_params(x, wt, n, spec.mse_clip, &p.scales[i], &p.mins[i]);
      } else {
        zero_code_params(x, wt, n, spec.mse_clip, &p.scales_f16[i], &p.mins_f16[i]);
        p.scales[i] = f16_to_f32(p.scales_f16[i]);
        p.mins[i] = f16_to_f32(p.mins_f16[i]);
      }
    }
  }
  if (coded) {  // the super-blocks: 8 consecutive parameters each, coded, then decoded back
    const size_t n_super = (n_params + kInt4kSuperGroups - 1) / kInt4kSuperGroups;
    p.super_scales_f16.resize(2 * n_super);
    p.param_codes.resize(2 * n_params);
    for (size_t b = 0; b < n_super; ++b) {
      const size_t p0 = b * kInt4kSuperGroups;
      const uint32_t n = uint32_t(std::min<size_t>(kInt4kSuperGroups, n_params - p0));
      Int4kSuper sb;
      try {
        sb = int4k_super(&p.scales[p0], &p.mins[p0], n);
      } catch (const Error& e) {
        detail::fail(kFn, e.what());
      }
      p.super_scales_f16[2 * b] = sb.d_f16;
      p.super_scales_f16[2 * b + 1] = sb.dmin_f16;
      const float d = f16_to_f32(sb.d_f16), dmin = f16_to_f32(sb.dmin_f16);
      for (uint32_t j = 0; j < n; ++j) {
        p.param_codes[2 * (p0 + j)] = sb.sc[j];
        p.param_codes[2 * (p0 + j) + 1] = sb.mc[j];
        p.scales[p0 + j] = d * float(sb.sc[j]);        // as SPEC.md §6.7 decodes them
        p.mins[p0 + j] = -(dmin * float(sb.mc[j]));
      }
    }
  }
  return p;
}

}  // namespace endor::pruning
