// Calibrated pruning (Wanda, SparseGPT): the sequential block-by-block driver of ALGORITHMS.md
// "Sequential calibration", over the runtime's block-level API (one model implementation serves
// inference and calibration) and the pure per-Linear algorithms of endor_pruning.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <deque>
#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <sstream>

#include "endor/packer.h"
#include "endor/pruning.h"
#include "endor/runtime.h"
#include "endor/tokenizer.h"

namespace endor {
namespace {

// Removes a file on every way out.
struct RemoveOnExit {
  std::string path;
  ~RemoveOnExit() {
    if (!path.empty()) std::remove(path.c_str());
  }
};

// Hands out the pruned f32 weights computed by the calibration pass.
class PrecomputedPruner final : public Pruner {
 public:
  explicit PrecomputedPruner(std::map<std::string, std::vector<float>>& weights) : weights_(weights) {}
  void prune(const std::string& name, float* w, uint64_t rows, uint64_t cols) override {
    auto it = weights_.find(name);
    if (it == weights_.end()) throw Error("calibration produced no weights for tensor '" + name + "'");
    if (it->second.size() != rows * cols) throw Error("calibrated weights of '" + name + "' have the wrong size");
    std::copy(it->second.begin(), it->second.end(), w);
    it->second = std::vector<float>();  // written once; free it
  }

 private:
  std::map<std::string, std::vector<float>>& weights_;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open the calibration text");
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) throw Error(path + ": cannot read the calibration text");
  return s.str();
}

// Dense f32 replacement weight kept alive while the model uses it.
struct Replacement {
  TensorInfo info;
  EncodedTensor enc;
};

}  // namespace

