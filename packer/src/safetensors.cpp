// safetensors reader: a parser that distrusts the file (caps, checked arithmetic, exact tiling)
// and a read-only memory mapping that can drop pages it is done with.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "detail.h"
#include "endor/safetensors.h"

namespace endor {

using packer_detail::add_ok;
using packer_detail::fail;
using packer_detail::mul_ok;

namespace {

// The reference implementation refuses headers above 100 MB.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct DTypeName {
  const char* name;
  SafetensorsDType dtype;
  uint32_t bytes;
};
constexpr DTypeName kDTypes[] = {
    {"BOOL", SafetensorsDType::Bool, 1}, {"U8", SafetensorsDType::U8, 1},
    {"I8", SafetensorsDType::I8, 1},     {"I16", SafetensorsDType::I16, 2},
    {"U16", SafetensorsDType::U16, 2},   {"F16", SafetensorsDType::F16, 2},
    {"BF16", SafetensorsDType::BF16, 2}, {"I32", SafetensorsDType::I32, 4},
    {"U32", SafetensorsDType::U32, 4},   {"F32", SafetensorsDType::F32, 4},
    {"F64", SafetensorsDType::F64, 8},   {"I64", SafetensorsDType::I64, 8},
    {"U64", SafetensorsDType::U64, 8},   {"F8_E4M3", SafetensorsDType::F8_E4M3, 1},
    {"F8_E5M2", SafetensorsDType::F8_E5M2, 1},
};

// A JSON value as it may be quoted in an error message (short).
std::string brief(const nlohmann::json& j) {
  std::string s = j.dump();
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

uint64_t json_u64(const nlohmann::json& j, const std::string& where, const char* what) {
  if (!j.is_number_unsigned() && !(j.is_number_integer() && j.get<int64_t>() >= 0))
    fail(where, std::string(what) + " must be a non-negative integer, got " + brief(j));
  return j.get<uint64_t>();
}

}  // namespace

const char* to_string(SafetensorsDType t) {
  for (const DTypeName& d : kDTypes)
    if (d.dtype == t) return d.name;
  return "?";
}

uint32_t dtype_bytes(SafetensorsDType t) {
  for (const DTypeName& d : kDTypes)
    if (d.dtype == t) return d.bytes;
  return 0;
}

uint64_t SafetensorsEntry::numel() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;  // validated against overflow at parse time
  return n;
}

const SafetensorsEntry* SafetensorsHeader::find(const std::string& name) const {
  for (const SafetensorsEntry& e : tensors)
    if (e.name == name) return &e;
  return nullptr;
}

