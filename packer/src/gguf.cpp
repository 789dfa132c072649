// GGUF reader: a parser that distrusts the file (caps, checked arithmetic, every read inside the
// image) and a read-only memory mapping.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "detail.h"
#include "endor/gguf.h"

namespace endor {

using packer_detail::add_ok;
using packer_detail::fail;
using packer_detail::mul_ok;

namespace {

struct TypeTraits {
  GgmlType type;
  const char* name;
  uint32_t block_elements, block_bytes;
};
// ggml's type table (gguf-py GGML_QUANT_SIZES).
constexpr TypeTraits kTypes[] = {
    {GgmlType::F32, "F32", 1, 4},           {GgmlType::F16, "F16", 1, 2},
    {GgmlType::Q4_0, "Q4_0", 32, 18},       {GgmlType::Q4_1, "Q4_1", 32, 20},
    {GgmlType::Q5_0, "Q5_0", 32, 22},       {GgmlType::Q5_1, "Q5_1", 32, 24},
    {GgmlType::Q8_0, "Q8_0", 32, 34},       {GgmlType::Q8_1, "Q8_1", 32, 40},
    {GgmlType::Q2_K, "Q2_K", 256, 84},      {GgmlType::Q3_K, "Q3_K", 256, 110},
    {GgmlType::Q4_K, "Q4_K", 256, 144},     {GgmlType::Q5_K, "Q5_K", 256, 176},
    {GgmlType::Q6_K, "Q6_K", 256, 210},     {GgmlType::Q8_K, "Q8_K", 256, 292},
    {GgmlType::IQ2_XXS, "IQ2_XXS", 256, 66}, {GgmlType::IQ2_XS, "IQ2_XS", 256, 74},
    {GgmlType::IQ3_XXS, "IQ3_XXS", 256, 98}, {GgmlType::IQ1_S, "IQ1_S", 256, 50},
    {GgmlType::IQ4_NL, "IQ4_NL", 32, 18},   {GgmlType::IQ3_S, "IQ3_S", 256, 110},
    {GgmlType::IQ2_S, "IQ2_S", 256, 82},    {GgmlType::IQ4_XS, "IQ4_XS", 256, 136},
    {GgmlType::I8, "I8", 1, 1},             {GgmlType::I16, "I16", 1, 2},
    {GgmlType::I32, "I32", 1, 4},           {GgmlType::I64, "I64", 1, 8},
    {GgmlType::F64, "F64", 1, 8},           {GgmlType::IQ1_M, "IQ1_M", 256, 56},
    {GgmlType::BF16, "BF16", 1, 2},         {GgmlType::TQ1_0, "TQ1_0", 256, 54},
    {GgmlType::TQ2_0, "TQ2_0", 256, 66},    {GgmlType::MXFP4, "MXFP4", 32, 17},
};

const TypeTraits* traits(uint32_t t) {
  for (const TypeTraits& x : kTypes)
    if (uint32_t(x.type) == t) return &x;
  return nullptr;
}

// Sequential little-endian reads from the image; every read is checked against its end.
class Cursor {
 public:
  Cursor(const uint8_t* p, uint64_t n, const std::string& where) : p_(p), n_(n), where_(where) {}
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return n_ - pos_; }
  void need(uint64_t k, const char* what) const {
    if (k > left())
      fail(where_, std::string("truncated: ") + what + " at byte " + std::to_string(pos_) + " needs " +
                       std::to_string(k) + " bytes, " + std::to_string(left()) + " left in the file");
  }
  template <class T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));  // GGUF is little-endian, as every host we build for
    pos_ += sizeof(T);
    return v;
  }
  std::string string(const char* what) {
    const uint64_t len = read<uint64_t>(what);
    if (len > left())
      fail(where_, std::string(what) + " at byte " + std::to_string(pos_ - 8) + " has length " + std::to_string(len) +
                       ", past the end of the file (" + std::to_string(left()) + " bytes left)");
    std::string s(reinterpret_cast<const char*>(p_ + pos_), size_t(len));
    pos_ += len;
    return s;
  }

 private:
  const uint8_t* p_;
  uint64_t n_, pos_ = 0;
  const std::string& where_;
};

