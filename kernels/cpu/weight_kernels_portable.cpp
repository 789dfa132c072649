// Portable (plain C++) weight kernels: always built, always tested, and the fallback on CPUs
// without AVX2. Bitmap rows are walked word by word, visiting set bits only.
#include <algorithm>
#include <vector>

#include "half.h"
#include "weight_kernels.h"

namespace endor::cpu::detail {
namespace {

// Decodes stored value number v of row r (at column c) exactly as SPEC.md §6.3/§6.8 define it.
// One per row: caches the row's int8 scale and the current int4 group's scale/min (int8g: its scale).
template <ValueType VT>
class RowValues {
 public:
  RowValues(const TensorView& w, uint64_t r) : w_(w), r_(r), values_(w.values()) {
    if constexpr (VT == ValueType::I8) std::memcpy(&row_scale_, w.data + w.layout.scales_offset + 4 * r, 4);
  }
  float operator()(uint64_t v, uint64_t c) {
    if constexpr (VT == ValueType::F16) {
      return half_to_f32(load_u16(values_ + 2 * v));
    } else if constexpr (VT == ValueType::BF16) {
      return bfloat_to_f32(load_u16(values_ + 2 * v));
    } else if constexpr (VT == ValueType::F32) {
      float f;
      std::memcpy(&f, values_ + 4 * v, 4);
      return f;
    } else if constexpr (VT == ValueType::I8) {
      return float(int8_t(values_[v])) * row_scale_;
    } else if constexpr (VT == ValueType::I8G) {
      if (c >= group_end_ || c < group_begin_) load_group(c / w_.layout.group_size);
      return float(int8_t(values_[v])) * scale_;  // exact (8-bit x 11-bit significands): no rounding
    } else {
      if (c >= group_end_ || c < group_begin_) load_group(c / w_.layout.group_size);  // one division per group
      const uint8_t byte = values_[v / 2];
      const uint32_t q = (v % 2 == 0) ? (byte & 0x0Fu) : (byte >> 4);  // even value: low nibble
      return float(q) * scale_ + min_;  // q·s is exact, so this is one rounding of q·s + m
    }
  }

