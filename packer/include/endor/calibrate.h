// endor_calibrate: calibrated pruning and quantization (Wanda, SparseGPT, GPTQ): the model run block
// by block on calibration text (given or self-generated), then packed through endor/pack.h.
// Errors: bad input throws endor::Error (format.h) whose what() is one line naming the file and
// what is wrong; nothing here prints or exits.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "endor/model_registry.h"
#include "endor/pack.h"

namespace endor {

// docs/algorithms.md, "Sequential calibration". Sampling: the calibration text is tokenized once with
// the checkpoint's tokenizer.json (add_special_tokens: one BOS at the start when the tokenizer
// adds one); with std::mt19937_64(seed), each of n_samples windows starts at
// std::uniform_int_distribution<uint64_t>(0, n_tokens - seq_len - 1)(rng) (the reference's
// random.randint(0, len - seqlen - 1) over one C4 document; here the whole text is one document).
// The defaults of `endor-pack prune` without --calib (bench/ACCURACY.md, "The default prune").
inline constexpr uint64_t kSelfCalibSamples = 128;
inline constexpr uint64_t kSelfCalibSeqLen = 128;
// An MoE expert routed fewer calibration tokens than this is pruned by magnitude, not by the
// calibrated method (statistics of so few tokens describe them, not the expert's inputs: docs/moe.md).
inline constexpr uint64_t kMinExpertTokens = 128;
// Self-generation's batch: 128 sequences a step multiply 128 tokens, which takes every Linear to
// the GEMM path (the exact backend's row-decode serves 9 to 63 tokens, and its fused kernels
// re-read each weight per 8 tokens); on SmolLM2 that wrote the text in 2/3 of the CPU time of
// batches of 64 and ~1/2 of batches of 8 (Intel Xeon, 2 threads). Bounded by the batch's f16 KV
// caches (SmolLM2 and the 1 B shape: 128 sequences of 128 tokens in ~370 MB; a 7 B Llama-2 fits 16).
inline constexpr uint32_t kSelfCalibMaxBatch = 128;
inline constexpr uint64_t kSelfCalibKvBudget = uint64_t(1) << 30;

// Self-generated calibration (text_path empty: no --calib/--calib-ids): the model writes its own
// calibration text first. n_samples sequences, each started at the BOS token (else the first EOS
// token, else id 0) and continued for seq_len - 1 tokens sampled at self_temperature / _top_k / _top_p
// with seed + the sequence's index (EOS does not stop a sequence), self_batch sequences at a time
// (throughput mode: one pass over the blocks per step for all of them). Each sequence is one
// calibration window. Needs no tokenizer.
struct CalibrationOptions {
  std::string text_path;               // --calib (or --calib-ids: then a file of token ids); empty: self-generated
  bool ids = false;                    // text_path holds whitespace-separated token ids, not text
  uint64_t n_samples = 128;            // --calib-samples
  uint64_t seq_len = 0;                // --calib-seqlen; 0 = the model's max_position_embeddings
                                       // (self-generated: min(kSelfCalibSeqLen, max_position_embeddings))
  uint64_t seed = 0;                   // --seed
  int n_threads = 0;                   // CPU threads: backend, OpenMP and BLAS (0 = all cores)
  // transformers' default sampling (generate() with do_sample: temperature 1, top-k 50). Top-k also
  // spares the sampler a sort of the whole vocabulary per token (SmolLM2: 49152 ids).
  float self_temperature = 1.0f;
  uint32_t self_top_k = 50;
  float self_top_p = 1.0f;
  // Sequences generated together; 0 = as many as kSelfCalibMaxBatch and the f16 KV caches'
  // kSelfCalibKvBudget allow (KV caches: self_batch x seq_len tokens).
  uint32_t self_batch = 0;
  uint64_t min_expert_tokens = kMinExpertTokens;  // see kMinExpertTokens
  bool self_generated() const { return text_path.empty(); }
  // Called with each calibrated Linear's f32 weights [rows, cols] as the algorithm leaves them
  // (SparseGPT with --quant: the dequantized codes it chose), before they are encoded. Optional.
  std::function<void(const std::string& tensor, const float* w, uint64_t rows, uint64_t cols)> on_pruned;
};

// Runs the model block by block on the calibration windows (CPU backend) and prunes each block's
// Linears with o.prune.method (wanda | sparsegpt), feeding the pruned block's outputs to the next
// block, then writes `output_path` through the normal packer path. Quantization (o.quant):
// SparseGPT quantizes jointly and the container stores exactly its codes and parameters
// (encode_quantized); Wanda, like magnitude, is quantized by the encoder after pruning. The
// pruned re-run of a block uses its weights as they will be stored.
// Temporary files, next to the output, all "<output>.calib-*.tmp-<pid>": the model converted to a
// dense container (source dtypes; unlinked once mapped), the activations [n_samples, seq_len,
// hidden] f32 and the encoded calibrated Linears (both unlinked at creation). Only the first
// exists by name, and only while it is being written; every one is reported to on_temp_file.
// Disk: the dense model + n_samples·seq_len·hidden·4 bytes + the calibrated Linears encoded.
// Memory (peak RSS) does not grow with n_samples: one window's activations and scratch, and one
// block's weights, statistics and pruning work (calibrate.cpp; measured in packer/README.md).
PackSummary pack_calibrated(const std::string& source_dir, const std::string& output_path,
                            const PackOptions&, const CalibrationOptions&, const PackCallbacks& = {});

// The default self_batch: n sequences of L tokens, at most kSelfCalibMaxBatch at a time and as many
// as kSelfCalibKvBudget of f16 keys and values holds (at least 1).
uint32_t self_calibration_batch(const ModelConfig& config, uint64_t n, uint64_t L);

class Model;
// Self-generated calibration text (CalibrationOptions): n sequences of L tokens the model writes,
// concatenated [n * L] in sequence order, each starting at the start token. Throws when L is
// outside [1, the context length].
std::vector<int32_t> self_calibration_ids(Model& model, uint64_t n, uint64_t L, const CalibrationOptions& co,
                                          const PackCallbacks& cb = {});

}  // namespace endor