PackSummary pack_calibrated(const std::string& source_dir, const std::string& output_path,
                            const PackOptions& o, const CalibrationOptions& co, const PackCallbacks& cb) {
  const PruneSpec& spec = o.prune;
  const bool wanda = spec.method == "wanda";
  if (!wanda && spec.method != "sparsegpt")
    throw Error("calibrated pruning needs --method wanda or sparsegpt, got '" + spec.method + "'");
  if (!spec.active()) throw Error("calibrated pruning needs --sparsity S > 0 or --pattern N:M");
  if (spec.structured() && (spec.n == 0 || spec.n >= spec.m))
    throw Error("N:M pattern needs 0 < N < M");
  if (co.n_samples == 0) throw Error("--calib-samples must be at least 1");
  if (wanda && o.quant != Quantization::None)
    throw Error("--method wanda does not quantize jointly; --quant needs --method sparsegpt (or magnitude)");
  const std::string text = read_file(co.text_path);

  // 1. The model, dense f32, through the runtime.
  const std::string dense_path = output_path + ".calib-f32.tmp-" + std::to_string(::getpid());
  RemoveOnExit remove_dense{dense_path};
  PackOptions dense_opts;
  dense_opts.command = "convert";
  dense_opts.dtype = ValueType::F32;
  dense_opts.tool_version = o.tool_version;
  pack_checkpoint(source_dir, dense_path, dense_opts);
  const std::unique_ptr<ContainerReader> reader = ContainerReader::open(dense_path);
  const std::unique_ptr<Backend> backend = make_backend("cpu", co.n_threads);
  const std::unique_ptr<Model> model = load_model(*reader, *backend);
  const ModelConfig& c = model->config();

  // 2. Calibration windows.
  const std::optional<std::string_view> tok_json = reader->file("tokenizer.json");
  if (!tok_json) throw Error(source_dir + ": no tokenizer.json; calibration needs the checkpoint's tokenizer");
  const Tokenizer tokenizer = Tokenizer::from_json(*tok_json, source_dir + "/tokenizer.json");
  const std::vector<int32_t> ids = tokenizer.encode(text, true);
  const uint64_t L = co.seq_len ? co.seq_len : c.max_positions;
  if (L < 1 || L > c.max_positions)
    throw Error("--calib-seqlen " + std::to_string(L) + " must be in [1, " + std::to_string(c.max_positions) +
                "] (max_position_embeddings)");
  if (ids.size() <= L)
    throw Error(co.text_path + ": " + std::to_string(ids.size()) + " tokens; calibration windows of " +
                std::to_string(L) + " need more");
  const uint64_t S = co.n_samples, H = c.hidden;
  std::mt19937_64 rng(co.seed);
  std::uniform_int_distribution<uint64_t> start_dist(0, ids.size() - L - 1);
  std::vector<float> acts(S * L * H);  // [S, L, H] inputs of the current block
  for (uint64_t s = 0; s < S; ++s) {
    const uint64_t start = start_dist(rng);
    model->embed(ids.data() + start, L, acts.data() + s * L * H);
  }

  // 3. Block by block.
  const std::string prefix = c.arch == Architecture::Opt ? "model.decoder.layers." : "model.layers.";
  std::optional<std::regex> skip;
  if (!o.skip_regex.empty()) skip.emplace(o.skip_regex);
  const pruning::SparsityTarget target = spec.structured() ? pruning::SparsityTarget::n_of_m(spec.n, spec.m)
                                                           : pruning::SparsityTarget::unstructured(spec.sparsity);
  std::map<std::string, std::vector<float>> pruned;  // canonical tensor name -> [out, in]
  std::deque<Replacement> replacements;
  std::vector<float> sample(L * H);
  PackProgress progress;
  progress.stage = "calibrate";
  progress.tensors_total = c.n_layers;
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    std::map<std::string, pruning::WandaStats> wstats;
    std::map<std::string, pruning::HessianAccumulator> hstats;
    const Model::LinearInputHook hook = [&](uint32_t, const std::string& name, const float* x, size_t n,
                                            size_t in) {
      if (wanda) wstats.try_emplace(name, in).first->second.add_batch(x, n, in, 1);
      else hstats.try_emplace(name, in).first->second.add_batch(x, n, in, 1);
    };
    for (uint64_t s = 0; s < S; ++s) {  // dense pass: statistics, one sample per call
      std::copy(acts.begin() + s * L * H, acts.begin() + (s + 1) * L * H, sample.begin());
      model->forward_block(l, sample.data(), L, hook);
    }
    for (const std::string& linear : model->block_linear_names()) {
      const std::string name = prefix + std::to_string(l) + "." + linear + ".weight";
      if (skip && std::regex_search(name, *skip)) continue;
      const std::optional<TensorView> view = reader->find_tensor(name);
      if (!view) throw Error(dense_path + ": missing tensor '" + name + "'");
      const uint64_t rows = view->info->shape[0], cols = view->info->shape[1];
      std::vector<float> w(rows * cols);
      decode_rows_f32(*view, 0, rows, w.data());
      if (spec.structured() && cols % spec.m != 0)
        throw Error("tensor '" + name + "': " + std::to_string(cols) + " inputs are not a multiple of M=" +
                    std::to_string(spec.m));
      if (wanda) {
        pruning::wanda_prune(w.data(), rows, cols, wstats.at(linear).scaler_row().data(), target);
      } else {
        pruning::SparseGptOptions so;
        so.target = target;
        if (spec.structured() && so.block_size % spec.m != 0) so.block_size = spec.m * std::max<size_t>(1, 128 / spec.m);
        if (o.quant == Quantization::Int8) so.quant.scheme = pruning::QuantScheme::Int8Row;
        if (o.quant == Quantization::Int4) {
          so.quant.scheme = pruning::QuantScheme::Int4Group;
          so.quant.group_size = o.group_size;
        }
        pruning::sparsegpt_prune(w.data(), rows, cols, hstats.at(linear).hessian().data(), so);
      }
      Replacement& r = replacements.emplace_back();
      r.info.name = name;
      r.info.shape = {rows, cols};
      r.info.encoding = Encoding::Dense;
      r.info.value_type = ValueType::F32;
      r.info.nnz = rows * cols;
      EncodeOptions eo;
      eo.encoding = Encoding::Dense;
      eo.value_type = ValueType::F32;
      r.enc = encode_tensor(w.data(), r.info.shape, eo);
      model->replace_block_weight(l, linear, TensorView{&r.info, r.enc.layout, r.enc.bytes.data()});
      pruned[name] = std::move(w);
    }
    for (uint64_t s = 0; s < S; ++s)  // pruned pass: the next block's inputs, in place
      model->forward_block(l, acts.data() + s * L * H, L, {});
    progress.tensor = prefix + std::to_string(l);
    progress.tensors_done = l + 1;
    if (cb.on_progress) cb.on_progress(progress);
  }
  acts = std::vector<float>();

  // 4. The output, through the normal packer path.
  nlohmann::json calibration = {{"text", co.text_path}, {"samples", S}, {"seq_len", L}, {"seed", co.seed},
                                {"tokens", ids.size()}, {"sampling", "uniform window start, std::mt19937_64"}};
  PrecomputedPruner pruner(pruned);
  return pack_checkpoint_with_pruner(source_dir, output_path, o, &pruner, cb, calibration);
}

}  // namespace endor
