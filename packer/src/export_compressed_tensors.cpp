// compressed-tensors `pack-quantized` (as of compressed-tensors 0.20): int4/int8 decoder Linears
// keep Endor's codes and parameters, repacked; every other tensor is written decoded (export_hf).
//
// The mapping (docs/export.md): compressed-tensors dequantizes x = (q − zp)·scale with q and zp
// signed (int4: [−8, 7]) and stores them offset by 8 in 4-bit fields, element j of a run of 8 at
// bits 4·(j mod 8) of an int32 (rows of weight_packed; columns of weight_zero_point, which is
// packed along the output dimension). Endor decodes q·S + M with q in [0, 15]; where M = −z·S
// (SPEC.md §7.2's zero code), q·S + M = (q − z)·S, so compressed-tensors' q is Endor's q − 8 and its
// zp is z − 8: the stored nibbles are Endor's q and z unchanged. An absent (pruned) element gets
// code z, which decodes to exactly 0. int8 (SPEC.md §7.1, symmetric per row) is the "channel"
// strategy: weight_scale [out, 1] f32, q + 128 in 8-bit fields, no zero point.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>

#include "detail.h"
#include "export_detail.h"

namespace endor::export_detail {

using packer_detail::fail;

namespace {

constexpr const char* kFormatVersion = "0.20.0";  // the compressed-tensors release this layout follows

// The codes of one row (int4: 0..15, int8: the signed code), with `absent` where the bitmap has none.
void row_codes(const TensorView& v, uint64_t r, int32_t absent, std::vector<int32_t>& codes, std::vector<uint8_t>& present) {
  const TensorLayout& L = v.layout;
  codes.assign(L.cols, absent);
  present.assign(L.cols, 0);
  auto code_at = [&](uint64_t value) -> int32_t {
    if (L.value_type == ValueType::I4) {
      const uint8_t b = v.values()[value / 2];
      return (value & 1) ? (b >> 4) : (b & 15);
    }
    return int32_t(int8_t(v.values()[value]));
  };
  if (L.encoding == Encoding::Dense) {
    for (uint64_t c = 0; c < L.cols; ++c) {
      codes[c] = code_at(r * L.cols + c);
      present[c] = 1;
    }
    return;
  }
  uint64_t value = v.index()[r * L.blocks_per_row];
  const uint64_t* words = v.bitmap() + r * L.words_per_row;
  for (uint64_t w = 0; w < L.words_per_row; ++w) {
    uint64_t bits = words[w];
    while (bits) {
      const uint64_t c = w * 64 + uint64_t(__builtin_ctzll(bits));
      bits &= bits - 1;
      codes[c] = code_at(value++);
      present[c] = 1;
    }
  }
}

void put_le32(std::vector<uint8_t>& out, uint64_t word_index, uint32_t w) {
  for (int k = 0; k < 4; ++k) out[word_index * 4 + k] = uint8_t(w >> (8 * k));
}

struct PackedInt4 {
  std::vector<uint8_t> packed, scales, zero_points;
  bool scales_f16 = true;
};

// An int4 tensor as pack-quantized parts; throws naming the tensor where the grid is not −z·S.
PackedInt4 pack_int4(const ExportJob& job, const TensorInfo& t, bool want_bytes) {
  const TensorView v = job.reader.tensor(t);
  validate_bitmap(v, job.where(t));
  const TensorLayout& L = v.layout;
  const uint64_t rows = L.rows, cols = L.cols, G = L.group_size, groups = L.groups_per_row;
  // One f16 scale and one f16 min per (row, group) (SPEC.md §6.2); other parameter storage
  // (coded parameters under super-block scales) has free float mins, not zero codes.
  if (L.scales_bytes != 2 * rows * groups || L.mins_bytes != 2 * rows * groups)
    fail(job.where(t), "int4 parameters are not one f16 scale and min per group (coded parameters with float mins); "
                       "compressed-tensors' zero points cannot express them exactly (export --to hf writes the values)");
  if (cols % G != 0)
    fail(job.where(t), std::to_string(cols) + " input columns are not a multiple of its int4 group size " + std::to_string(G) +
                           ": compressed-tensors' group strategy needs whole groups (export --to hf writes the values)");
  PackedInt4 p;
  std::vector<uint8_t> zs(rows * groups, 0);
  std::vector<int32_t> codes;
  std::vector<uint8_t> present;
  const uint64_t words_per_row = (cols + 7) / 8;
  if (want_bytes) p.packed.assign(rows * words_per_row * 4, 0);
  for (uint64_t r = 0; r < rows; ++r) {
    row_codes(v, r, -1, codes, present);
    for (uint64_t g = 0; g < groups; ++g) {
      const uint16_t S = v.group_scales()[r * groups + g], M = v.group_mins()[r * groups + g];
      bool any = false;
      for (uint64_t c = g * G; c < (g + 1) * G; ++c) any |= present[c] != 0;
      const std::optional<uint8_t> z = int4_zero_code(S, M);
      if (!z && any) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "row %llu, group %llu: int4 scale %g and min %g are not min = -z*scale for an integer zero code z in [0, 15]",
                      (unsigned long long)r, (unsigned long long)g, double(f16_to_f32(S)), double(f16_to_f32(M)));
        fail(job.where(t), std::string(buf) + "; compressed-tensors cannot express this grid exactly (export --to hf writes the values)");
      }
      const uint8_t zc = z ? *z : 0;  // a group with no stored value decodes to 0 with any zero point
      zs[r * groups + g] = zc;
      for (uint64_t c = g * G; c < (g + 1) * G; ++c)
        if (!present[c]) codes[c] = zc;
      // (q − z)·S must be exact in f16 arithmetic too, for readers that compute in the scale's dtype.
      const float s = f16_to_f32(S);
      for (int d = -int(zc); d <= 15 - int(zc) && p.scales_f16; ++d) {
        const float x = float(d) * s;
        if (f16_to_f32(f32_to_f16(x)) != x) p.scales_f16 = false;
      }
    }
    if (!want_bytes) continue;
    for (uint64_t w = 0; w < words_per_row; ++w) {
      uint32_t word = 0;
      for (uint64_t j = 0; j < 8 && w * 8 + j < cols; ++j) word |= uint32_t(codes[w * 8 + j]) << (4 * j);
      put_le32(p.packed, r * words_per_row + w, word);
    }
  }
  if (!want_bytes) return p;
  // weight_scale [rows, groups] in f16 (Endor's own values) or f32; weight_zero_point
  // [ceil(rows / 8), groups]: 8 consecutive rows per int32 word.
  p.scales.resize(rows * groups * (p.scales_f16 ? 2 : 4));
  for (uint64_t i = 0; i < rows * groups; ++i) {
    const uint16_t S = v.group_scales()[i];
    if (p.scales_f16) {
      std::memcpy(&p.scales[2 * i], &S, 2);
    } else {
      const float s = f16_to_f32(S);
      std::memcpy(&p.scales[4 * i], &s, 4);
    }
  }
  const uint64_t zp_rows = (rows + 7) / 8;
  p.zero_points.assign(zp_rows * groups * 4, 0);
  for (uint64_t w = 0; w < zp_rows; ++w)
    for (uint64_t g = 0; g < groups; ++g) {
      uint32_t word = 0;
      for (uint64_t j = 0; j < 8 && w * 8 + j < rows; ++j) word |= uint32_t(zs[(w * 8 + j) * groups + g]) << (4 * j);
      put_le32(p.zero_points, w * groups + g, word);
    }
  return p;
}

