// Per-block int8 quantization of activations (weight_kernels.h, "int8 activations"): one scalar
// implementation shared by every instruction set, so all kernels multiply the same q and d. It
// runs once per Linear call on the calling thread: O(tokens·cols) against the kernels' O(rows·cols·tokens).
#include <algorithm>
#include <cmath>

#include "weight_kernels.h"

namespace endor::cpu::detail {
namespace {

size_t d_stride_of(uint64_t cols) { return quantized_q_stride(cols) / kActBlock; }
size_t round64(size_t n) { return (n + 63) / 64 * 64; }

}  // namespace

size_t quantized_bytes(size_t n_tokens, uint64_t cols) {
  return round64(n_tokens * quantized_q_stride(cols)) + 2 * round64(4 * n_tokens * d_stride_of(cols));
}

QuantizedX quantize_activations(const float* x, size_t x_stride, size_t n_tokens, uint64_t cols, void* storage) {
  QuantizedX qx;
  qx.q_stride = quantized_q_stride(cols);
  qx.d_stride = d_stride_of(cols);
  auto* bytes = static_cast<uint8_t*>(storage);
  auto* q = reinterpret_cast<int8_t*>(bytes);
  auto* d = reinterpret_cast<float*>(bytes + round64(n_tokens * qx.q_stride));
  auto* sums = reinterpret_cast<int32_t*>(bytes + round64(n_tokens * qx.q_stride) + round64(4 * n_tokens * qx.d_stride));
  for (size_t t = 0; t < n_tokens; ++t) {
    const float* xt = x + t * x_stride;
    int8_t* qt = q + t * qx.q_stride;
    for (size_t b = 0; b < qx.d_stride; ++b) {
      const uint64_t c0 = b * kActBlock, c1 = std::min<uint64_t>(cols, c0 + kActBlock);
      float amax = 0.0f;
      for (uint64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(xt[c]));
      // d = amax/127 rounded; 1/d rounded; x·(1/d) rounded: |x·(1/d)| ≤ 127·(1 + 3u) < 127.5, so no
      // code leaves [−127, 127] (clamped anyway: a NaN or inf in x must not become an arbitrary code).
      const float scale = amax / 127.0f;
      const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
      // Round half to even by adding and subtracting 1.5·2^23 (exact for |y| < 2^22, which holds:
      // |y| < 127.5, or inf/NaN, which the clamp below handles as nearbyint's result would be):
      // unlike a nearbyint call, the loop vectorizes. Same codes as nearbyint in the default
      // rounding mode.
      constexpr float kRound = 12582912.0f;
      int32_t sum = 0;
      for (uint64_t c = c0; c < c0 + kActBlock; ++c) {
        const float y = c < c1 ? xt[c] * inv : 0.0f;
        const float r = (y + kRound) - kRound;
        const int32_t v = r >= 127.0f ? 127 : r <= -127.0f ? -127 : r == r ? int32_t(r) : 0;
        qt[c] = int8_t(v);
        sum += v;
      }
      d[t * qx.d_stride + b] = c0 < cols ? scale : 0.0f;
      sums[t * qx.d_stride + b] = sum;
    }
  }
  qx.q = q;
  qx.d = d;
  qx.sums = sums;
  return qx;
}

void dequantize_activations(const QuantizedX& qx, size_t n_tokens, uint64_t cols, float* out, size_t out_stride) {
  for (size_t t = 0; t < n_tokens; ++t) {
    const QuantizedX xt = qx.token(t);
    for (uint64_t c = 0; c < cols; ++c) out[t * out_stride + c] = xt.d[c / kActBlock] * float(xt.q[c]);
  }
}

}  // namespace endor::cpu::detail
