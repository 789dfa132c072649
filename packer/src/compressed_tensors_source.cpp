// compressed-tensors `pack-quantized` Linears as checkpoint tensors (compressed_tensors_source.h).
// Layout, as compressed-tensors 0.20 writes it: element i of a packed row at bits [i·b, (i+1)·b) of
// the row's int32 words (little-endian), stored as the signed code + 2^(b−1); weight_zero_point
// packed the same way along the output dimension ([ceil(rows·b/32), groups]).
#include "compressed_tensors_source.h"

#include <cstring>
#include <regex>

#include "detail.h"

namespace endor {

using packer_detail::fail;

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() > tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

uint32_t word_at(const uint8_t* base, uint64_t i) {
  uint32_t w;
  std::memcpy(&w, base + 4 * i, 4);
  return w;
}

// Field i (b bits) of a run of int32 words; b is 4 or 8, so a field never straddles two words.
uint32_t field(const uint8_t* words, uint64_t i, int b) {
  const uint64_t bit = i * uint64_t(b);
  return (word_at(words, bit / 32) >> (bit % 32)) & ((1u << b) - 1);
}

float scale_at(const SafetensorsEntry& e, const uint8_t* data, uint64_t i) {
  float f = 0;
  convert_to_f32(e.dtype, data + i * dtype_bytes(e.dtype), 1, &f);
  return f;
}

std::string shape_text(const std::vector<uint64_t>& s) {
  std::string t = "[";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + "]";
}

}  // namespace

uint64_t PackedLinear::stored_bytes() const {
  uint64_t n = packed->end - packed->begin + scale->end - scale->begin + shape->end - shape->begin;
  if (zero_point) n += zero_point->end - zero_point->begin;
  return n;
}

void PackedLinear::read_rows(uint64_t r0, uint64_t r1, float* out) const {
  const uint8_t* pk = packed_file->data(*packed);
  const uint8_t* sc = scale_file->data(*scale);
  const uint8_t* zp = zero_point ? zero_point_file->data(*zero_point) : nullptr;
  const uint64_t words_per_row = (cols * uint64_t(bits) + 31) / 32, groups = cols / group_size;
  const int32_t offset = 1 << (bits - 1);
  for (uint64_t r = r0; r < r1; ++r) {
    const uint8_t* row = pk + r * words_per_row * 4;
    for (uint64_t g = 0; g < groups; ++g) {
      const float s = scale_at(*scale, sc, per_tensor ? 0 : r * groups + g);
      int32_t z = 0;
      if (zp) z = int32_t(word_at(zp, (r * uint64_t(bits) / 32) * groups + g) >> ((r * uint64_t(bits)) % 32) & ((1u << bits) - 1)) - offset;
      for (uint64_t c = g * group_size; c < (g + 1) * group_size; ++c) {
        const int32_t q = int32_t(field(row, c, bits)) - offset;
        out[(r - r0) * cols + c] = float(q - z) * s;
      }
    }
  }
}

std::unique_ptr<CompressedTensorsSource> CompressedTensorsSource::from_config(const nlohmann::json& config, const std::string& where) {
  if (!config.is_object() || !config.contains("quantization_config")) return nullptr;
  const nlohmann::json& qc = config["quantization_config"];
  if (!qc.is_object() || qc.value("quant_method", "") != "compressed-tensors") return nullptr;
  auto src = std::unique_ptr<CompressedTensorsSource>(new CompressedTensorsSource());
  const std::string format = qc.value("format", "pack-quantized");
  if (!qc.contains("config_groups") || !qc["config_groups"].is_object() || qc["config_groups"].empty())
    fail(where, "quantization_config (compressed-tensors) has no config_groups");
  for (auto it = qc["config_groups"].begin(); it != qc["config_groups"].end(); ++it) {
    const nlohmann::json& g = it.value();
    const std::string what = "quantization_config group '" + it.key() + "'";
    if (!g.is_object() || !g.contains("weights") || !g["weights"].is_object()) fail(where, what + " quantizes no weights");
    const std::string gf = g.contains("format") && g["format"].is_string() ? g["format"].get<std::string>() : format;
    if (gf != "pack-quantized")
      fail(where, what + ": format '" + packer_detail::printable(gf) + "' is not read (only pack-quantized)");
    if (g.contains("input_activations") && !g["input_activations"].is_null())
      fail(where, what + " quantizes activations, which Endor does not model");
    const nlohmann::json& w = g["weights"];
    Scheme s;
    s.bits = w.value("num_bits", 0);
    s.strategy = w.value("strategy", std::string());
    s.symmetric = w.value("symmetric", true);
    if (w.value("type", "int") != "int" || (s.bits != 4 && s.bits != 8))
      fail(where, what + ": only int4 and int8 weights are read");
    if (s.strategy == "group") {
      if (!w.contains("group_size") || !w["group_size"].is_number_unsigned() || w["group_size"].get<uint64_t>() == 0)
        fail(where, what + ": group strategy without a positive group_size");
      s.group_size = w["group_size"].get<uint64_t>();
    } else if (s.strategy != "channel" && !(s.strategy == "tensor" && s.symmetric)) {
      fail(where, what + ": strategy '" + packer_detail::printable(s.strategy) + "' is not read (group, channel, symmetric tensor)");
    }
    if (!g.contains("targets") || !g["targets"].is_array()) fail(where, what + " has no targets");
    for (const nlohmann::json& t : g["targets"])
      if (t.is_string()) s.targets.push_back(t.get<std::string>());
    src->schemes_.push_back(std::move(s));
  }
  if (qc.contains("ignore") && qc["ignore"].is_array())
    for (const nlohmann::json& t : qc["ignore"])
      if (t.is_string()) src->ignore_.push_back(t.get<std::string>());
  return src;
}