// int8: weight_packed [rows, ceil(cols / 4)] (q + 128 in bytes, lowest first), weight_scale [rows, 1] f32;
// int8g: the same codes, weight_scale [rows, groups] f32 (its f16 scales widened, exactly).
std::pair<std::vector<uint8_t>, std::vector<uint8_t>> pack_int8(const ExportJob& job, const TensorInfo& t) {
  const TensorView v = job.reader.tensor(t);
  validate_bitmap(v, job.where(t));
  const TensorLayout& L = v.layout;
  const uint64_t words_per_row = (L.cols + 3) / 4;
  const uint64_t n_scales = L.value_type == ValueType::I8G ? L.rows * L.groups_per_row : L.rows;
  std::vector<uint8_t> packed(L.rows * words_per_row * 4, 0), scales(n_scales * 4);
  std::vector<int32_t> codes;
  std::vector<uint8_t> present;
  for (uint64_t r = 0; r < L.rows; ++r) {
    row_codes(v, r, 0, codes, present);
    for (uint64_t c = 0; c < L.cols; ++c) packed[r * words_per_row * 4 + c] = uint8_t(codes[c] + 128);
  }
  if (L.value_type == ValueType::I8G) {
    for (uint64_t i = 0; i < n_scales; ++i) {
      const float s = f16_to_f32(v.group_scales()[i]);
      std::memcpy(&scales[4 * i], &s, 4);
    }
  } else {
    std::memcpy(scales.data(), v.row_scales(), L.rows * 4);
  }
  return {std::move(packed), std::move(scales)};
}