// The smallest encoding of one value of a type (arrays: type + count; strings: the length).
uint64_t min_value_bytes(GgufValueType t) {
  switch (t) {
    case GgufValueType::U8: case GgufValueType::I8: case GgufValueType::Bool: return 1;
    case GgufValueType::U16: case GgufValueType::I16: return 2;
    case GgufValueType::U32: case GgufValueType::I32: case GgufValueType::F32: return 4;
    case GgufValueType::U64: case GgufValueType::I64: case GgufValueType::F64: case GgufValueType::String: return 8;
    case GgufValueType::Array: return 12;
  }
  return 1;
}

// Keys and tensor names appear in one-line messages: no control bytes.
bool printable_name(const std::string& s) {
  for (unsigned char c : s)
    if (c < 0x20 || c == 0x7F) return false;
  return true;
}

bool known_value_type(uint32_t t) { return t <= uint32_t(GgufValueType::F64); }

GgufValue read_value(Cursor& c, GgufValueType type, const std::string& key, uint32_t depth, const std::string& where) {
  GgufValue v;
  v.type = type;
  switch (type) {
    case GgufValueType::U8: v.u = c.read<uint8_t>("a u8 value"); break;
    case GgufValueType::I8: v.i = c.read<int8_t>("an i8 value"); break;
    case GgufValueType::U16: v.u = c.read<uint16_t>("a u16 value"); break;
    case GgufValueType::I16: v.i = c.read<int16_t>("an i16 value"); break;
    case GgufValueType::U32: v.u = c.read<uint32_t>("a u32 value"); break;
    case GgufValueType::I32: v.i = c.read<int32_t>("an i32 value"); break;
    case GgufValueType::U64: v.u = c.read<uint64_t>("a u64 value"); break;
    case GgufValueType::I64: v.i = c.read<int64_t>("an i64 value"); break;
    case GgufValueType::F32: v.f = c.read<float>("an f32 value"); break;
    case GgufValueType::F64: v.f = c.read<double>("an f64 value"); break;
    case GgufValueType::Bool: {
      const uint8_t b = c.read<uint8_t>("a bool value");
      if (b > 1) fail(where, "metadata '" + key + "' has bool value " + std::to_string(b) + " (must be 0 or 1)");
      v.u = b;
      break;
    }
    case GgufValueType::String: v.str = c.string(("the string value of '" + key + "'").c_str()); break;
    case GgufValueType::Array: {
      if (depth >= kGgufMaxArrayDepth)
        fail(where, "metadata '" + key + "' nests arrays deeper than " + std::to_string(kGgufMaxArrayDepth));
      const uint32_t et = c.read<uint32_t>("an array element type");
      if (!known_value_type(et))
        fail(where, "metadata '" + key + "' is an array of unknown value type " + std::to_string(et));
      v.element_type = GgufValueType(et);
      const uint64_t count = c.read<uint64_t>("an array length");
      uint64_t need = 0;
      if (!mul_ok(count, min_value_bytes(v.element_type), &need) || need > c.left())
        fail(where, "metadata '" + key + "' declares " + std::to_string(count) + " array elements of type " +
                        to_string(v.element_type) + ", more than the " + std::to_string(c.left()) +
                        " bytes left in the file hold");
      v.array.reserve(size_t(count));
      for (uint64_t k = 0; k < count; ++k) v.array.push_back(read_value(c, v.element_type, key, depth + 1, where));
      break;
    }
  }
  return v;
}

}  // namespace

const char* to_string(GgufValueType t) {
  static const char* const names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32",
                                      "bool", "string", "array", "u64", "i64", "f64"};
  return uint32_t(t) <= 12 ? names[uint32_t(t)] : "?";
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufValueType::U8: case GgufValueType::I8: case GgufValueType::U16: case GgufValueType::I16:
    case GgufValueType::U32: case GgufValueType::I32: case GgufValueType::U64: case GgufValueType::I64:
      return true;
    default:
      return false;
  }
}

bool GgufValue::as_u64(uint64_t* out) const {
  switch (type) {
    case GgufValueType::U8: case GgufValueType::U16: case GgufValueType::U32: case GgufValueType::U64:
      *out = u;
      return true;
    case GgufValueType::I8: case GgufValueType::I16: case GgufValueType::I32: case GgufValueType::I64:
      if (i < 0) return false;
      *out = uint64_t(i);
      return true;
    default:
      return false;
  }
}

