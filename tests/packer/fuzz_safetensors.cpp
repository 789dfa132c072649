// libFuzzer target: parse_safetensors on arbitrary bytes must either succeed with entries that
// tile the buffer, or throw endor::Error -- never crash, hang, overflow or allocate hugely.
#include <cstdint>
#include <cstdlib>

#include "endor/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const endor::SafetensorsHeader h = endor::parse_safetensors(data, size, "fuzz.safetensors");
    // Invariants of an accepted file: entries tile [0, size - data_offset) in order.
    uint64_t cursor = 0;
    for (const endor::SafetensorsEntry& e : h.tensors) {
      if (e.begin != cursor || e.end < e.begin) std::abort();
      if (e.end - e.begin != e.numel() * endor::dtype_bytes(e.dtype)) std::abort();
      cursor = e.end;
    }
    if (h.data_offset + cursor != size) std::abort();
  } catch (const endor::Error&) {
  }
  return 0;
}
