// The one vocabulary of stored value forms: Dtype, the manifest's "dtype" (SPEC.md §4, §6), and what
// each layer asks of it. Every layer above the tensor layout names a value form by a Dtype: the
// packer's --quant/--quant-head and per-tensor plan, the pruning library's quantizers, inspect and
// compare; int4k and int8g are each a Dtype of their own, as they are in the manifest.
//
// Below the Dtype sits the tensor layout's own decomposition (TensorLayout, TensorInfo, the
// kernels): a ValueType (the stored code and its parameter sections) plus, for int4 only, an
// Int4Params (how the per-group scale and min are coded). value_type_of/int4_params_of/dtype_of are
// the one mapping between the two; nothing else translates by hand. (int4k is I4 + Coded6 there
// because its codes and sections are int4's with the parameters coded; folding it into ValueType
// would change every kernel's dispatch for no change in the bytes.)
//
// Light on purpose (no JSON, no containers): the pruning library and the CLIs include it alone.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace endor {

// I8G (dtype "int8g", format 1.2, SPEC.md §6.8): int8 codes with one f16 scale per (row, group of
// group_size columns), decoded q·S; at groups of 32 this is llama.cpp's Q8_0 grid (8.5 bits a weight).
enum class ValueType : uint8_t { F16, BF16, F32, I8, I4, I8G };
// How an int4 tensor stores its per-(row, group) scale S and min M (SPEC.md §6.7):
//   F16    dtype "int4":  S and M as f16, one pair per (row, group);
//   Coded6 dtype "int4k": 6-bit codes under f16 super-block scales, 8 consecutive (row, group)
//          parameters (row-major) to a super-block: S = d·sc, M = −dmin·mc, 12 bits a group
//          instead of 32 (at groups of 32: 4.5 bits a weight instead of 5).
enum class Int4Params : uint8_t { F16, Coded6 };

// The manifest's dtypes, one value each (spelled by to_string: "f16", "bf16", "f32", "int8",
// "int8g", "int4", "int4k"):
//   Int8  int8 codes, one f32 scale per row (SPEC.md §6.5)
//   Int8g int8 codes, one f16 scale per (row, group) (§6.8)
//   Int4  int4 codes, f16 scale and min per (row, group) (§6.6)
//   Int4k int4 codes, six-bit coded scale and min under f16 super-block scales (§6.7)
enum class Dtype : uint8_t { F16, BF16, F32, Int8, Int8g, Int4, Int4k };
inline constexpr Dtype kAllDtypes[] = {Dtype::F16,   Dtype::BF16, Dtype::F32,  Dtype::Int8,
                                       Dtype::Int8g, Dtype::Int4, Dtype::Int4k};

// The layout's ValueType of a dtype (Int4k: I4).
constexpr ValueType value_type_of(Dtype d) {
  switch (d) {
    case Dtype::F16: return ValueType::F16;
    case Dtype::BF16: return ValueType::BF16;
    case Dtype::F32: return ValueType::F32;
    case Dtype::Int8: return ValueType::I8;
    case Dtype::Int8g: return ValueType::I8G;
    case Dtype::Int4:
    case Dtype::Int4k: return ValueType::I4;
  }
  return ValueType::F32;
}
// The layout's int4 parameter coding: Coded6 for Int4k, F16 for every other dtype (the layout
// requires F16 wherever the value type is not I4).
constexpr Int4Params int4_params_of(Dtype d) { return d == Dtype::Int4k ? Int4Params::Coded6 : Int4Params::F16; }
// The dtype of a layout's (value type, int4 parameters); `params` is read for I4 only.
constexpr Dtype dtype_of(ValueType v, Int4Params params = Int4Params::F16) {
  switch (v) {
    case ValueType::F16: return Dtype::F16;
    case ValueType::BF16: return Dtype::BF16;
    case ValueType::F32: return Dtype::F32;
    case ValueType::I8: return Dtype::Int8;
    case ValueType::I8G: return Dtype::Int8g;
    case ValueType::I4: return params == Int4Params::Coded6 ? Dtype::Int4k : Dtype::Int4;
  }
  return Dtype::F32;
}

// f16, bf16, f32: values stored as they are (no codes, no parameters).
constexpr bool is_float(Dtype d) { return d == Dtype::F16 || d == Dtype::BF16 || d == Dtype::F32; }
// int8, int8g, int4, int4k: codes plus scales (what --quant and the pruning quantizers choose).
constexpr bool is_quantized(Dtype d) { return !is_float(d); }
// int8g, int4, int4k: parameters per (row, group of group_size columns); the layout's group_size
// is non-zero exactly for these.
constexpr bool is_grouped(Dtype d) { return d == Dtype::Int8g || d == Dtype::Int4 || d == Dtype::Int4k; }
// int4, int4k: four-bit codes with a scale and a min per group.
constexpr bool is_int4(Dtype d) { return d == Dtype::Int4 || d == Dtype::Int4k; }
// Bits of one stored value (the codes; parameters aside): 16, 16, 32, 8, 8, 4, 4.
constexpr uint32_t value_bits(Dtype d) {
  return d == Dtype::F32 ? 32 : d == Dtype::F16 || d == Dtype::BF16 ? 16 : is_int4(d) ? 4 : 8;
}

// The manifest spelling, and back (nullopt for anything else, e.g. "F16" or "fp8").
const char* to_string(Dtype);
std::optional<Dtype> parse_dtype(std::string_view);

// A quantization choice, as the packer (--quant, --quant-head, PackOptions) and the pruning
// library (QuantSpec) take it: nullopt = none (the values stay float), otherwise a quantized Dtype
// (is_quantized: int8, int8g, int4 or int4k). Not a vocabulary of its own: the subset of Dtype that
// holds codes, plus "none".
using Quantization = std::optional<Dtype>;
// "none", or the dtype's spelling (what --quant takes and the provenance records).
inline const char* to_string(const Quantization& q) { return q ? to_string(*q) : "none"; }

}  // namespace endor
