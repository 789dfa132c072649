// Calibrated pruning (Wanda, SparseGPT, GPTQ): the sequential block-by-block driver of
// docs/algorithms.md, "Sequential calibration", over the runtime's block-level API (one model implementation serves
// inference and calibration) and the pure per-Linear algorithms of endor_pruning.
//
// What stays in memory (hidden H, intermediate I, calibration S windows × L tokens): one window's
// activations and the runtime's per-window scratch (O(L·(H + I))), one block's statistics
// (Wanda: n_in floats per distinct Linear input; SparseGPT: n_in² floats per input; Linears
// reading one input share them; up to 4 windows of each input wait to be added, O(4·L·n_in)),
// one Linear's f32 copy and SparseGPT work (n_in² + n_out·n_in), the block's encoded
// Linears, and the block's weight pages of the temporary model (dropped when the block is done).
// While the model writes its own calibration text: the KV caches of self_batch sequences (f16).
// Not in memory: the activations of all windows [S, L, H] f32 (a scratch file, one window read or
// written at a time), the encoded Linears of finished blocks (a second scratch file, read back one
// tensor at a time by the output pass), and the temporary model (a mapped file).
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <sstream>

#include "detail.h"
#include "endor/calibrate.h"
#include "endor/checkpoint.h"
#include "endor/output_file.h"
#include "endor/pack.h"
#include "endor/prune.h"
#include "endor/pruning.h"
#include "endor/runtime.h"
#include "endor/tokenizer.h"
#include "scratch_file.h"

namespace endor {
namespace {

using packer_detail::ScratchFile;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open the calibration text");
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) throw Error(path + ": cannot read the calibration text");
  return s.str();
}

// --calib-ids: whitespace-separated decimal token ids, each below the vocabulary size.
std::vector<int32_t> parse_ids(const std::string& text, uint64_t vocab, const std::string& path) {
  std::vector<int32_t> ids;
  const char* const space = " \t\r\n";
  for (size_t i = text.find_first_not_of(space); i != std::string::npos; i = text.find_first_not_of(space, i)) {
    const size_t end = std::min(text.find_first_of(space, i), text.size());
    uint64_t v = 0;
    const auto [ptr, ec] = std::from_chars(text.data() + i, text.data() + end, v);
    if (ec != std::errc() || ptr != text.data() + end || v >= vocab)
      throw Error(path + ":" + std::to_string(1 + std::count(text.begin(), text.begin() + ptrdiff_t(i), '\n')) + ": '" +
                  text.substr(i, std::min<size_t>(end - i, 20)) + "' is not a token id below the vocabulary size " +
                  std::to_string(vocab));
    ids.push_back(int32_t(v));
    i = end;
  }
  return ids;
}

// Calibration windows of L tokens need more than L tokens to start in.
void require_windows(size_t n_ids, uint64_t L, const std::string& path) {
  if (n_ids <= L)
    throw Error(path + ": " + std::to_string(n_ids) + " tokens; calibration windows of " + std::to_string(L) +
                " need more");
}

// A named temporary file: registered with the callback before it can exist, unlinked (and
// released) by unlink_now() or on every way out.
class NamedTemp {
 public:
  NamedTemp(std::string path, const TempFileCallback& cb) : path_(std::move(path)), cb_(cb) {
    if (cb_) cb_(path_, true);
  }
  ~NamedTemp() { unlink_now(); }
  NamedTemp(const NamedTemp&) = delete;
  NamedTemp& operator=(const NamedTemp&) = delete;
  const std::string& path() const { return path_; }
  void unlink_now() {
    if (done_) return;
    ::unlink(path_.c_str());
    if (cb_) cb_(path_, false);
    done_ = true;
  }

 private:
  std::string path_;
  const TempFileCallback& cb_;
  bool done_ = false;
};

// The calibration activations [n_samples, seq_len, hidden] f32: the inputs of the current block,
// overwritten window by window by its pruned outputs (a window's pruned re-run needs only its own
// input, so one store serves as input and output). In a scratch file: one window in memory.
class ActivationStore {
 public:
  ActivationStore(const std::string& path, uint64_t window_floats, const TempFileCallback& cb)
      : file_(path, cb), bytes_(window_floats * sizeof(float)) {}
  void read(uint64_t s, float* window) const { file_.read(s * bytes_, window, bytes_); }
  void write(uint64_t s, const float* window) { file_.write(s * bytes_, window, bytes_); }

 private:
  ScratchFile file_;
  uint64_t bytes_;
};

