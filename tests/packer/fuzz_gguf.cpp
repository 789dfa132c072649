// libFuzzer target: parse_gguf on arbitrary bytes must either succeed with tensors inside the
// data section, or throw endor::Error -- never crash, hang, overflow or allocate hugely. An
// accepted file is then translated (gguf_to_model: config, tensor map, tokenizer.json) and the
// first block of each readable tensor dequantized, which must again succeed or throw Error.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "endor/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  endor::GgufHeader h;
  try {
    h = endor::parse_gguf(data, size, "fuzz.gguf");
  } catch (const endor::Error&) {
    return 0;
  }
  for (const endor::GgufTensorInfo& t : h.tensors) {
    if (t.offset + t.n_bytes > size - h.data_offset || t.n_bytes == 0) std::abort();
    if (!endor::ggml_type_readable(t.type)) continue;
    const uint64_t n = std::min<uint64_t>(t.numel(), 256) / endor::ggml_block_elements(t.type) *
                       endor::ggml_block_elements(t.type);
    std::vector<float> out(n);
    endor::ggml_dequantize(t.type, data + h.data_offset + t.offset, n, out.data());
  }
  try {
    (void)endor::gguf_to_model(h, "fuzz.gguf");
  } catch (const endor::Error&) {
  }
  return 0;
}