const char* ggml_type_name(GgmlType t) {
  const TypeTraits* x = traits(uint32_t(t));
  return x ? x->name : "?";
}
bool ggml_type_known(uint32_t t) { return traits(t) != nullptr; }
bool ggml_type_readable(GgmlType t) {
  switch (t) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: case GgmlType::Q8_0: case GgmlType::Q4_0:
    case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1: case GgmlType::IQ4_NL: case GgmlType::Q2_K:
    case GgmlType::Q3_K: case GgmlType::Q4_K: case GgmlType::Q5_K: case GgmlType::Q6_K: case GgmlType::IQ4_XS:
      return true;
    default:
      return false;
  }
}
const char* ggml_readable_types() {
  return "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS";
}
uint32_t ggml_block_elements(GgmlType t) {
  const TypeTraits* x = traits(uint32_t(t));
  return x ? x->block_elements : 0;
}
uint32_t ggml_block_bytes(GgmlType t) {
  const TypeTraits* x = traits(uint32_t(t));
  return x ? x->block_bytes : 0;
}

uint64_t GgufTensorInfo::numel() const {
  uint64_t n = 1;
  for (uint64_t d : ne) n *= d;  // checked at parse time
  return n;
}

std::vector<uint64_t> GgufTensorInfo::torch_shape() const { return std::vector<uint64_t>(ne.rbegin(), ne.rend()); }

const GgufValue* GgufHeader::find(const std::string& key) const {
  const auto it = metadata.find(key);
  return it == metadata.end() ? nullptr : &it->second;
}