// The calibrated Linears, encoded as they will be stored, waiting in a scratch file for the
// output pass; pack takes each one back (once) through Pruner::take_encoded.
class SpilledTensors final : public Pruner {
 public:
  SpilledTensors(const std::string& path, const TempFileCallback& cb) : file_(path, cb) {}
  void add(const std::string& name, const EncodedTensor& e) {
    index_[name] = Entry{file_.append(e.bytes.data(), e.bytes.size()), e.layout};
  }
  std::optional<EncodedTensor> take_encoded(const std::string& name) override {
    const auto it = index_.find(name);
    if (it == index_.end()) return std::nullopt;
    EncodedTensor e;
    e.layout = it->second.layout;
    e.bytes.resize(e.layout.total_bytes);
    file_.read(it->second.offset, e.bytes.data(), e.bytes.size());
    index_.erase(it);
    return e;
  }
  void prune(const std::string& name, float*, uint64_t, uint64_t) override {
    throw Error("calibration produced no weights for tensor '" + name + "'");
  }

 private:
  struct Entry {
    uint64_t offset;
    TensorLayout layout;
  };
  ScratchFile file_;
  std::map<std::string, Entry> index_;
};

// Drops the resident pages of manifest group g of a container opened with ContainerReader::open
// (a read-only file mapping: the pages are re-read from the file if touched again). Calibration
// touches each block's weights in one stretch; without this the whole model would stay resident.
void drop_group_pages(const ContainerReader& r, uint32_t g) {
  const GroupInfo& gi = r.manifest().groups.at(g);
  if (gi.size == 0) return;
  const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = uintptr_t(r.bytes() + gi.offset) & ~(page - 1);
  const uintptr_t end = uintptr_t(r.bytes() + gi.offset + gi.size);
  ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);  // advisory: failure is harmless
}

// The dtype of a Linear whose kept weights SparseGPT moved to make up for the pruned ones
// (stored unquantized): bf16 keeps 8 significant bits of those updates, f16 11 at the same size, so
// such a Linear is stored f16 when every value fits f16's range, unless --dtype asked for a type.
// End to end on SmolLM2 the difference is within the calibration's run-to-run spread (NOTES.md).
Dtype updated_dtype(Dtype planned, const float* w, uint64_t n, const PackOptions& o) {
  if (planned != Dtype::BF16 || o.dtype) return planned;
  float amax = 0.0f;
  for (uint64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(w[i]));
  return amax <= 65504.0f ? Dtype::F16 : planned;
}

// A Linear pruned by the method (w [rows, cols] is left as the algorithm leaves it) and encoded
// as it will be stored: SparseGPT with joint quantization stores its own codes and parameters
// (encode_quantized); otherwise the f32 result is encoded by pack's rule (encode_for_pack; with
// --quant that quantizes after pruning, as magnitude does).
EncodedTensor prune_linear(float* w, uint64_t rows, uint64_t cols, const pruning::WandaStats* wanda,
                           const pruning::HessianAccumulator* hessian, const pruning::SparsityTarget& target,
                           const PruneSpec& spec, const PackOptions& o, const TensorTreatment& tr) {
  const std::vector<uint64_t> shape{rows, cols};
  const uint32_t group_size = stored_group_size(tr.dtype, o);
  if (wanda) {
    pruning::wanda_prune(w, rows, cols, wanda->scaler_row().data(), target);
    return encode_for_pack(w, shape, tr.dtype, group_size);
  }
  pruning::SparseGptOptions so;
  so.target = target;
  so.act_order = o.act_order;
  so.quant.mse_clip = o.mse_clip;
  if (spec.structured() && so.block_size % spec.m != 0) so.block_size = spec.m * std::max<size_t>(1, 128 / spec.m);
  if (is_quantized(tr.dtype)) so.quant.dtype = tr.dtype;  // the pruning quantizers are the container's dtypes
  if (is_grouped(tr.dtype)) so.quant.group_size = group_size;
  // Pruning with int4: two passes over the same Hessian. SparseGPT prunes (no quantization), then
  // the same OBS sweep quantizes the kept weights with the mask fixed and every group's range over
  // its kept weights only (joint SparseGPT chooses a group's range before its pruning decisions,
  // so the range also spans the weights about to become 0). Twice the sweeps; the file's layout
  // is the same.
  std::vector<uint8_t> first_mask;
  if (is_int4(tr.dtype) && target.ratio + double(target.n) > 0.0 && o.prune.method == PruneMethod::SparseGpt) {
    pruning::SparseGptOptions prune_only = so;
    prune_only.quant = {};
    prune_only.act_order = false;
    first_mask = pruning::sparsegpt_prune(w, rows, cols, hessian->hessian().data(), prune_only).mask;
    so.fixed_mask = first_mask.data();
  }
  const pruning::SparseGptResult res = pruning::sparsegpt_prune(w, rows, cols, hessian->hessian().data(), so);
  if (!res.dtype) return encode_for_pack(w, shape, updated_dtype(tr.dtype, w, rows * cols, o), group_size);

  std::vector<uint8_t> present(res.mask.size());
  uint64_t nnz = 0;
  for (size_t i = 0; i < present.size(); ++i) nnz += present[i] = res.mask[i] == 0;
  QuantizedValues q;
  q.value_type = value_type_of(*res.dtype);
  q.int4_params = int4_params_of(*res.dtype);
  q.present = present.data();
  if (res.dtype == Dtype::Int8) {
    q.int8_codes = res.int8_codes.data();
    q.row_scales = res.row_scales.data();
  } else if (res.dtype == Dtype::Int8g) {
    q.group_size = res.group_size;
    q.int8_codes = res.int8_codes.data();
    q.group_scales = res.group_scales_f16.data();
  } else {
    q.group_size = res.group_size;
    q.int4_codes = res.int4_codes.data();
    if (res.dtype == Dtype::Int4k) {
      q.super_scales = res.super_scales_f16.data();
      q.param_codes = res.param_codes.data();
    } else {
      q.group_scales = res.group_scales_f16.data();
      q.group_mins = res.group_mins_f16.data();
    }
  }
  // Without pruning (gptq) every element is present: dense, whatever the checkpoint's own zeros.
  const Encoding enc = nnz == present.size() ? Encoding::Dense : choose_encoding(shape, tr.dtype, group_size, nnz);
  if (enc == Encoding::Dense) q.present = nullptr;
  return encode_quantized(shape, enc, q);
}