void check_int8_scales(const ExportJob& job, const TensorInfo& t) {
  const TensorView v = job.reader.tensor(t);
  const TensorLayout& L = v.layout;
  if (L.value_type == ValueType::I8G) {
    if (L.cols % L.group_size != 0)
      fail(job.where(t), std::to_string(L.cols) + " input columns are not a multiple of its int8g group size " +
                             std::to_string(L.group_size) +
                             ": compressed-tensors' group strategy needs whole groups (export --to hf writes the values)");
    for (uint64_t i = 0; i < L.rows * L.groups_per_row; ++i)
      if (v.group_scales()[i] & 0x8000)
        fail(job.where(t), "row " + std::to_string(i / L.groups_per_row) +
                               " has a negative int8g scale; its zeros would decode as -0 in compressed-tensors");
    return;
  }
  for (uint64_t r = 0; r < L.rows; ++r)
    if (std::signbit(v.row_scales()[r]))
      fail(job.where(t), "row " + std::to_string(r) + " has a negative int8 scale; its zeros would decode as -0 in compressed-tensors");
}

std::vector<uint8_t> shape_bytes(uint64_t rows, uint64_t cols) {
  std::vector<uint8_t> out(16);
  const int64_t v[2] = {int64_t(rows), int64_t(cols)};
  std::memcpy(out.data(), v, 16);
  return out;
}

bool is_layer_linear(const TensorInfo& t) { return classify_tensor(t.name, t.shape).prunable; }

std::string module_of(const std::string& weight_name) { return weight_name.substr(0, weight_name.size() - 7); }

}  // namespace

