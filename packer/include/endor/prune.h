// endor_packer: what pruning is asked for (PruneSpec, PruneMethod) and the data-free pruner
// (magnitude, unstructured or N:M). The calibrated methods run in endor/calibrate.h.
// Errors: bad input throws endor::Error (format.h) whose what() is one line naming the file and
// what is wrong; nothing here prints or exits.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "endor/format.h"

namespace endor {

enum class PruneScope : uint8_t { Row, Matrix };

// The pruning method (--method). Gptq prunes nothing: calibrated quantization only. Parsed once
// where the options come in (the CLI); the library compares values, never names.
enum class PruneMethod : uint8_t { Magnitude, Wanda, SparseGpt, Gptq };
// "magnitude", "wanda", "sparsegpt", "gptq": --method's spelling and the provenance's "method".
const char* to_string(PruneMethod);
std::optional<PruneMethod> parse_prune_method(std::string_view);  // nullopt for any other spelling
// Wanda, SparseGPT and GPTQ run the model on calibration data (pack_calibrated).
inline bool calibrated(PruneMethod m) { return m != PruneMethod::Magnitude; }

struct PruneSpec {
  PruneMethod method = PruneMethod::Magnitude;
  double sparsity = 0.0;              // [0, 1); unstructured only
  uint32_t n = 0, m = 0;              // N:M when m > 0 (zero N of every M)
  PruneScope scope = PruneScope::Row;
  // Unstructured, calibrated methods: sparsity rises linearly through the decoder blocks, from
  // sparsity - ramp in the first to sparsity + ramp in the last (mean: sparsity). Small models
  // lose much less accuracy when their early blocks keep more weights (bench/ACCURACY.md).
  double sparsity_ramp = 0.0;
  // Block `layer` of `n_layers`: sparsity + ramp * (2 layer / (n_layers - 1) - 1).
  double block_sparsity(uint32_t layer, uint32_t n_layers) const;
  bool structured() const { return m > 0; }
  // Whether the Linears go through the method (pruned, or for gptq quantized with calibration).
  bool active() const { return structured() || sparsity > 0.0 || method == PruneMethod::Gptq; }
  std::string pattern() const;        // "unstructured" or "2:4"
};

// Zeroes entries of one weight W [rows = out, cols = in], row-major f32, in place. Calibrated
// methods (later) will see the block's inputs through an extended interface; this one is all a
// data-free method needs.
class Pruner {
 public:
  virtual ~Pruner() = default;
  virtual void prune(const std::string& tensor_name, float* w, uint64_t rows, uint64_t cols) = 0;
  // A pruner that has already encoded a tensor (the calibration driver: its bytes are decided,
  // e.g. SparseGPT's own quantization codes) hands the blob over here, once; pack then writes it
  // as it is and does not call prune() for it. Default: nothing precomputed.
  virtual std::optional<EncodedTensor> take_encoded(const std::string& /*tensor_name*/) { return std::nullopt; }
};
// Throws when this library's data-free pruner cannot run the spec: a calibrated method (those run
// in pack_calibrated), a sparsity ramp, sparsity outside [0, 1), an N:M pattern without 0 < N < M.
// A spec that prunes nothing (the default) passes.
void check_prune_spec(const PruneSpec&);
// check_prune_spec, then the magnitude pruner of the spec.
std::unique_ptr<Pruner> make_pruner(const PruneSpec&);

// The magnitude building blocks (NaN counts as the largest magnitude):
// per row, zero the int(cols * sparsity) smallest |w| (stable: ties -> lower column first).
void magnitude_prune_rows(float* w, uint64_t rows, uint64_t cols, double sparsity);
// whole matrix: thresh = sorted(|W|)[int(numel * sparsity)], zero |w| <= thresh (wanda's
// prune_magnitude). sparsity 0 prunes nothing here (the reference would zero the minimum).
void magnitude_prune_matrix(float* w, uint64_t rows, uint64_t cols, double sparsity);
// in each group of m consecutive columns of a row, zero the n smallest |w| (stable); cols must
// be a multiple of m.
void magnitude_prune_n_m(float* w, uint64_t rows, uint64_t cols, uint32_t n, uint32_t m);

}  // namespace endor