// The calibration statistics of one block's Linears, fed by the dense pass's hook. Linears that
// read one input (Llama's q/k/v and gate/up, OPT's q/k/v) share one accumulator: the first window
// finds them (a Linear whose input equals, byte for byte, the input the previous Linear was given),
// and every later window checks that they still do. Windows are added kWindowsPerBatch at a time
// (the references' add_batch of a batch of that many samples: the same statistic, one BLAS call
// over 4x the rows instead of four).
class LinearInputStats {
 public:
  explicit LinearInputStats(bool wanda) : wanda_(wanda) {}

  void add(const std::string& linear, const float* x, size_t n, size_t in) {
    const bool same_as_last =
        last_ && n == last_n_ && in == last_in_ && std::equal(x, x + n * in, last_x_.begin());
    auto it = of_.find(linear);
    if (it == of_.end()) {  // the first window
      if (same_as_last) {   // shares the previous Linear's input
        of_.emplace(linear, last_);
        return;
      }
      const auto input = std::make_shared<Input>(in, wanda_);
      input->owner = linear;
      it = of_.emplace(linear, input).first;
    } else if (it->second->owner != linear) {
      // Sharing: nothing to add, but the input must still be the one the owner was just given.
      if (!same_as_last || it->second != last_)
        throw Error("calibration: the input of '" + linear + "' no longer equals the input of '" +
                    it->second->owner + "'");
      return;
    }
    Input& input = *it->second;
    input.pending.insert(input.pending.end(), x, x + n * in);
    input.pending_tokens += n;
    if (++input.pending_windows == kWindowsPerBatch) input.add_pending();
    last_ = it->second;
    last_n_ = n;
    last_in_ = in;
    last_x_.assign(x, x + n * in);
  }

  // Adds the windows still pending; call once after the dense pass.
  void flush() {
    for (auto& [linear, input] : of_)
      if (input->owner == linear) input->add_pending();
    last_.reset();
    last_x_ = {};
  }

  const pruning::WandaStats* wanda(const std::string& linear) const { return wanda_ ? &*at(linear).wanda : nullptr; }
  const pruning::HessianAccumulator* hessian(const std::string& linear) const {
    return wanda_ ? nullptr : &*at(linear).hessian;
  }
  // The Linear is done with its statistics: freed with the last Linear that shares them.
  void release(const std::string& linear) { of_.erase(linear); }

