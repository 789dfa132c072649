// Reference decoder (the definition of every element's decoded value, SPEC.md §6.4-§6.6) and the
// bitmap/index consistency check. Single-threaded and plain; kernels/ has the fast versions.
#include <algorithm>
#include <cstring>

#include "detail.h"

namespace endor {

namespace {

int popcount64(uint64_t w) { return __builtin_popcountll(w); }

// Bits of the last word of a row that lie beyond `cols` (they MUST be 0).
uint64_t row_padding_mask(uint64_t cols) {
  const uint64_t used = cols % 64;
  return used == 0 ? 0 : ~((uint64_t(1) << used) - 1);
}

// Decoded value of stored value number v, which belongs to element (r, c).
float stored_value(const TensorView& t, uint64_t v, uint64_t r, uint64_t c) {
  const TensorLayout& L = t.layout;
  const uint8_t* values = t.values();
  switch (L.value_type) {
    case ValueType::F16: return f16_to_f32(detail::load_u16(values + 2 * v));
    case ValueType::BF16: return bf16_to_f32(detail::load_u16(values + 2 * v));
    case ValueType::F32: {
      float f;
      std::memcpy(&f, values + 4 * v, 4);
      return f;
    }
    case ValueType::I8: {
      float s;
      std::memcpy(&s, t.data + L.scales_offset + 4 * r, 4);
      return float(int8_t(values[v])) * s;
    }
    case ValueType::I8G: {
      // §6.8: q·S is exact in binary32 (8-bit × 11-bit significands): one value, no rounding.
      const float s = f16_to_f32(detail::load_u16(t.data + L.scales_offset + 2 * (r * L.groups_per_row + c / L.group_size)));
      return float(int8_t(values[v])) * s;
    }
    case ValueType::I4: {
      const uint8_t byte = values[v / 2];
      const uint32_t q = (v % 2 == 0) ? (byte & 0x0F) : (byte >> 4);  // even value: low nibble
      const uint64_t p = r * L.groups_per_row + c / L.group_size;
      float s, m;  // §6.7: int4k's S = d·sc and M = −(dmin·mc) are exact in binary32 too
      int4_params_f32(t, p, 1, &s, &m);
      // q·s is exact in binary32 (4-bit × 11-bit, or × 17-bit for int4k, significands), so with or without a fused
      // multiply-add the result is the single rounding of q·s + m.
      return float(q) * s + m;
    }
  }
  return 0.0f;
}

}  // namespace

bool is_two_of_four(const TensorView& t) {
  const TensorLayout& L = t.layout;
  if (L.encoding != Encoding::Bitmap || L.cols % 4 != 0 || L.nnz != L.rows * (L.cols / 2)) return false;
  const uint64_t pad_mask = row_padding_mask(L.cols);
  for (uint64_t r = 0; r < L.rows; ++r) {
    const uint8_t* row_words = t.data + L.bitmap_offset + 8 * r * L.words_per_row;
    for (uint64_t w = 0; w < L.words_per_row; ++w) {
      const uint64_t word = detail::load_u64(row_words + 8 * w);
      // Per 4-bit group: the popcount of each bit pair, then of each nibble; every nibble 2, and
      // the last word's groups past `cols` 0 (their bits are padding, zero in a valid tensor).
      const uint64_t pairs = (word & 0x5555555555555555ull) + ((word >> 1) & 0x5555555555555555ull);
      const uint64_t nibbles = (pairs & 0x3333333333333333ull) + ((pairs >> 2) & 0x3333333333333333ull);
      const uint64_t want = w + 1 == L.words_per_row ? 0x2222222222222222ull & ~pad_mask : 0x2222222222222222ull;
      if (nibbles != want) return false;
    }
  }
  return true;
}

// Cloned for x86 CPUs with popcnt (every one this century; an ifunc picks at load): without it
// GCC calls libgcc's table-driven __popcountdi2 per word, 0.8 % of a 100-token 1 B decode run.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("popcnt", "default")))
#endif
void validate_bitmap(const TensorView& t, const std::string& what) {
  const TensorLayout& L = t.layout;
  if (L.encoding != Encoding::Bitmap) return;
  const uint64_t pad_mask = row_padding_mask(L.cols);
  const uint64_t words_per_block = kIndexBlockCols / 64;
  uint64_t count = 0;  // values before the current position, row-major
  for (uint64_t r = 0; r < L.rows; ++r) {
    const uint8_t* row_words = t.data + L.bitmap_offset + 8 * r * L.words_per_row;
    for (uint64_t k = 0; k < L.blocks_per_row; ++k) {
      const uint32_t entry = detail::load_u32(t.data + L.index_offset + 4 * (r * L.blocks_per_row + k));
      if (entry != count)
        detail::fail(what, "bitmap index entry (row " + std::to_string(r) + ", block " + std::to_string(k) + ") is " +
                               std::to_string(entry) + " but the bitmap has " + std::to_string(count) +
                               " values before it");
      const uint64_t w_end = std::min(L.words_per_row, (k + 1) * words_per_block);
      for (uint64_t w = k * words_per_block; w < w_end; ++w) {
        uint64_t word = detail::load_u64(row_words + 8 * w);
        if (w + 1 == L.words_per_row && (word & pad_mask) != 0)
          detail::fail(what, "bitmap row " + std::to_string(r) + " has bits set beyond column " +
                                 std::to_string(L.cols - 1));
        count += popcount64(word);
      }
    }
  }
  if (count != L.nnz)
    detail::fail(what, "bitmap has " + std::to_string(count) + " set bits but nnz is " + std::to_string(L.nnz));
}

void decode_rows_f32(const TensorView& t, uint64_t row_begin, uint64_t row_end, float* out) {
  const TensorLayout& L = t.layout;
  if (row_begin > row_end || row_end > L.rows)
    throw Error("decode_rows_f32: rows [" + std::to_string(row_begin) + ", " + std::to_string(row_end) +
                ") outside a tensor of " + std::to_string(L.rows) + " rows");
  for (uint64_t r = row_begin; r < row_end; ++r) {
    float* dst = out + (r - row_begin) * L.cols;
    if (L.encoding == Encoding::Dense) {
      for (uint64_t c = 0; c < L.cols; ++c) dst[c] = stored_value(t, r * L.cols + c, r, c);
      continue;
    }
    // Bitmap: the index gives the number of the row's first stored value, so rows decode alone.
    uint64_t v = detail::load_u32(t.data + L.index_offset + 4 * (r * L.blocks_per_row));
    const uint8_t* row_words = t.data + L.bitmap_offset + 8 * r * L.words_per_row;
    for (uint64_t c = 0; c < L.cols; ++c) {
      const uint64_t word = detail::load_u64(row_words + 8 * (c / 64));
      if ((word >> (c % 64)) & 1) {
        // Guard for unvalidated input: never read past the values section.
        if (v >= L.nnz) throw Error("decode_rows_f32: bitmap has more set bits than nnz (run validate_bitmap)");
        dst[c] = stored_value(t, v++, r, c);
      } else {
        dst[c] = 0.0f;  // absent elements decode to exactly +0.0
      }
    }
  }
}

}  // namespace endor
