// libFuzzer target: parse_gguf on arbitrary bytes must either succeed with tensors inside the
// data section, or throw endor::Error -- never crash, hang, overflow or allocate hugely. An
// accepted file is then translated (gguf_to_model: config, tensor map, tokenizer.json) and the
// first blocks of each readable tensor dequantized (every type ggml_type_readable names: the float
// types, Q8_0, Q4_0/1, Q5_0/1, IQ4_NL, Q2_K..Q6_K, IQ4_XS; any bytes are valid blocks), which must
// again succeed or throw Error. Seeds: tests/fixtures/gguf/ (quant-blocks.gguf and llama-mix.gguf
// hold a tensor of every readable quantized type).
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
    const uint64_t n = std::min<uint64_t>(t.numel(), 1024) / endor::ggml_block_elements(t.type) *
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