 private:
  static constexpr size_t kWindowsPerBatch = 4;
  struct Input {
    Input(size_t in, bool wanda) {
      if (wanda) this->wanda.emplace(in);
      else hessian.emplace(in);
    }
    void add_pending() {
      if (pending_windows == 0) return;
      const size_t in = wanda ? wanda->n_in() : hessian->n_in();
      if (wanda) wanda->add_batch(pending.data(), pending_tokens, in, pending_windows);
      else hessian->add_batch(pending.data(), pending_tokens, in, pending_windows);
      pending.clear();
      pending_tokens = pending_windows = 0;
    }
    std::string owner;  // the Linear whose hook call adds the windows
    std::optional<pruning::WandaStats> wanda;
    std::optional<pruning::HessianAccumulator> hessian;
    std::vector<float> pending;  // [pending_tokens, n_in]
    size_t pending_tokens = 0, pending_windows = 0;
  };
  const Input& at(const std::string& linear) const {
    const auto it = of_.find(linear);
    if (it == of_.end()) throw Error("calibration: no statistics were gathered for '" + linear + "'");
    return *it->second;
  }
  bool wanda_;
  std::map<std::string, std::shared_ptr<Input>> of_;  // Linear -> the statistics of its input
  std::shared_ptr<Input> last_;                       // the input the previous hook call added to
  size_t last_n_ = 0, last_in_ = 0;
  std::vector<float> last_x_;  // that call's x: a sharing Linear's input is compared with it
};

// The first token of a self-generated sequence: BOS, else the first EOS (models trained on
// documents separated by one end token start a document after it), else id 0.
int32_t self_calibration_start(const ModelConfig& c) {
  if (c.bos_token_id >= 0 && uint32_t(c.bos_token_id) < c.vocab) return c.bos_token_id;
  for (int32_t e : c.eos_token_ids)
    if (e >= 0 && uint32_t(e) < c.vocab) return e;
  return 0;
}

}  // namespace

uint32_t self_calibration_batch(const ModelConfig& c, uint64_t n, uint64_t L) {
  const uint64_t kv_per_sequence = kv_cache_bytes(c.n_layers, L, uint64_t(c.n_kv_heads) * c.head_dim, KvDtype::F16);
  return uint32_t(std::clamp<uint64_t>(kSelfCalibKvBudget / std::max<uint64_t>(1, kv_per_sequence), 1,
                                       std::min<uint64_t>(kSelfCalibMaxBatch, std::max<uint64_t>(1, n))));
}

// Throughput mode: co.self_batch sequences share each pass over the blocks.
std::vector<int32_t> self_calibration_ids(Model& model, uint64_t n, uint64_t L, const CalibrationOptions& co,
                                          const PackCallbacks& cb) {
  if (L < 1 || L > model.config().max_positions)
    throw Error("self-calibration: sequences of " + std::to_string(L) + " tokens must be in [1, " +
                std::to_string(model.config().max_positions) + "] (max_position_embeddings)");
  const int32_t start = self_calibration_start(model.config());
  const std::vector<std::vector<int32_t>> prompts(n, std::vector<int32_t>{start});
  SamplerOptions so;
  so.temperature = co.self_temperature;
  so.top_k = co.self_top_k;
  so.top_p = co.self_top_p;
  so.seed = co.seed;
  BatchGenerationOptions bo;
  bo.batch = co.self_batch ? co.self_batch : self_calibration_batch(model.config(), n, L);
  // The text is sampled, not a reference: f16 keys and values halve the caches of a whole batch.
  const KvDtype kv_dtype = model.kv_dtype();
  model.set_kv_dtype(KvDtype::F16);
  bo.max_new_tokens = L - 1;
  bo.stop_at_eos = false;
  PackProgress progress;
  progress.stage = "generate";
  progress.unit = "sequences";
  progress.tensors_total = n;
  if (cb.on_progress) cb.on_progress(progress);
  std::vector<int32_t> ids(n * L);
  generate_batch(model, prompts, so, bo, [&](size_t i, const std::vector<int32_t>& out) {
    if (out.size() != L - 1)  // only the context end stops a sequence early, and L fits the context
      throw Error("self-calibration: sequence " + std::to_string(i + 1) + " stopped after " +
                  std::to_string(out.size()) + " of " + std::to_string(L - 1) + " tokens");
    ids[i * L] = start;
    std::copy(out.begin(), out.end(), ids.begin() + ptrdiff_t(i * L + 1));
    progress.tensors_done += 1;
    if (cb.on_progress) cb.on_progress(progress);
  });
  model.set_kv_dtype(kv_dtype);
  return ids;
}

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The checks that need no file, made before anything is read.
void check_calibration_request(const PackOptions& o, const CalibrationOptions& co) {
  const PruneSpec& spec = o.prune;
  const bool gptq = spec.method == PruneMethod::Gptq;
  if (!calibrated(spec.method))
    throw Error(std::string("calibrated pruning needs --method wanda, sparsegpt or gptq, got '") + to_string(spec.method) +
                "'");
  if (gptq && (spec.structured() || spec.sparsity > 0.0))
    throw Error("--method gptq quantizes without pruning; for pruning with GPTQ's error feedback use --method sparsegpt");
  if (gptq && !o.quant) throw Error("--method gptq needs --quant int8, int8g, int4 or int4k");
  if (!spec.active()) throw Error("calibrated pruning needs --sparsity S > 0 or --pattern N:M");
  if (spec.structured() && (spec.n == 0 || spec.n >= spec.m))
    throw Error("N:M pattern needs 0 < N < M");
  if (co.n_samples == 0) throw Error("--calib-samples must be at least 1");
  packer_detail::validate_options(o);
}

