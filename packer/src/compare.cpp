// compare: per tensor, the dense bytes of the (pruned) tensor, Endor's bytes, zstd of the dense
// bytes and of the Endor bytes at several levels, and how fast each decodes back to dense.
#include <sys/stat.h>
#include <zstd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>

#include "detail.h"
#include "endor/checkpoint.h"
#include "endor/compare.h"
#include "endor/gguf.h"
#include "endor/pack.h"
#include "endor/prune.h"
#ifdef ENDOR_PACKER_HAVE_KERNELS
#include "endor/kernels.h"
#endif
#include <omp.h>

namespace endor {

using packer_detail::base_name;
using packer_detail::fail;

namespace {

// 64-byte aligned bytes (kernels may assume the alignment a container gives).
struct AlignedBytes {
  uint8_t* p = nullptr;
  uint64_t n = 0;
  explicit AlignedBytes(uint64_t bytes) : n(bytes) {
    p = static_cast<uint8_t*>(std::aligned_alloc(64, std::max<uint64_t>(64, (bytes + 63) / 64 * 64)));
    if (!p) throw Error("out of memory allocating " + std::to_string(bytes) + " bytes");
  }
  ~AlignedBytes() { std::free(p); }
  AlignedBytes(const AlignedBytes&) = delete;
  AlignedBytes& operator=(const AlignedBytes&) = delete;
};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Best single-run time of f after one warm-up run, repeating until min_total_s has passed
// (at least 3 timed runs).
template <class F>
double best_time(F&& f, double min_total_s) {
  f();
  double best = std::numeric_limits<double>::infinity(), total = 0;
  for (int reps = 0; reps < 3 || (total < min_total_s && reps < 10000); ++reps) {
    const double t0 = now_s();
    f();
    const double dt = now_s() - t0;
    best = std::min(best, dt);
    total += dt;
  }
  return best;
}

// Decodes a tensor to dense: 16-bit bits for f16/bf16, f32 otherwise.
void decode_dense(const TensorView& v, void* out, int n_threads) {
  const bool u16 = v.layout.value_type == ValueType::F16 || v.layout.value_type == ValueType::BF16;
#ifdef ENDOR_PACKER_HAVE_KERNELS
  if (u16)
    cpu::decode_u16(v, static_cast<uint16_t*>(out), n_threads);
  else
    cpu::decode_f32(v, static_cast<float*>(out), n_threads);
#else
  // Fallback until the kernels library is available: the reference decoder, rows in parallel.
  const uint64_t rows = v.layout.rows, cols = v.layout.cols;
  const int nt = n_threads > 0 ? n_threads : omp_get_max_threads();
  std::vector<float> tmp(u16 ? rows * cols : 0);
  float* dst = u16 ? tmp.data() : static_cast<float*>(out);
#pragma omp parallel for num_threads(nt) schedule(dynamic, 16)
  for (int64_t r = 0; r < int64_t(rows); ++r) decode_rows_f32(v, uint64_t(r), uint64_t(r) + 1, dst + uint64_t(r) * cols);
  if (u16) {
    uint16_t* o = static_cast<uint16_t*>(out);
    for (uint64_t i = 0; i < rows * cols; ++i)
      o[i] = v.layout.value_type == ValueType::F16 ? f32_to_f16(tmp[i]) : f32_to_bf16(tmp[i]);
  }
#endif
}

uint64_t decoded_bytes(const TensorLayout& L) {
  const bool u16 = L.value_type == ValueType::F16 || L.value_type == ValueType::BF16;
  return L.rows * L.cols * (u16 ? 2 : 4);
}

// The dense blob of the same tensor in its value type (what a dense file would hold).
std::vector<uint8_t> dense_blob(const TensorView& v, const TensorInfo& info, int n_threads) {
  if (v.layout.encoding == Encoding::Dense) return std::vector<uint8_t>(v.data, v.data + v.layout.total_bytes);
  AlignedBytes out(decoded_bytes(v.layout));
  decode_dense(v, out.p, n_threads);
  if (v.layout.value_type == ValueType::F16 || v.layout.value_type == ValueType::BF16)
    return std::vector<uint8_t>(out.p, out.p + out.n);
  EncodeOptions eo;
  eo.encoding = Encoding::Dense;
  eo.value_type = v.layout.value_type;
  eo.group_size = info.group_size ? info.group_size : kDefaultGroupSize;
  return encode_tensor(reinterpret_cast<const float*>(out.p), info.shape, eo).bytes;
}

struct Zstd {
  ZSTD_CCtx* c = ZSTD_createCCtx();
  ZSTD_DCtx* d = ZSTD_createDCtx();
  ~Zstd() {
    ZSTD_freeCCtx(c);
    ZSTD_freeDCtx(d);
  }
  std::vector<uint8_t> compress(const uint8_t* src, uint64_t n, int level) {
    std::vector<uint8_t> dst(ZSTD_compressBound(n));
    const size_t r = ZSTD_compressCCtx(c, dst.data(), dst.size(), src, n, level);
    if (ZSTD_isError(r)) throw Error(std::string("zstd compression failed: ") + ZSTD_getErrorName(r));
    dst.resize(r);
    return dst;
  }
  void decompress(const std::vector<uint8_t>& src, uint8_t* dst, uint64_t n) {
    const size_t r = ZSTD_decompressDCtx(d, dst, n, src.data(), src.size());
    if (ZSTD_isError(r) || r != n) throw Error("zstd round trip failed");
  }
};

// Everything measured for one encoded tensor.
CompareRow measure(const TensorInfo& info, const TensorView& v, const CompareOptions& o, Zstd& z) {
  CompareRow row;
  row.name = info.name;
  row.linear = classify_tensor(info.name, info.shape).prunable;
  row.encoding = to_string(info.encoding);
  row.value_type = to_string(info.dtype());
  row.numel = info.numel();
  row.endor_bytes = v.layout.total_bytes;
  const std::vector<uint8_t> dense = dense_blob(v, info, o.n_threads);
  row.dense_bytes = dense.size();
  AlignedBytes out(std::max(decoded_bytes(v.layout), row.dense_bytes));
  row.endor_mt_s = best_time([&] { decode_dense(v, out.p, o.n_threads); }, o.min_time_s);
  row.endor_1t_s = best_time([&] { decode_dense(v, out.p, 1); }, o.min_time_s);
  for (int level : o.zstd_levels) {
    const std::vector<uint8_t> zd = z.compress(dense.data(), dense.size(), level);
    row.zstd_bytes.push_back(zd.size());
    row.zstd_s.push_back(best_time([&] { z.decompress(zd, out.p, dense.size()); }, o.min_time_s));
    if (std::memcmp(out.p, dense.data(), dense.size()) != 0) throw Error("zstd round trip differs for " + info.name);
    row.endor_zstd_bytes.push_back(z.compress(v.data, v.layout.total_bytes, level).size());
  }
  return row;
}

void add_to_total(CompareRow& t, const CompareRow& r) {
  t.numel += r.numel;
  t.dense_bytes += r.dense_bytes;
  t.endor_bytes += r.endor_bytes;
  t.endor_mt_s += r.endor_mt_s;
  t.endor_1t_s += r.endor_1t_s;
  t.zstd_bytes.resize(r.zstd_bytes.size());
  t.endor_zstd_bytes.resize(r.endor_zstd_bytes.size());
  t.zstd_s.resize(r.zstd_s.size());
  for (size_t i = 0; i < r.zstd_bytes.size(); ++i) {
    t.zstd_bytes[i] += r.zstd_bytes[i];
    t.endor_zstd_bytes[i] += r.endor_zstd_bytes[i];
    t.zstd_s[i] += r.zstd_s[i];
  }
}

std::string describe(const nlohmann::json& prov) {
  if (!prov.is_object()) return "";
  std::ostringstream o;
  const std::string method = prov.value("method", std::string("none"));
  if (method == "none") {
    o << "dense";
  } else {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.0f%%", 100.0 * prov.value("sparsity", 0.0));
    o << method << " " << buf << " " << prov.value("pattern", std::string(""));
    if (prov.value("pattern", std::string("")) == "unstructured") o << " (" << prov.value("scope", std::string("")) << ")";
  }
  const std::string quant = prov.value("quant", std::string("none"));
  if (quant != "none") {
    o << ", " << quant;
    if (prov.contains("group_size") && prov["group_size"].is_number()) o << " g" << prov["group_size"].dump();
  }
  o << ", dtype " << prov.value("dtype", std::string("source"));
  return o.str();
}

double gbps(uint64_t bytes, double s) { return s > 0 ? double(bytes) / s / 1e9 : 0.0; }
double pct(uint64_t a, uint64_t b) { return b ? 100.0 * double(a) / double(b) : 0.0; }

// A row's decode speeds in GB/s (Endor multithreaded and single-threaded by pair_fmt, then zstd's per
// level by one_fmt): the text table and the CSV print the same numbers in their own formats.
void append_speeds(std::ostream& o, const CompareRow& row, const char* pair_fmt, const char* one_fmt) {
  char buf[64];
  std::snprintf(buf, sizeof buf, pair_fmt, gbps(row.dense_bytes, row.endor_mt_s), gbps(row.dense_bytes, row.endor_1t_s));
  o << buf;
  for (double s : row.zstd_s) {
    std::snprintf(buf, sizeof buf, one_fmt, gbps(row.dense_bytes, s));
    o << buf;
  }
}

}  // namespace

CompareReport compare_sizes(const std::string& input, const PackOptions& po, const CompareOptions& co,
                            const PackCallbacks& cb) {
  if (co.zstd_levels.empty()) throw Error("--zstd-levels needs at least one level");
  for (int l : co.zstd_levels)
    if (l < ZSTD_minCLevel() || l > ZSTD_maxCLevel() || l == 0)
      throw Error("zstd level " + std::to_string(l) + " is outside [1, " + std::to_string(ZSTD_maxCLevel()) + "]");
  CompareReport rep;
  rep.input = input;
  rep.levels = co.zstd_levels;
  rep.threads = co.n_threads > 0 ? co.n_threads : omp_get_max_threads();
  Zstd z;
  if (!z.c || !z.d) throw Error("cannot create zstd contexts");
  PackProgress progress;
  progress.stage = "compare";

  struct stat st {};
  if (::stat(input.c_str(), &st) != 0) fail(input, "no such file or folder");
  if (S_ISDIR(st.st_mode) || is_gguf_file(input)) {  // a checkpoint: folder or GGUF
    std::unique_ptr<Pruner> pruner;
    if (po.prune.active()) pruner = make_pruner(po.prune);
    if (po.dtype && !is_float(*po.dtype))
      throw Error("--dtype must be f16, bf16 or f32");
    const std::unique_ptr<Checkpoint> ck = Checkpoint::open(input);
    rep.description = base_name(input) + ": " + describe(make_provenance(input, po));
    progress.tensors_total = ck->tensors().size();
    progress.bytes_total = ck->source_bytes();
    for (const CheckpointTensor& t : ck->tensors()) {
      progress.tensor = t.name;
      const TensorTreatment tr = plan_treatment(t, po);
      PreparedTensor p = prepare_tensor(*ck, t, tr, pruner.get(), po);
      TensorView v;
      v.info = &p.info;
      v.layout = compute_layout(p.info.shape, p.info.encoding, p.info.value_type, p.info.group_size, p.info.nnz, p.info.int4_params);
      AlignedBytes blob(p.n_bytes);
      std::memcpy(blob.p, p.data, p.n_bytes);
      v.data = blob.p;
      p.owned = std::vector<uint8_t>();
      ck->release(t);
      rep.rows.push_back(measure(p.info, v, co, z));
      progress.tensors_done += 1;
      progress.bytes_done += t.source_bytes();
      if (cb.on_progress) cb.on_progress(progress);
    }
  } else {
    const std::unique_ptr<ContainerReader> reader = ContainerReader::open(input);
    const Manifest& m = reader->manifest();
    rep.description = base_name(input) + ": " + describe(m.provenance);
    progress.tensors_total = m.tensors.size();
    for (const TensorInfo& info : m.tensors) {
      progress.tensor = info.name;
      const TensorView v = reader->tensor(info);
      validate_bitmap(v, input + ": tensor '" + info.name + "'");
      rep.rows.push_back(measure(info, v, co, z));
      progress.tensors_done += 1;
      if (cb.on_progress) cb.on_progress(progress);
    }
  }
  rep.total.name = "TOTAL";
  rep.linears.name = "TOTAL decoder Linears";
  for (const CompareRow& r : rep.rows) {
    add_to_total(rep.total, r);
    if (r.linear) add_to_total(rep.linears, r);
  }
  return rep;
}

std::string render_compare_table(const CompareReport& r) {
  std::ostringstream o;
  size_t name_w = 5;
  for (const CompareRow& row : r.rows) name_w = std::max(name_w, row.name.size());
  char buf[256];
  o << r.description << "\n";
  o << "sizes in % of the dense tensor in its stored value type; decode in GB/s of dense output ("
    << r.threads << " threads where marked)\n\n";
  std::snprintf(buf, sizeof buf, "%-*s  %-13s %12s %7s", int(name_w), "tensor", "encoding", "dense", "endor");
  o << buf;
  for (int l : r.levels) {
    std::snprintf(buf, sizeof buf, " %8s", ("zstd-" + std::to_string(l)).c_str());
    o << buf;
  }
  for (int l : r.levels) {
    std::snprintf(buf, sizeof buf, " %8s", ("e+zstd" + std::to_string(l)).c_str());
    o << buf;
  }
  std::snprintf(buf, sizeof buf, " | %8s %8s", ("endor" + std::to_string(r.threads) + "t").c_str(), "endor1t");
  o << buf;
  for (int l : r.levels) {
    std::snprintf(buf, sizeof buf, " %8s", ("zstd-" + std::to_string(l)).c_str());
    o << buf;
  }
  o << "\n";
  auto line = [&](const CompareRow& row) {
    std::snprintf(buf, sizeof buf, "%-*s  %-13s %12llu %6.2f%%", int(name_w), row.name.c_str(),
                  row.encoding.empty() ? "" : (row.encoding + "/" + row.value_type).c_str(),
                  (unsigned long long)row.dense_bytes, pct(row.endor_bytes, row.dense_bytes));
    o << buf;
    for (uint64_t b : row.zstd_bytes) {
      std::snprintf(buf, sizeof buf, " %7.2f%%", pct(b, row.dense_bytes));
      o << buf;
    }
    for (uint64_t b : row.endor_zstd_bytes) {
      std::snprintf(buf, sizeof buf, " %7.2f%%", pct(b, row.dense_bytes));
      o << buf;
    }
    append_speeds(o, row, " | %8.2f %8.2f", " %8.2f");
    o << "\n";
  };
  for (const CompareRow& row : r.rows) line(row);
  o << std::string(name_w, '-') << "\n";
  if (r.linears.numel > 0) line(r.linears);
  line(r.total);
  return o.str();
}

std::string render_compare_csv(const CompareReport& r) {
  std::ostringstream o;
  o << "tensor,encoding,value_type,numel,dense_bytes,endor_bytes";
  for (int l : r.levels) o << ",zstd" << l << "_bytes";
  for (int l : r.levels) o << ",endor_zstd" << l << "_bytes";
  o << ",endor_mt_gbps,endor_1t_gbps";
  for (int l : r.levels) o << ",zstd" << l << "_gbps";
  o << "\n";
  auto line = [&](const CompareRow& row) {
    o << row.name << "," << row.encoding << "," << row.value_type << "," << row.numel << "," << row.dense_bytes << ","
      << row.endor_bytes;
    for (uint64_t b : row.zstd_bytes) o << "," << b;
    for (uint64_t b : row.endor_zstd_bytes) o << "," << b;
    append_speeds(o, row, ",%.4f,%.4f", ",%.4f");
    o << "\n";
  };
  for (const CompareRow& row : r.rows) line(row);
  if (r.linears.numel > 0) line(r.linears);
  line(r.total);
  return o.str();
}

nlohmann::json compare_to_json(const CompareReport& r) {
  auto row_json = [&](const CompareRow& row) {
    nlohmann::json j = {{"name", row.name},
                        {"encoding", row.encoding},
                        {"value_type", row.value_type},
                        {"numel", row.numel},
                        {"dense_bytes", row.dense_bytes},
                        {"endor_bytes", row.endor_bytes},
                        {"endor_ratio", row.dense_bytes ? double(row.endor_bytes) / double(row.dense_bytes) : 0.0},
                        {"endor_mt_gbps", gbps(row.dense_bytes, row.endor_mt_s)},
                        {"endor_1t_gbps", gbps(row.dense_bytes, row.endor_1t_s)}};
    nlohmann::json zstd = nlohmann::json::array();
    for (size_t i = 0; i < r.levels.size() && i < row.zstd_bytes.size(); ++i)
      zstd.push_back({{"level", r.levels[i]},
                      {"bytes", row.zstd_bytes[i]},
                      {"ratio", row.dense_bytes ? double(row.zstd_bytes[i]) / double(row.dense_bytes) : 0.0},
                      {"endor_zstd_bytes", row.endor_zstd_bytes[i]},
                      {"decode_gbps", gbps(row.dense_bytes, row.zstd_s[i])}});
    j["zstd"] = zstd;
    return j;
  };
  nlohmann::json j;
  j["input"] = r.input;
  j["description"] = r.description;
  j["threads"] = r.threads;
  j["zstd_levels"] = r.levels;
  j["speed_unit"] = "GB/s of dense output (dense_bytes / best decode time)";
  j["tensors"] = nlohmann::json::array();
  for (const CompareRow& row : r.rows) j["tensors"].push_back(row_json(row));
  j["total"] = row_json(r.total);
  j["total_linears"] = row_json(r.linears);
  return j;
}

}  // namespace endor