SafetensorsHeader parse_safetensors(const uint8_t* file, uint64_t n_bytes, const std::string& path) {
  const std::string where = path;
  if (n_bytes < 8) fail(where, "not a safetensors file: " + std::to_string(n_bytes) + " bytes, too short for the 8-byte header length");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | file[i];
  if (header_len > kMaxHeaderBytes)
    fail(where, "safetensors header length " + std::to_string(header_len) + " exceeds the 100 MB limit");
  if (header_len > n_bytes - 8)
    fail(where, "safetensors header length " + std::to_string(header_len) + " runs past the end of the file (" +
                    std::to_string(n_bytes) + " bytes)");
  if (header_len < 2 || file[8] != '{')
    fail(where, "safetensors header is not a JSON object (must start with '{')");

  // nlohmann::json stops at a NUL byte as if the text ended there; the format has none.
  if (std::memchr(file + 8, '\0', header_len) != nullptr) fail(where, "safetensors header contains a NUL byte");
  // Duplicate keys are ambiguous (which entry is the tensor?): refuse them while parsing.
  std::set<std::string> top_keys;
  std::string duplicate;
  auto on_event = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    if (event == nlohmann::json::parse_event_t::key && depth == 1 && parsed.is_string()) {
      if (!top_keys.insert(parsed.get<std::string>()).second && duplicate.empty()) duplicate = parsed.get<std::string>();
    }
    return true;
  };
  nlohmann::json root;
  const char* text = reinterpret_cast<const char*>(file + 8);
  try {
    root = nlohmann::json::parse(text, text + header_len, on_event);
  } catch (const nlohmann::json::exception& e) {
    std::string msg = e.what();
    if (msg.size() > 160) msg = msg.substr(0, 157) + "...";
    fail(where, "safetensors header is not valid JSON: " + msg);
  }
  if (!root.is_object()) fail(where, "safetensors header is not a JSON object");
  if (!duplicate.empty()) fail(where, "safetensors header names '" + duplicate + "' twice");

  SafetensorsHeader h;
  h.data_offset = 8 + header_len;
  const uint64_t buffer_bytes = n_bytes - h.data_offset;
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) fail(where, "__metadata__ must be an object of strings");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) fail(where, "__metadata__ value of '" + m.key() + "' is not a string");
        h.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string tw = "tensor '" + name + "'";
    if (!v.is_object()) fail(where, tw + " is not an object with dtype, shape and data_offsets");
    SafetensorsEntry e;
    e.name = name;
    const auto dt = v.find("dtype");
    if (dt == v.end() || !dt->is_string()) fail(where, tw + " has no dtype string");
    bool known = false;
    for (const DTypeName& d : kDTypes)
      if (*dt == d.name) {
        e.dtype = d.dtype;
        known = true;
      }
    if (!known) fail(where, tw + " has unknown dtype " + brief(*dt));
    const auto sh = v.find("shape");
    if (sh == v.end() || !sh->is_array()) fail(where, tw + " has no shape array");
    uint64_t numel = 1;
    for (const nlohmann::json& d : *sh) {
      const uint64_t dim = json_u64(d, where, (tw + " shape dimension").c_str());
      if (!mul_ok(numel, dim, &numel)) fail(where, tw + " shape " + brief(*sh) + " overflows the element count");
      e.shape.push_back(dim);
    }
    uint64_t n_data = 0;
    if (!mul_ok(numel, dtype_bytes(e.dtype), &n_data))
      fail(where, tw + " shape " + brief(*sh) + " overflows the byte count");
    const auto off = v.find("data_offsets");
    if (off == v.end() || !off->is_array() || off->size() != 2)
      fail(where, tw + " needs data_offsets [begin, end]");
    e.begin = json_u64((*off)[0], where, (tw + " data_offsets").c_str());
    e.end = json_u64((*off)[1], where, (tw + " data_offsets").c_str());
    if (e.end < e.begin) fail(where, tw + " has data_offsets end < begin");
    if (e.end > buffer_bytes)
      fail(where, tw + " data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                      "] run past the data buffer (" + std::to_string(buffer_bytes) + " bytes; file truncated?)");
    if (e.end - e.begin != n_data)
      fail(where, tw + " occupies " + std::to_string(e.end - e.begin) + " bytes but shape " + brief(*sh) + " of " +
                      to_string(e.dtype) + " needs " + std::to_string(n_data));
    h.tensors.push_back(std::move(e));
  }

  // The tensors must tile [0, buffer_bytes) exactly: no holes, no overlap, nothing after.
  std::sort(h.tensors.begin(), h.tensors.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t cursor = 0;
  for (const SafetensorsEntry& e : h.tensors) {
    if (e.begin < cursor) fail(where, "tensor '" + e.name + "' overlaps the tensor before it in the data buffer");
    if (e.begin > cursor)
      fail(where, "data buffer has a hole of " + std::to_string(e.begin - cursor) + " bytes before tensor '" + e.name + "'");
    cursor = e.end;
  }
  if (cursor != buffer_bytes)
    fail(where, "data buffer has " + std::to_string(buffer_bytes - cursor) + " bytes after the last tensor");
  return h;
}

// ---- SafetensorsFile -------------------------------------------------------------------

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail(path, std::string("cannot stat: ") + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path, "not a regular file");
  }
  const uint64_t n = uint64_t(st.st_size);
  if (n < 8) {
    ::close(fd);
    fail(path, "not a safetensors file: " + std::to_string(n) + " bytes, too short for the 8-byte header length");
  }
  void* p = ::mmap(nullptr, n, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  ::close(fd);
  if (p == MAP_FAILED) fail(path, std::string("cannot memory-map: ") + std::strerror(map_err));
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->base_ = static_cast<const uint8_t*>(p);
  f->mapped_bytes_ = n;
  f->header_ = parse_safetensors(f->base_, n, path);  // on throw the destructor unmaps
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (base_) ::munmap(const_cast<uint8_t*>(base_), mapped_bytes_);
}

void SafetensorsFile::release(const SafetensorsEntry& e) const {
  static const uint64_t page = uint64_t(::sysconf(_SC_PAGESIZE));
  const uint64_t begin = (header_.data_offset + e.begin) / page * page;
  const uint64_t end = std::min(mapped_bytes_, (header_.data_offset + e.end + page - 1) / page * page);
  if (end > begin) ::madvise(const_cast<uint8_t*>(base_) + begin, end - begin, MADV_DONTNEED);
}

// ---- conversions ------------------------------------------------------------------------

void convert_to_f32(SafetensorsDType t, const uint8_t* src, uint64_t n, float* out) {
  switch (t) {
    case SafetensorsDType::F16:
      for (uint64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        out[i] = f16_to_f32(h);
      }
      return;
    case SafetensorsDType::BF16:
      for (uint64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        out[i] = bf16_to_f32(h);
      }
      return;
    case SafetensorsDType::F32:
      std::memcpy(out, src, n * 4);
      return;
    case SafetensorsDType::F64:
      for (uint64_t i = 0; i < n; ++i) {
        double d;
        std::memcpy(&d, src + 8 * i, 8);
        out[i] = float(d);
      }
      return;
    default:
      throw Error(std::string("cannot convert dtype ") + to_string(t) + " to f32 (only F16, BF16, F32, F64)");
  }
}

}  // namespace endor