void check_sparsity_ramp(const PruneSpec& spec, uint32_t n_layers) {
  if (spec.sparsity_ramp == 0.0) return;
  if (spec.structured()) throw Error("--sparsity-ramp applies to unstructured sparsity, not N:M");
  const double lo = spec.block_sparsity(0, n_layers), hi = spec.block_sparsity(n_layers - 1, n_layers);
  if (!(std::min(lo, hi) >= 0.0 && std::max(lo, hi) < 1.0))
    throw Error("--sparsity-ramp " + std::to_string(spec.sparsity_ramp) + " takes block sparsity to [" +
                std::to_string(std::min(lo, hi)) + ", " + std::to_string(std::max(lo, hi)) + "], outside [0, 1)");
}

// The checkpoint as a temporary dense container at `path` in its source dtypes (the runtime
// computes in f32 from any of them), mapped, then unlinked when this returns.
std::unique_ptr<ContainerReader> open_dense_model(const std::string& source_dir, const std::string& path,
                                                  const PackOptions& o, const PackCallbacks& cb) {
  NamedTemp model_file(path, cb.on_temp_file);
  PackOptions mo;
  mo.command = "convert";
  mo.tool_version = o.tool_version;
  PackCallbacks mcb;
  mcb.on_temp_file = cb.on_temp_file;
  if (cb.on_progress)
    mcb.on_progress = [&](const PackProgress& p) {
      PackProgress q = p;
      q.stage = "convert";
      cb.on_progress(q);
    };
  pack_checkpoint(source_dir, model_file.path(), mo, mcb);
  return ContainerReader::open(model_file.path());
}

std::string block_prefix(const ModelConfig& c) {
  return c.arch == Architecture::Opt ? "model.decoder.layers." : "model.layers.";
}

// Wall seconds per phase, reported as a note when calibration ends.
struct PhaseSeconds {
  double generate = 0.0, stats = 0.0, prune = 0.0, rerun = 0.0;
  std::string note(const std::string& method) const {
    char line[256];
    std::snprintf(line, sizeof line, "calibration took %.1f s: generating the text %.1f s, dense passes with statistics %.1f s, "
                  "%s %.1f s, pruned passes %.1f s", generate + stats + prune + rerun, generate, stats, method.c_str(),
                  prune, rerun);
    return line;
  }
};

// A Linear of the block being calibrated, pruned and encoded, lent to the model for the pruned pass.
struct PrunedLinear {
  std::string linear, name;
  TensorInfo info;  // the model holds a pointer to it until the block is done
  EncodedTensor enc;
  const TensorInfo* original = nullptr;
};

// One decoder block's calibration (docs/algorithms.md, "Sequential calibration", step 3): a dense
// pass over every window gathers the statistics, each Linear is pruned from them, a pass with the
// weights as they will be stored writes the next block's inputs in place, and the encoded Linears
// wait in `spilled` for the output pass.
struct BlockCalibrator {
  Model& model;
  const ContainerReader& reader;
  const std::map<std::string, const CheckpointTensor*>& source_tensors;
  const std::string& source_dir;
  const PackOptions& o;
  const CalibrationOptions& co;
  ActivationStore& acts;
  std::vector<float>& window;  // [L, hidden]: the one window in memory
  SpilledTensors& spilled;
  const uint64_t S, L;
  PhaseSeconds seconds;
  std::map<std::string, uint64_t> tokens;  // the current block's Linears: calibration tokens seen
  uint64_t experts = 0, experts_under = 0;  // MoE experts calibrated, and those under co.min_expert_tokens
  uint64_t linears_under = 0;               // the Linears of the experts under it (the fallback's tensors)
  std::set<std::string> counted;  // the current block's experts already counted

