// endor_packer: `endor-pack compare`: Endor's sizes and decode speeds against zstd per tensor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "endor/pack.h"

namespace endor {

struct CompareOptions {
  std::vector<int> zstd_levels{1, 3, 19};
  int n_threads = 0;                   // Endor multithreaded decode (0 = OpenMP default)
  double min_time_s = 0.02;            // each speed is the best of repeats lasting at least this
};

struct CompareRow {
  std::string name;
  bool linear = false;                 // a prunable decoder Linear (classify_tensor)
  std::string encoding, value_type;
  uint64_t numel = 0;
  uint64_t dense_bytes = 0;            // the (pruned) tensor dense in its stored value type
  uint64_t endor_bytes = 0;
  std::vector<uint64_t> zstd_bytes;         // zstd(dense) per level
  std::vector<uint64_t> endor_zstd_bytes;   // zstd(Endor blob) per level
  double endor_mt_s = 0, endor_1t_s = 0;    // decode time to dense
  std::vector<double> zstd_s;               // ZSTD_decompress time per level
};

struct CompareReport {
  std::string input, description;      // what was compared (model, method, sparsity, dtype)
  std::vector<int> levels;
  int threads = 1;
  std::vector<CompareRow> rows;
  CompareRow total;                    // sums over all tensors (times summed too)
  CompareRow linears;                  // sums over the decoder Linears (what pruning touches)
};

// SRC = a checkpoint folder (packed in memory with `options`, nothing written) or a .endor file.
CompareReport compare_sizes(const std::string& input, const PackOptions&, const CompareOptions&,
                            const PackCallbacks& = {});
std::string render_compare_table(const CompareReport&);
std::string render_compare_csv(const CompareReport&);
nlohmann::json compare_to_json(const CompareReport&);
std::string render_compare_svg(const CompareReport&);

}  // namespace endor
