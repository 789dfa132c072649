// Internal to endor_kernels: IEEE half <-> f32 arrays (the f16 KV cache). Round to nearest even,
// NaN stays NaN, overflow becomes ±inf; the same results as endor::f16_to_f32 / f32_to_f16 on
// every instruction set.
#pragma once

#include <cstddef>
#include <cstdint>

namespace endor::cpu::detail {

void widen_half(const uint16_t* src, float* dst, size_t n);
void narrow_to_half(const float* src, uint16_t* dst, size_t n);

}  // namespace endor::cpu::detail