  void calibrate(uint32_t l) {
    const std::map<std::string, TensorTreatment> treatments = block_treatments(l);
    LinearInputStats stats = gather_statistics(l, treatments);
    std::deque<PrunedLinear> pruned;  // stable addresses
    const uint32_t group = prune_linears(l, treatments, stats, pruned);
    auto t = Clock::now();
    for (uint64_t s = 0; s < S; ++s) {  // pruned pass: the next block's inputs, in place
      acts.read(s, window.data());
      model.forward_block(l, window.data(), L, {});
      acts.write(s, window.data());
    }
    seconds.rerun += seconds_since(t);
    for (PrunedLinear& p : pruned) {
      spilled.add(p.name, p.enc);
      // Give the model its original weight back so it refers to nothing that is freed below.
      model.replace_block_weight(l, p.linear, reader.tensor(*p.original));
    }
    pruned.clear();
    if (group != UINT32_MAX) drop_group_pages(reader, group);
  }

 private:
  std::string weight_name(uint32_t l, const std::string& linear) const {
    return block_prefix(model.config()) + std::to_string(l) + "." + linear + ".weight";
  }

  // The Linears block l prunes, with their treatment (value type; --skip leaves some out).
  std::map<std::string, TensorTreatment> block_treatments(uint32_t l) const {
    std::map<std::string, TensorTreatment> treatments;
    for (const std::string& linear : model.block_linear_names()) {
      const std::string name = weight_name(l, linear);
      const auto it = source_tensors.find(name);
      if (it == source_tensors.end()) throw Error(source_dir + ": missing tensor '" + name + "'");
      const TensorTreatment tr = plan_treatment(*it->second, o);
      if (tr.prune) treatments[linear] = tr;
    }
    return treatments;
  }

  // The dense pass: every window through block l, its Linears' inputs into their statistics.
  LinearInputStats gather_statistics(uint32_t l, const std::map<std::string, TensorTreatment>& treatments) {
    LinearInputStats stats(o.prune.method == PruneMethod::Wanda);
    tokens.clear();
    counted.clear();
    const Model::LinearInputHook hook = [&](uint32_t, const std::string& linear, const float* x, size_t n,
                                            size_t in) {
      if (!treatments.count(linear)) return;
      stats.add(linear, x, n, in);
      tokens[linear] += n;
    };
    const auto t = Clock::now();
    for (uint64_t s = 0; s < S; ++s) {  // one window per call
      acts.read(s, window.data());
      model.forward_block(l, window.data(), L, hook);
    }
    stats.flush();
    seconds.stats += seconds_since(t);
    return stats;
  }

  // An MoE expert's Linear ("mlp.experts.3.up_proj") routed under co.min_expert_tokens tokens in
  // all windows; counts each expert (its gate, the first of its Linears seen) once.
  bool few_expert_tokens(const std::string& linear) {
    const size_t at = linear.find("experts.");
    if (at == std::string::npos) return false;
    const auto it = tokens.find(linear);
    const bool few = it == tokens.end() || it->second < co.min_expert_tokens;
    const std::string expert = linear.substr(0, linear.find('.', at + 8));
    if (counted.insert(expert).second) {
      experts += 1;
      experts_under += few;
    }
    linears_under += few;  // called once per Linear
    return few;
  }

  // The fallback of an expert with too few tokens: magnitude pruning as `endor-pack prune --method
  // magnitude` does it (row, matrix or N:M; none for gptq), then pack's encoding (--quant rounds to nearest).
  EncodedTensor magnitude_linear(float* w, uint64_t rows, uint64_t cols, const pruning::SparsityTarget& target,
                                 const TensorTreatment& tr) const {
    const PruneSpec& spec = o.prune;
    if (spec.structured()) {
      magnitude_prune_n_m(w, rows, cols, spec.n, spec.m);
    } else if (target.ratio > 0.0) {
      if (spec.scope == PruneScope::Matrix) magnitude_prune_matrix(w, rows, cols, target.ratio);
      else magnitude_prune_rows(w, rows, cols, target.ratio);
    }
    return encode_for_pack(w, {rows, cols}, tr.dtype, stored_group_size(tr.dtype, o));
  }