bool CompressedTensorsSource::take(const SafetensorsEntry& e, const SafetensorsFile& file, uint32_t shard) {
  for (const char* part : {".weight_packed", ".weight_scale", ".weight_zero_point", ".weight_shape"})
    if (ends_with(e.name, part)) {
      const std::string module = e.name.substr(0, e.name.size() - std::strlen(part));
      parts_[module][part + 1] = {&e, &file};
      if (std::string(part) == ".weight_packed") shard_of_[module] = shard;
      return true;
    }
  return false;
}

const std::vector<std::unique_ptr<PackedLinear>>& CompressedTensorsSource::finish(const std::string& where) {
  auto matches = [](const std::string& target, const std::string& module) {
    if (target == "Linear" || target == module) return true;
    if (target.rfind("re:", 0) == 0) {
      try {
        return std::regex_search(module, std::regex("^(?:" + target.substr(3) + ")"));
      } catch (const std::regex_error&) {
        return false;
      }
    }
    return false;
  };
  for (const auto& [module, parts] : parts_) {
    const std::string what = "compressed-tensors module '" + module + "'";
    auto part = [&](const char* p) -> std::pair<const SafetensorsEntry*, const SafetensorsFile*> {
      const auto it = parts.find(p);
      return it == parts.end() ? std::pair<const SafetensorsEntry*, const SafetensorsFile*>{nullptr, nullptr} : it->second;
    };
    const auto [packed, packed_file] = part("weight_packed");
    const auto [scale, scale_file] = part("weight_scale");
    const auto [zp, zp_file] = part("weight_zero_point");
    const auto [shape, shape_file] = part("weight_shape");
    if (!packed || !scale || !shape) fail(where, what + " lacks weight_packed, weight_scale or weight_shape");
    const Scheme* scheme = nullptr;
    bool ignored = false;
    for (const std::string& ig : ignore_) ignored |= matches(ig, module) && ig != "Linear";
    for (const Scheme& s : schemes_) {
      for (const std::string& t : s.targets)
        if (matches(t, module)) scheme = &s;
      if (scheme) break;
    }
    if (!scheme || ignored) fail(where, what + " is packed but no quantization_config group targets it");
    auto L = std::make_unique<PackedLinear>();
    L->module = module;
    L->bits = scheme->bits;
    L->symmetric = scheme->symmetric;
    L->packed = packed;
    L->packed_file = packed_file;
    L->scale = scale;
    L->scale_file = scale_file;
    L->zero_point = zp;
    L->zero_point_file = zp_file;
    L->shape = shape;
    L->shard = shard_of_[module];
    // weight_shape: [rows, cols] as I64 or I32.
    const uint8_t* sd = shape_file->data(*shape);
    if (shape->numel() != 2 || (shape->dtype != SafetensorsDType::I64 && shape->dtype != SafetensorsDType::I32))
      fail(where, what + ": weight_shape is not two integers");
    int64_t dims[2];
    for (int i = 0; i < 2; ++i) {
      if (shape->dtype == SafetensorsDType::I64) std::memcpy(&dims[i], sd + 8 * i, 8);
      else {
        int32_t d32;
        std::memcpy(&d32, sd + 4 * i, 4);
        dims[i] = d32;
      }
      if (dims[i] <= 0 || dims[i] > (int64_t(1) << 32)) fail(where, what + ": weight_shape holds a dimension out of range");
    }
    L->rows = uint64_t(dims[0]);
    L->cols = uint64_t(dims[1]);
    L->per_tensor = scheme->strategy == "tensor";
    L->group_size = scheme->strategy == "group" ? scheme->group_size : L->cols;
    if (L->cols % L->group_size != 0)
      fail(where, what + ": " + std::to_string(L->cols) + " columns are not a multiple of group_size " + std::to_string(L->group_size));
    const uint64_t groups = L->cols / L->group_size;
    const std::vector<uint64_t> want_packed = {L->rows, (L->cols * uint64_t(L->bits) + 31) / 32};
    if (packed->dtype != SafetensorsDType::I32 || packed->shape != want_packed)
      fail(where, what + ": weight_packed is " + to_string(packed->dtype) + " " + shape_text(packed->shape) + ", expected I32 " + shape_text(want_packed));
    const std::vector<uint64_t> want_scale = L->per_tensor ? std::vector<uint64_t>{1} : std::vector<uint64_t>{L->rows, groups};
    if ((scale->dtype != SafetensorsDType::F16 && scale->dtype != SafetensorsDType::BF16 && scale->dtype != SafetensorsDType::F32) ||
        scale->numel() != (L->per_tensor ? 1 : L->rows * groups))
      fail(where, what + ": weight_scale is " + to_string(scale->dtype) + " " + shape_text(scale->shape) + ", expected a float " + shape_text(want_scale));
    if (!L->symmetric) {
      const std::vector<uint64_t> want_zp = {(L->rows * uint64_t(L->bits) + 31) / 32, groups};
      if (!zp || zp->dtype != SafetensorsDType::I32 || zp->shape != want_zp)
        fail(where, what + ": an asymmetric scheme needs weight_zero_point I32 " + shape_text(want_zp));
    } else {
      L->zero_point = nullptr;  // a symmetric scheme's zero point is 0 (compressed-tensors drops it)
    }
    linears_.push_back(std::move(L));
  }
  return linears_;
}

}  // namespace endor