 private:
  void load_group(uint64_t g) {
    const uint64_t p = r_ * w_.layout.groups_per_row + g;
    if constexpr (VT == ValueType::I8G) scale_ = half_to_f32(w_.group_scales()[p]);
    else int4_params_f32(w_, p, 1, &scale_, &min_);  // f16 or int4k (SPEC.md §6.7) parameters
    group_begin_ = g * w_.layout.group_size;
    group_end_ = group_begin_ + w_.layout.group_size;
  }
  const TensorView& w_;
  uint64_t r_;
  const uint8_t* values_;
  float row_scale_ = 0.0f;
  uint64_t group_begin_ = 0, group_end_ = 0;  // columns of the cached int4/int8g group
  float scale_ = 0.0f, min_ = 0.0f;
};

// Calls f(c, value) for every stored element of row r in column order.
template <ValueType VT, typename F>
inline void for_each_stored(const TensorView& w, uint64_t r, F&& f) {
  const TensorLayout& L = w.layout;
  RowValues<VT> value(w, r);
  if (L.encoding == Encoding::Dense) {
    const uint64_t v0 = r * L.cols;
    for (uint64_t c = 0; c < L.cols; ++c) f(c, value(v0 + c, c));
    return;
  }
  uint64_t v = bitmap_row_start(w, r);
  const uint8_t* words = w.data + L.bitmap_offset + 8 * r * L.words_per_row;
  for (uint64_t i = 0; i < L.words_per_row; ++i) {
    uint64_t word = load_u64(words + 8 * i);
    if (i + 1 == L.words_per_row) word &= last_word_mask(L.cols);
    while (word) {
      const uint64_t c = 64 * i + uint64_t(__builtin_ctzll(word));
      f(c, value(v++, c));
      word &= word - 1;
    }
  }
}

template <ValueType VT>
void decode_rows_vt(const TensorView& w, uint64_t r0, uint64_t r1, float* out) {
  const uint64_t cols = w.layout.cols;
  for (uint64_t r = r0; r < r1; ++r) {
    float* dst = out + (r - r0) * cols;
    if (w.layout.encoding == Encoding::Bitmap) std::fill(dst, dst + cols, 0.0f);
    for_each_stored<VT>(w, r, [dst](uint64_t c, float value) { dst[c] = value; });
  }
}

template <ValueType VT>
void dot_rows_vt(const TensorView& w, uint64_t r0, uint64_t r1, const float* x, size_t x_stride,
                 size_t n_tokens, float* y, size_t y_stride) {
  for (uint64_t r = r0; r < r1; ++r) {
    // Eight column lanes (c mod 8) per token, as the AVX2 kernels have: the rounding chain of
    // any accumulator is at most ceil(cols/8) additions (the tests' error bound relies on it).
    float acc[kMaxFusedTokens][8] = {};
    for_each_stored<VT>(w, r, [&](uint64_t c, float value) {
      for (size_t t = 0; t < n_tokens; ++t) acc[t][c & 7] += value * x[t * x_stride + c];
    });
    for (size_t t = 0; t < n_tokens; ++t) {
      const float* a = acc[t];
      y[t * y_stride + r] = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
    }
  }
}

void decode_rows(const TensorView& w, uint64_t r0, uint64_t r1, float* out) {
  switch (w.layout.value_type) {
    case ValueType::F16: return decode_rows_vt<ValueType::F16>(w, r0, r1, out);
    case ValueType::BF16: return decode_rows_vt<ValueType::BF16>(w, r0, r1, out);
    case ValueType::F32: return decode_rows_vt<ValueType::F32>(w, r0, r1, out);
    case ValueType::I8: return decode_rows_vt<ValueType::I8>(w, r0, r1, out);
    case ValueType::I4: return decode_rows_vt<ValueType::I4>(w, r0, r1, out);
    case ValueType::I8G: return decode_rows_vt<ValueType::I8G>(w, r0, r1, out);
  }
}

void decode_rows_u16(const TensorView& w, uint64_t r0, uint64_t r1, uint16_t* out) {
  const TensorLayout& L = w.layout;
  const uint8_t* values = w.values();
  for (uint64_t r = r0; r < r1; ++r) {
    uint16_t* dst = out + (r - r0) * L.cols;
    if (L.encoding == Encoding::Dense) {
      std::memcpy(dst, values + 2 * r * L.cols, 2 * L.cols);
      continue;
    }
    std::fill(dst, dst + L.cols, uint16_t(0));
    uint64_t v = bitmap_row_start(w, r);
    const uint8_t* words = w.data + L.bitmap_offset + 8 * r * L.words_per_row;
    for (uint64_t i = 0; i < L.words_per_row; ++i) {
      uint64_t word = load_u64(words + 8 * i);
      if (i + 1 == L.words_per_row) word &= last_word_mask(L.cols);
      while (word) {
        dst[64 * i + uint64_t(__builtin_ctzll(word))] = load_u16(values + 2 * v++);
        word &= word - 1;
      }
    }
  }
}

void dot_rows(const TensorView& w, uint64_t r0, uint64_t r1, const float* x, size_t x_stride,
              size_t n_tokens, float* y, size_t y_stride) {
  switch (w.layout.value_type) {
    case ValueType::F16: return dot_rows_vt<ValueType::F16>(w, r0, r1, x, x_stride, n_tokens, y, y_stride);
    case ValueType::BF16: return dot_rows_vt<ValueType::BF16>(w, r0, r1, x, x_stride, n_tokens, y, y_stride);
    case ValueType::F32: return dot_rows_vt<ValueType::F32>(w, r0, r1, x, x_stride, n_tokens, y, y_stride);
    case ValueType::I8: return dot_rows_vt<ValueType::I8>(w, r0, r1, x, x_stride, n_tokens, y, y_stride);
    case ValueType::I4: return dot_rows_vt<ValueType::I4>(w, r0, r1, x, x_stride, n_tokens, y, y_stride);
    case ValueType::I8G: return dot_rows_vt<ValueType::I8G>(w, r0, r1, x, x_stride, n_tokens, y, y_stride);
  }
}

// Eight partial sums per dot product: lets the compiler vectorise and shortens the rounding
// chain to k/8 + 3 additions.
inline float dot8(const float* a, const float* b, size_t k) {
  float acc[8] = {};
  size_t i = 0;
  for (; i + 8 <= k; i += 8)
    for (size_t j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  for (size_t j = 0; i < k; ++i, ++j) acc[j] += a[i] * b[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

void dense_dot(const float* a, size_t a_stride, size_t n_rows, size_t k, const float* x, size_t x_stride,
               size_t n_tokens, float* y, size_t y_stride) {
  // Token blocks keep a slice of x in cache while the panel rows stream past.
  constexpr size_t kTokenBlock = 16;
  for (size_t t0 = 0; t0 < n_tokens; t0 += kTokenBlock) {
    const size_t t1 = std::min(n_tokens, t0 + kTokenBlock);
    for (size_t n = 0; n < n_rows; ++n)
      for (size_t t = t0; t < t1; ++t) y[t * y_stride + n] = dot8(a + n * a_stride, x + t * x_stride, k);
  }
}

// The stored codes of row r (int8/int8g: the signed code, int4: the unsigned one) at their columns, 0
// where absent, and present[c] = 1 where stored. code and present hold cols entries.
void row_codes(const TensorView& w, uint64_t r, int32_t* code, uint8_t* present) {
  const TensorLayout& L = w.layout;
  const uint8_t* values = w.values();
  auto code_of = [&](uint64_t v) -> int32_t {
    if (L.value_type != ValueType::I4) return int8_t(values[v]);
    const uint8_t byte = values[v / 2];
    return (v % 2 == 0) ? (byte & 0x0F) : (byte >> 4);
  };
  if (L.encoding == Encoding::Dense) {
    for (uint64_t c = 0; c < L.cols; ++c) {
      code[c] = code_of(r * L.cols + c);
      present[c] = 1;
    }
    return;
  }
  std::fill(code, code + L.cols, 0);
  std::fill(present, present + L.cols, uint8_t(0));
  uint64_t v = bitmap_row_start(w, r);
  const uint8_t* words = w.data + L.bitmap_offset + 8 * r * L.words_per_row;
  for (uint64_t i = 0; i < L.words_per_row; ++i) {
    uint64_t word = load_u64(words + 8 * i);
    if (i + 1 == L.words_per_row) word &= last_word_mask(L.cols);
    while (word) {
      const uint64_t c = 64 * i + uint64_t(__builtin_ctzll(word));
      code[c] = code_of(v++);
      present[c] = 1;
      word &= word - 1;
    }
  }
}

}  // namespace

// Straight from the definition in weight_kernels.h, block by block (and, for int4 and int8g, group
// by group inside a block): the reference every x86 int8-activation kernel is tested beside.
void portable_dot_rows_q8(const TensorView& w, uint64_t r0, uint64_t r1, const QuantizedX& qx, size_t n_tokens,
                          float* y, size_t y_stride) {
  const TensorLayout& L = w.layout;
  thread_local std::vector<int32_t> code;
  thread_local std::vector<uint8_t> present;
  code.resize(L.cols);
  present.resize(L.cols);
  const bool grouped = L.value_type != ValueType::I8;  // int4, int8g: a scale per (row, group)
  const bool int8g = L.value_type == ValueType::I8G;
  for (uint64_t r = r0; r < r1; ++r) {
    row_codes(w, r, code.data(), present.data());
    for (size_t t = 0; t < n_tokens; ++t) {
      const QuantizedX xt = qx.token(t);
      float acc = 0.0f;
      for (uint64_t c0 = 0; c0 < L.cols; c0 += kActBlock) {
        const uint64_t c1 = std::min<uint64_t>(L.cols, c0 + kActBlock);
        float block = 0.0f;
        if (!grouped) {
          int32_t s = 0;
          for (uint64_t c = c0; c < c1; ++c) s += code[c] * xt.q[c];
          block = float(s);
        } else {
          for (uint64_t g0 = c0; g0 < c1;) {  // the pieces of the block in each group
            const uint64_t g = g0 / L.group_size, g1 = std::min<uint64_t>(c1, (g + 1) * L.group_size);
            int32_t sq = 0, sp = 0;
            for (uint64_t c = g0; c < g1; ++c) {
              sq += code[c] * xt.q[c];
              sp += present[c] * xt.q[c];
            }
            const uint64_t p = r * L.groups_per_row + g;
            if (int8g) {  // no mins: the presence sum is not needed
              block += half_to_f32(w.group_scales()[p]) * float(sq);
            } else {
              float scale, min;
              int4_params_f32(w, p, 1, &scale, &min);
              block += scale * float(sq) + min * float(sp);
            }
            g0 = g1;
          }
        }
        acc += xt.d[c0 / kActBlock] * block;
      }
      if (!grouped) acc *= w.row_scales()[r];
      y[t * y_stride + r] = acc;
    }
  }
}

void dot_rows_hx_widened(const WeightKernels& k, const TensorView& w, uint64_t r0, uint64_t r1, const uint16_t* x16,
                         size_t x_stride, size_t n_tokens, float* y, size_t y_stride) {
  thread_local std::vector<float> x;
  const uint64_t cols = w.layout.cols;
  x.resize(n_tokens * cols);
  for (size_t t = 0; t < n_tokens; ++t) widen_half(x16 + t * x_stride, x.data() + t * cols, cols);
  k.dot_rows(w, r0, r1, x.data(), cols, n_tokens, y, y_stride);
}

namespace {
void dot_rows_hx(const TensorView& w, uint64_t r0, uint64_t r1, const uint16_t* x16, size_t x_stride, size_t n_tokens,
                 float* y, size_t y_stride) {
  dot_rows_hx_widened(portable_kernels(), w, r0, r1, x16, x_stride, n_tokens, y, y_stride);
}
}  // namespace

const WeightKernels& portable_kernels() {
  static const WeightKernels kernels{"portable", decode_rows, decode_rows_u16, dot_rows, dense_dot, portable_dot_rows_q8,
                                     dot_rows_hx};
  return kernels;
}

}  // namespace endor::cpu::detail