  // Prunes (and encodes) each treated Linear of block l and lends it to the model; returns the
  // block's manifest group (UINT32_MAX when nothing was pruned).
  uint32_t prune_linears(uint32_t l, const std::map<std::string, TensorTreatment>& treatments, LinearInputStats& stats,
                         std::deque<PrunedLinear>& pruned) {
    const PruneSpec& spec = o.prune;
    const pruning::SparsityTarget target =
        spec.structured()         ? pruning::SparsityTarget::n_of_m(spec.n, spec.m)
        : spec.method == PruneMethod::Gptq ? pruning::SparsityTarget::unstructured(0.0)
                                  : pruning::SparsityTarget::unstructured(spec.block_sparsity(l, model.config().n_layers));
    uint32_t group = UINT32_MAX;
    for (const std::string& linear : model.block_linear_names()) {
      const auto tr = treatments.find(linear);
      if (tr == treatments.end()) continue;
      const std::string name = weight_name(l, linear);
      const std::optional<TensorView> view = reader.find_tensor(name);
      if (!view) throw Error(source_dir + ": missing tensor '" + name + "'");
      group = view->info->group;
      const uint64_t rows = view->info->shape[0], cols = view->info->shape[1];
      if (spec.structured() && cols % spec.m != 0)
        throw Error("tensor '" + name + "': " + std::to_string(cols) + " inputs are not a multiple of M=" +
                    std::to_string(spec.m));
      std::vector<float> w(rows * cols);
      decode_rows_f32(*view, 0, rows, w.data());
      PrunedLinear& p = pruned.emplace_back();
      p.linear = linear;
      p.name = name;
      p.original = view->info;
      const auto t = Clock::now();
      if (few_expert_tokens(linear)) {
        p.enc = magnitude_linear(w.data(), rows, cols, target, tr->second);
      } else {
        p.enc = prune_linear(w.data(), rows, cols, stats.wanda(linear), stats.hessian(linear), target, spec, o,
                             tr->second);
      }
      seconds.prune += seconds_since(t);
      stats.release(linear);  // a Hessian's n_in² floats go with its last Linear
      if (co.on_pruned) co.on_pruned(name, w.data(), rows, cols);
      p.info.name = name;
      p.info.shape = {rows, cols};
      p.info.encoding = p.enc.layout.encoding;
      p.info.value_type = p.enc.layout.value_type;
      p.info.group_size = p.enc.layout.group_size;
      p.info.int4_params = p.enc.layout.int4_params;
      p.info.nnz = p.enc.layout.nnz;
      // The pruned re-run uses the weights exactly as stored (as the references re-run their
      // fp16 model after writing the pruned weights back into it).
      model.replace_block_weight(l, linear, TensorView{&p.info, p.enc.layout, p.enc.bytes.data()});
    }
    return group;
  }
};

// The manifest's record of the calibration. The text's file name only: the manifest must not
// carry the packer's file system layout.
nlohmann::json calibration_provenance(const CalibrationOptions& co, uint64_t S, uint64_t L,
                                      const std::vector<int32_t>& ids) {
  nlohmann::json calibration = {{"samples", S}, {"seq_len", L}, {"seed", co.seed}, {"tokens", ids.size()}};
  if (co.self_generated()) {
    calibration["generated"] = {{"by", "the model itself"}, {"start_token", ids.empty() ? -1 : ids[0]},
                                {"temperature", co.self_temperature}, {"top_k", co.self_top_k}, {"top_p", co.self_top_p},
                               };
    calibration["sampling"] = "one window per generated sequence";
  } else {
    calibration[co.ids ? "ids" : "text"] = packer_detail::base_name(co.text_path);
    calibration["sampling"] = "uniform window start, std::mt19937_64";
  }
  return calibration;
}

}  // namespace

