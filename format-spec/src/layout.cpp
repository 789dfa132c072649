// compute_layout: the byte position of every section of a tensor blob (SPEC.md §6.2), with
// overflow-checked arithmetic so hostile shapes/counts cannot wrap around.
#include "detail.h"

namespace endor {

using detail::align_up;
using detail::ceil_div;
using detail::checked_add;
using detail::checked_mul;

TensorLayout compute_layout(const std::vector<uint64_t>& shape, Encoding encoding, ValueType value_type,
                            uint32_t group_size, uint64_t nnz, Int4Params int4_params) {
  TensorLayout L;
  L.encoding = encoding;
  L.value_type = value_type;
  L.group_size = group_size;
  L.nnz = nnz;

  if (shape.empty() || shape.size() > kMaxRank)
    throw Error("shape must have 1 to " + std::to_string(kMaxRank) + " dimensions, got " +
                std::to_string(shape.size()));
  for (uint64_t d : shape)
    if (d == 0) throw Error("shape dimensions must be >= 1");
  // rows = d0, cols = d1·…·dk; a 1-D tensor is one row.
  if (shape.size() == 1) {
    L.rows = 1;
    L.cols = shape[0];
  } else {
    L.rows = shape[0];
    L.cols = 1;
    for (size_t i = 1; i < shape.size(); ++i) L.cols = checked_mul(L.cols, shape[i], "tensor element count");
  }
  const uint64_t numel = checked_mul(L.rows, L.cols, "tensor element count");

  if (value_type == ValueType::I4 || value_type == ValueType::I8G) {
    if (group_size == 0) throw Error(std::string(to_string(value_type)) + " needs group_size >= 1");
    L.groups_per_row = ceil_div(L.cols, group_size);
    if (value_type == ValueType::I8G && int4_params != Int4Params::F16)
      throw Error("coded int4 parameters given for int8g");
    L.int4_params = int4_params;
  } else if (group_size != 0) {
    throw Error(std::string("group_size must be 0 for ") + to_string(value_type));
  } else if (int4_params != Int4Params::F16) {
    throw Error(std::string("coded int4 parameters given for ") + to_string(value_type));
  }

  if (encoding == Encoding::Dense) {
    if (nnz != numel)
      throw Error("dense tensor needs nnz == numel (" + std::to_string(numel) + "), got " + std::to_string(nnz));
  } else {
    if (nnz > numel)
      throw Error("nnz " + std::to_string(nnz) + " exceeds the element count " + std::to_string(numel));
    if (nnz > UINT32_MAX)
      throw Error("bitmap tensor has " + std::to_string(nnz) + " values; the u32 index holds at most 2^32-1");
    L.words_per_row = ceil_div(L.cols, 64);
    L.blocks_per_row = ceil_div(L.cols, kIndexBlockCols);
  }

  // Sections in spec order; each starts at the next multiple of 16 after the previous one.
  uint64_t cursor = 0;
  auto place = [&](uint64_t& offset, uint64_t& bytes, uint64_t n_bytes) {
    offset = align_up(cursor, kSectionAlignment, "tensor layout");
    bytes = n_bytes;
    cursor = checked_add(offset, n_bytes, "tensor layout");
    if (n_bytes > 0) L.total_bytes = cursor;  // no padding after the last non-empty section
  };
  if (encoding == Encoding::Bitmap) {
    place(L.bitmap_offset, L.bitmap_bytes,
          checked_mul(checked_mul(L.rows, L.words_per_row, "bitmap size"), 8, "bitmap size"));
    place(L.index_offset, L.index_bytes,
          checked_mul(checked_mul(L.rows, L.blocks_per_row, "index size"), 4, "index size"));
  }
  const uint64_t values_bytes = value_type == ValueType::I4
                                    ? ceil_div(nnz, 2)
                                    : checked_mul(nnz, value_bits(value_type) / 8, "values size");
  place(L.values_offset, L.values_bytes, values_bytes);
  if (value_type == ValueType::I8) {
    place(L.scales_offset, L.scales_bytes, checked_mul(L.rows, 4, "scales size"));
  } else if (value_type == ValueType::I8G) {  // §6.8: one f16 scale per (row, group), no mins
    place(L.scales_offset, L.scales_bytes,
          checked_mul(checked_mul(L.rows, L.groups_per_row, "int8g scale count"), 2, "scales size"));
  } else if (value_type == ValueType::I4) {
    const uint64_t n_params = checked_mul(L.rows, L.groups_per_row, "int4 parameter count");
    if (int4_params == Int4Params::Coded6) {  // §6.7: (d, dmin) f16 pairs, then 12 code bytes, per super-block
      L.n_super = ceil_div(n_params, kInt4kSuperGroups);
      place(L.scales_offset, L.scales_bytes, checked_mul(L.n_super, 4, "super-block scales size"));
      place(L.mins_offset, L.mins_bytes, checked_mul(L.n_super, kInt4kCodeBytes, "int4k codes size"));
    } else {
      place(L.scales_offset, L.scales_bytes, checked_mul(n_params, 2, "scales size"));
      place(L.mins_offset, L.mins_bytes, checked_mul(n_params, 2, "mins size"));
    }
  }
  return L;
}

}  // namespace endor