void export_compressed_tensors(ExportJob& job) {
  const Manifest& m = job.reader.manifest();
  std::vector<SafetensorsItem> items;
  // Scheme ("int4 g128", "int8") -> module names; Linear modules left in floats.
  std::map<std::string, std::vector<std::string>> schemes;
  std::map<std::string, std::pair<int, uint32_t>> scheme_args;
  std::vector<std::string> float_linears;
  for (const TensorInfo& t : m.tensors) {
    const TensorInfo* tp = &t;
    const bool linear = is_layer_linear(t);
    if (linear && t.value_type == ValueType::I4) {
      const PackedInt4 probe = pack_int4(job, t, false);  // checks the grid before anything is written
      const std::string mod = module_of(t.name);
      const std::string key = "int4 g" + std::to_string(t.group_size);
      schemes[key].push_back(mod);
      scheme_args[key] = {4, t.group_size};
      const uint64_t rows = t.shape[0], cols = t.numel() / rows, groups = cols / t.group_size;
      // The four parts are written one after another: pack once, keep it until the last is taken.
      auto cache = std::make_shared<std::optional<PackedInt4>>();
      auto parts = [&job, tp, cache]() -> PackedInt4& {
        if (!*cache) *cache = pack_int4(job, *tp, true);
        return **cache;
      };
      items.push_back({mod + ".weight_packed", "I32", {rows, (cols + 7) / 8}, rows * ((cols + 7) / 8) * 4,
                       [parts] { return std::move(parts().packed); }});
      items.push_back({mod + ".weight_scale", probe.scales_f16 ? "F16" : "F32", {rows, groups},
                       rows * groups * (probe.scales_f16 ? 2 : 4), [parts] { return std::move(parts().scales); }});
      items.push_back({mod + ".weight_shape", "I64", {2}, 16, [rows, cols] { return shape_bytes(rows, cols); }});
      items.push_back({mod + ".weight_zero_point", "I32", {(rows + 7) / 8, groups}, (rows + 7) / 8 * groups * 4, [parts, cache] {
                         std::vector<uint8_t> z = std::move(parts().zero_points);
                         cache->reset();
                         return z;
                       }});
      job.summary.quantized_tensors += 1;
      continue;
    }
    if (linear && (t.value_type == ValueType::I8 || t.value_type == ValueType::I8G)) {
      check_int8_scales(job, t);
      const std::string mod = module_of(t.name);
      const bool grouped = t.value_type == ValueType::I8G;
      const std::string key = grouped ? "int8 g" + std::to_string(t.group_size) : "int8";
      schemes[key].push_back(mod);
      scheme_args[key] = {8, grouped ? t.group_size : 0};
      const uint64_t rows = t.shape[0], cols = t.numel() / rows, n_scale_cols = grouped ? cols / t.group_size : 1;
      items.push_back({mod + ".weight_packed", "I32", {rows, (cols + 3) / 4}, rows * ((cols + 3) / 4) * 4,
                       [&job, tp] { return pack_int8(job, *tp).first; }});
      items.push_back({mod + ".weight_scale", "F32", {rows, n_scale_cols}, rows * n_scale_cols * 4,
                       [&job, tp] { return pack_int8(job, *tp).second; }});
      items.push_back({mod + ".weight_shape", "I64", {2}, 16, [rows, cols] { return shape_bytes(rows, cols); }});
      job.summary.quantized_tensors += 1;
      continue;
    }
    // Decoded, as the hf target writes it.
    if (t.shape.size() == 2 && t.name.size() > 7 && t.name.compare(t.name.size() - 7, 7, ".weight") == 0 &&
        !classify_tensor(t.name, t.shape).embedding)
      float_linears.push_back(module_of(t.name));
    items.push_back(decoded_item(job, t, export_float_type(job, t)));
  }
  if (schemes.empty())
    fail(job.where(), "no decoder Linear is stored as int8, int8g or int4, so there is nothing for compressed-tensors to keep packed "
                      "(export --to hf writes this model)");
  const std::string lm_head = module_of(ModelTensors(job.model).get(Module::LmHead).name);
  if (std::find(float_linears.begin(), float_linears.end(), lm_head) == float_linears.end()) float_linears.push_back(lm_head);

  nlohmann::json groups = nlohmann::json::object();
  int n = 0;
  for (const auto& [key, modules] : schemes) {
    const auto [bits, group_size] = scheme_args[key];
    // int8 per row: symmetric, one scale per output channel; int8g: symmetric groups; int4: groups
    // with zero points.
    nlohmann::json weights = {{"num_bits", bits}, {"type", "int"}, {"symmetric", bits == 8},
                              {"strategy", group_size == 0 ? "channel" : "group"},
                              {"group_size", group_size == 0 ? nlohmann::json(nullptr) : nlohmann::json(group_size)},
                              {"dynamic", false}, {"actorder", nullptr}, {"block_structure", nullptr},
                              {"observer", "minmax"}, {"observer_kwargs", nlohmann::json::object()}};
    groups["group_" + std::to_string(n++)] = {
        {"targets", schemes.size() == 1 ? nlohmann::json::array({"Linear"}) : nlohmann::json(modules)},
        {"weights", weights}, {"input_activations", nullptr}, {"output_activations", nullptr},
        {"format", "pack-quantized"}};
  }
  nlohmann::json config = m.config;
  config["quantization_config"] = {{"version", kFormatVersion},
                                   {"quant_method", "compressed-tensors"},
                                   {"format", "pack-quantized"},
                                   {"quantization_status", "compressed"},
                                   {"config_groups", groups},
                                   {"ignore", float_linears},
                                   {"kv_cache_scheme", nullptr},
                                   {"global_compression_ratio", nullptr},
                                   {"sparsity_config", nlohmann::json::object()},
                                   {"transform_config", nlohmann::json::object()}};
  if (std::any_of(m.tensors.begin(), m.tensors.end(), [](const TensorInfo& t) { return t.encoding == Encoding::Bitmap; }))
    job.summary.notes.push_back("pruned weights are written as explicit zeros: compressed-tensors and vLLM keep no sparsity");
  job.summary.tensors = items.size();
  write_hf_side_files(job, config);
  write_safetensors_model(job, items);
}

}  // namespace endor::export_detail