PackSummary pack_calibrated(const std::string& source_dir, const std::string& output_path,
                            const PackOptions& o, const CalibrationOptions& co, const PackCallbacks& cb) {
  const PruneSpec& spec = o.prune;
  check_calibration_request(o, co);
  const std::string text = co.self_generated() ? std::string() : read_file(co.text_path);
  std::unique_ptr<Checkpoint> ck = Checkpoint::open(source_dir);
  packer_detail::check_output_is_not_input(output_path, *ck);  // before the long part, not after
  std::vector<int32_t> given_ids;  // --calib-ids, checked before the long part too
  if (co.ids && !co.self_generated()) {
    given_ids = parse_ids(text, ck->shape().vocab, co.text_path);
    require_windows(given_ids.size(), co.seq_len ? co.seq_len : ck->shape().max_positions, co.text_path);
  }
  std::map<std::string, const CheckpointTensor*> source_tensors;
  for (const CheckpointTensor& t : ck->tensors()) source_tensors[t.name] = &t;
  const std::string tag = ".tmp-" + std::to_string(::getpid());

  // 1. The model, through the runtime (a temporary dense container, unlinked once mapped).
  std::unique_ptr<ContainerReader> reader = open_dense_model(source_dir, output_path + ".calib-model" + tag, o, cb);
  // Exact f32 activations: calibration is the reference, whatever endor-infer's default is.
  pruning::set_threads(co.n_threads);
  std::unique_ptr<Backend> backend = make_backend("cpu", co.n_threads, /*exact=*/true);
  std::unique_ptr<Model> model = load_model(*reader, *backend);
  const ModelConfig c = model->config();

  // 2. Calibration windows (token ids and where each window starts), embedded into the activation store.
  const uint64_t S = co.n_samples, H = c.hidden;
  const uint64_t L = co.seq_len                ? co.seq_len
                     : co.self_generated() ? std::min<uint64_t>(kSelfCalibSeqLen, c.max_positions)
                                             : c.max_positions;
  if (L < 1 || L > c.max_positions)
    throw Error("--calib-seqlen " + std::to_string(L) + " must be in [1, " + std::to_string(c.max_positions) +
                "] (max_position_embeddings)");
  std::vector<int32_t> ids = std::move(given_ids);
  std::vector<uint64_t> starts(S);
  double generate_s = 0.0;  // seconds
  if (co.self_generated()) {
    if (cb.on_note)
      cb.on_note("no --calib: calibrating on " + std::to_string(S) + " x " + std::to_string(L) +
                 " tokens generated by the model itself (--calib FILE for text of your own)");
    const auto t0 = Clock::now();
    ids = self_calibration_ids(*model, S, L, co, cb);
    generate_s = seconds_since(t0);
    for (uint64_t s = 0; s < S; ++s) starts[s] = s * L;  // one window per sequence
  } else {
    if (!co.ids) {
      const std::optional<std::string_view> tok_json = reader->file("tokenizer.json");
      if (!tok_json) throw Error(source_dir + ": no tokenizer.json; calibration needs the checkpoint's tokenizer");
      const Tokenizer tokenizer = Tokenizer::from_json(*tok_json, source_dir + "/tokenizer.json");
      ids = tokenizer.encode(text, true);
    }
    require_windows(ids.size(), L, co.text_path);
    std::mt19937_64 rng(co.seed);
    std::uniform_int_distribution<uint64_t> start_dist(0, ids.size() - L - 1);
    for (uint64_t s = 0; s < S; ++s) starts[s] = start_dist(rng);
  }
  std::optional<ActivationStore> acts;
  acts.emplace(output_path + ".calib-acts" + tag, L * H, cb.on_temp_file);
  std::vector<float> window(L * H);  // [L, H]: the one window in memory
  for (uint64_t s = 0; s < S; ++s) {
    model->embed(ids.data() + starts[s], L, window.data());
    acts->write(s, window.data());
  }
  for (uint32_t g = 0; g < reader->manifest().groups.size(); ++g)
    if (reader->manifest().groups[g].name == "embed") drop_group_pages(*reader, g);

  // 3. Block by block.
  check_sparsity_ramp(spec, c.n_layers);
  SpilledTensors spilled(output_path + ".calib-tensors" + tag, cb.on_temp_file);
  BlockCalibrator blocks{*model, *reader, source_tensors, source_dir, o, co, *acts, window, spilled, S, L, {}};
  blocks.seconds.generate = generate_s;
  PackProgress progress;
  progress.stage = "calibrate";
  progress.unit = "blocks";
  progress.tensors_total = c.n_layers;
  if (cb.on_progress) cb.on_progress(progress);  // the windows are embedded: blocks start
  for (uint32_t l = 0; l < c.n_layers; ++l) {
    blocks.calibrate(l);
    progress.tensor = block_prefix(c) + std::to_string(l);
    progress.tensors_done = l + 1;
    if (cb.on_progress) cb.on_progress(progress);
  }
  if (cb.on_note) cb.on_note(blocks.seconds.note(to_string(spec.method)));
  nlohmann::json provenance = calibration_provenance(co, S, L, ids);
  if (blocks.experts > 0)
    provenance["experts"] = {{"calibrated", blocks.experts - blocks.experts_under},
                             {"under_min_tokens", blocks.experts_under}, {"min_tokens", co.min_expert_tokens},
                             {"fallback", spec.method == PruneMethod::Gptq ? "round to nearest" : "magnitude"}};
  // Free the runtime's buffers, the temporary model and the activations before the output pass.
  acts.reset();
  model.reset();
  backend.reset();
  reader.reset();
  ck.reset();

  // 4. The output, through the normal packer path (the calibrated Linears come from `spilled`).
  PackSummary summary = pack_checkpoint_with_pruner(source_dir, output_path, o, &spilled, cb, provenance);
  summary.experts = blocks.experts;
  summary.experts_under = blocks.experts_under;
  summary.fallback_tensors = blocks.linears_under;
  summary.min_expert_tokens = co.min_expert_tokens;
  return summary;
}

}  // namespace endor