const GgufTensorInfo* GgufHeader::tensor(const std::string& name) const {
  for (const GgufTensorInfo& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

GgufHeader parse_gguf(const uint8_t* file, uint64_t n_bytes, const std::string& where) {
  Cursor c(file, n_bytes, where);
  if (n_bytes < 4 || std::memcmp(file, "GGUF", 4) != 0) fail(where, "not a GGUF file (no \"GGUF\" magic)");
  c.read<uint32_t>("the magic");
  GgufHeader h;
  h.version = c.read<uint32_t>("the version");
  if (h.version == 1) fail(where, "GGUF version 1 is not supported (only 2 and 3; re-convert the model with a recent llama.cpp)");
  if (h.version > 0xFFFF) fail(where, "GGUF version " + std::to_string(h.version) + " looks byte-swapped (a big-endian file?); only little-endian versions 2 and 3 are supported");
  if (h.version != 2 && h.version != 3) fail(where, "GGUF version " + std::to_string(h.version) + " is not supported (only 2 and 3)");
  const uint64_t n_tensors = c.read<uint64_t>("the tensor count");
  const uint64_t n_keys = c.read<uint64_t>("the metadata count");
  // Each key takes at least 8 (length) + 4 (type) + 1 bytes, each tensor at least 8 + 4 + 8 + 4 + 8.
  if (n_keys > kGgufMaxKeys || n_keys > c.left() / 13)
    fail(where, "header declares " + std::to_string(n_keys) + " metadata entries, more than the file can hold");
  if (n_tensors > kGgufMaxTensors || n_tensors > c.left() / 32)
    fail(where, "header declares " + std::to_string(n_tensors) + " tensors, more than the file can hold");

  for (uint64_t k = 0; k < n_keys; ++k) {
    std::string key = c.string("a metadata key");
    if (key.empty() || key.size() > 65535 || !printable_name(key))
      fail(where, "metadata key " + std::to_string(k) + " is not a name (empty, over 65535 bytes, or holding control bytes)");
    const uint32_t type = c.read<uint32_t>("a metadata value type");
    if (!known_value_type(type)) fail(where, "metadata '" + key + "' has unknown value type " + std::to_string(type));
    GgufValue v = read_value(c, GgufValueType(type), key, 0, where);
    if (h.metadata.count(key)) fail(where, "metadata key '" + key + "' appears twice");
    h.metadata.emplace(std::move(key), std::move(v));
  }
  if (const GgufValue* a = h.find("general.alignment")) {
    uint64_t al = 0;
    if (!a->as_u64(&al) || al == 0 || (al & (al - 1)) != 0 || al > (1u << 30))
      fail(where, "general.alignment must be a power of two (up to 2^30)");
    h.alignment = al;
  }

  std::set<std::string> names;
  for (uint64_t k = 0; k < n_tensors; ++k) {
    GgufTensorInfo t;
    t.name = c.string("a tensor name");
    if (t.name.empty() || t.name.size() > 64 || !printable_name(t.name))
      fail(where, "tensor " + std::to_string(k) + " has no valid name (1 to 64 bytes without control bytes, as ggml's)");
    const std::string tw = "tensor '" + t.name + "'";
    if (!names.insert(t.name).second) fail(where, tw + " appears twice");
    const uint32_t n_dims = c.read<uint32_t>("a tensor's dimension count");
    if (n_dims < 1 || n_dims > 4) fail(where, tw + " has " + std::to_string(n_dims) + " dimensions (must be 1 to 4)");
    uint64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t ne = c.read<uint64_t>("a tensor dimension");
      if (ne == 0 || ne > uint64_t(INT64_MAX)) fail(where, tw + " has dimension " + std::to_string(ne));
      if (!mul_ok(numel, ne, &numel) || numel > uint64_t(INT64_MAX)) fail(where, tw + " shape overflows the element count");
      t.ne.push_back(ne);
    }
    const uint32_t type = c.read<uint32_t>("a tensor type");
    const TypeTraits* tt = traits(type);
    if (!tt) fail(where, tw + " has unknown tensor type " + std::to_string(type));
    t.type = tt->type;
    if (t.ne[0] % tt->block_elements != 0)
      fail(where, tw + " of type " + tt->name + " has " + std::to_string(t.ne[0]) + " columns, not a multiple of its block of " +
                      std::to_string(tt->block_elements));
    if (!mul_ok(numel / tt->block_elements, tt->block_bytes, &t.n_bytes)) fail(where, tw + " shape overflows the byte count");
    t.offset = c.read<uint64_t>("a tensor offset");
    if (t.offset % h.alignment != 0)
      fail(where, tw + " offset " + std::to_string(t.offset) + " is not a multiple of the alignment " + std::to_string(h.alignment));
    h.tensors.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment after the header.
  uint64_t data = c.pos();
  if (!add_ok(data, h.alignment - 1, &data)) fail(where, "header too large");
  data -= data % h.alignment;
  if (h.tensors.empty()) data = std::min(data, n_bytes);  // a metadata-only file may end unpadded
  if (data > n_bytes) fail(where, "truncated: the data section would start at byte " + std::to_string(data) + ", past the end of the file");
  h.data_offset = data;
  const uint64_t data_bytes = n_bytes - data;
  std::vector<const GgufTensorInfo*> by_offset;
  for (const GgufTensorInfo& t : h.tensors) {
    uint64_t end = 0;
    if (!add_ok(t.offset, t.n_bytes, &end) || end > data_bytes)
      fail(where, "tensor '" + t.name + "' (" + std::to_string(t.n_bytes) + " bytes at data offset " + std::to_string(t.offset) +
                      ") runs past the end of the file (data section " + std::to_string(data_bytes) + " bytes; truncated?)");
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
  for (size_t k = 1; k < by_offset.size(); ++k)
    if (by_offset[k]->offset < by_offset[k - 1]->offset + by_offset[k - 1]->n_bytes)
      fail(where, "tensor '" + by_offset[k]->name + "' overlaps tensor '" + by_offset[k - 1]->name + "' in the data section");
  return h;
}

bool is_gguf_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char magic[4] = {};
  const bool ok = ::read(fd, magic, 4) == 4 && std::memcmp(magic, "GGUF", 4) == 0;
  ::close(fd);
  return ok;
}

std::unique_ptr<GgufFile> GgufFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path, "not a regular file");
  }
  const uint64_t n = uint64_t(st.st_size);
  if (n == 0) {
    ::close(fd);
    fail(path, "not a GGUF file: the file is empty");
  }
  void* p = ::mmap(nullptr, n, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  ::close(fd);
  if (p == MAP_FAILED) fail(path, std::string("cannot memory-map: ") + std::strerror(map_err));
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  f->base_ = static_cast<const uint8_t*>(p);
  f->mapped_bytes_ = n;
  f->header_ = parse_gguf(f->base_, n, path);  // on throw the destructor unmaps
  return f;
}

GgufFile::~GgufFile() {
  if (base_) ::munmap(const_cast<uint8_t*>(base_), mapped_bytes_);
}

void GgufFile::release(const GgufTensorInfo& t) const {
  static const uint64_t page = uint64_t(::sysconf(_SC_PAGESIZE));
  const uint64_t begin = (header_.data_offset + t.offset) / page * page;
  const uint64_t end = std::min(mapped_bytes_, (header_.data_offset + t.offset + t.n_bytes + page - 1) / page * page);
  if (end > begin) ::madvise(const_cast<uint8_t*>(base_) + begin, end - begin, MADV_DONTNEED);
}

}  // namespace endor
