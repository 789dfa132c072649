// ContainerReader: maps a .endor file read-only and validates it completely (SPEC.md §9)
// before handing out any view into it.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "detail.h"

namespace endor {

using detail::fail;

namespace {
// Closes the descriptor on every path out of open().
struct FdCloser {
  int fd;
  ~FdCloser() { if (fd >= 0) ::close(fd); }
};
}  // namespace

std::unique_ptr<ContainerReader> ContainerReader::open(const std::string& path) {
  FdCloser fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (fd.fd < 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st;
  if (::fstat(fd.fd, &st) != 0) fail(path, std::string("cannot stat: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail(path, "not a regular file");
  const uint64_t size = uint64_t(st.st_size);
  if (size < kHeaderBytes) parse_header(nullptr, size, path);  // throws "file is too short ..."

  std::unique_ptr<ContainerReader> r(new ContainerReader());
  r->path_ = path;
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.fd, 0);
  if (p == MAP_FAILED) fail(path, std::string("cannot map: ") + std::strerror(errno));
  ::close(fd.fd);  // the mapping keeps the file alive; no descriptor is held while open
  fd.fd = -1;
  r->base_ = static_cast<const uint8_t*>(p);
  r->mapped_bytes_ = size;
  r->header_.file_bytes = size;  // until validate() replaces the header with the parsed one
  r->validate();                 // on throw, ~ContainerReader unmaps
  return r;
}

std::unique_ptr<ContainerReader> ContainerReader::open_bytes(const uint8_t* bytes, uint64_t n_bytes,
                                                             const std::string& name) {
  if (n_bytes < kHeaderBytes) parse_header(bytes, n_bytes, name);  // throws "file is too short ..."
  std::unique_ptr<ContainerReader> r(new ContainerReader());
  r->path_ = name;
  // Page alignment keeps the 64-byte blob alignment of the file true in memory.
  // (Exactly n_bytes, so a sanitizer sees any read past the end.)
  if (::posix_memalign(&r->owned_, 4096, n_bytes) != 0)
    fail(name, "out of memory copying " + std::to_string(n_bytes) + " bytes");
  std::memcpy(r->owned_, bytes, n_bytes);
  r->base_ = static_cast<const uint8_t*>(r->owned_);
  r->header_.file_bytes = n_bytes;
  r->validate();
  return r;
}

namespace {
// Deepest nesting of arrays/objects in JSON text (strings skipped). Checked before parsing:
// nlohmann's parser is iterative but copying or printing a value recurses, so a hostile
// "[[[[...]]]]" manifest must be refused up front rather than overflow the stack later.
int json_depth(const uint8_t* p, uint64_t n) {
  int depth = 0, max_depth = 0;
  bool in_string = false;
  for (uint64_t i = 0; i < n; ++i) {
    const uint8_t c = p[i];
    if (in_string) {
      if (c == '\\') ++i;  // skip the escaped character
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      max_depth = std::max(max_depth, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return max_depth;
}
}  // namespace

void ContainerReader::validate() {
  header_ = parse_header(base_, header_.file_bytes, path_);
  const uint8_t* manifest = base_ + header_.manifest_offset;
  const uint64_t computed = XXH3_64bits(manifest, header_.manifest_bytes);
  if (computed != header_.manifest_checksum)
    fail(path_, "manifest checksum mismatch (stored " + detail::hex16(header_.manifest_checksum) + ", computed " +
                    detail::hex16(computed) + ")");
  if (json_depth(manifest, header_.manifest_bytes) > kMaxManifestDepth)
    fail(path_, "manifest nests arrays/objects deeper than " + std::to_string(kMaxManifestDepth) + " levels");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(manifest, manifest + header_.manifest_bytes);
  } catch (const nlohmann::json::parse_error& e) {
    fail(path_, "manifest is not valid JSON (error at byte " + std::to_string(e.byte) + ")");
  }
  manifest_ = Manifest::from_json(j, header_, path_);
}

ContainerReader::~ContainerReader() {
  if (mapped_bytes_ > 0) ::munmap(const_cast<uint8_t*>(base_), mapped_bytes_);
  std::free(owned_);
}

TensorView ContainerReader::tensor(const TensorInfo& info) const {
  TensorView v;
  v.info = &info;
  v.layout = compute_layout(info.shape, info.encoding, info.value_type, info.group_size, info.nnz, info.int4_params);
  v.data = base_ + info.offset;
  return v;
}

std::optional<TensorView> ContainerReader::find_tensor(std::string_view name) const {
  const TensorInfo* info = manifest_.find_tensor(name);
  if (!info) return std::nullopt;
  return tensor(*info);
}

std::optional<std::string_view> ContainerReader::file(std::string_view name) const {
  const FileInfo* info = manifest_.find_file(name);
  if (!info) return std::nullopt;
  return std::string_view(reinterpret_cast<const char*>(base_ + info->offset), info->size);
}

bool ContainerReader::verify_group(size_t g) const {
  if (g >= manifest_.groups.size())
    fail(path_, "verify_group(" + std::to_string(g) + "): there are " + std::to_string(manifest_.groups.size()) +
                    " groups");
  const GroupInfo& group = manifest_.groups[g];
  return XXH3_64bits(base_ + group.offset, group.size) == group.checksum;
}

void ContainerReader::verify_all() const {
  for (size_t g = 0; g < manifest_.groups.size(); ++g) {
    const GroupInfo& group = manifest_.groups[g];
    const uint64_t computed = XXH3_64bits(base_ + group.offset, group.size);
    if (computed != group.checksum)
      fail(path_, "group '" + group.name + "' checksum mismatch (stored " + detail::hex16(group.checksum) +
                      ", computed " + detail::hex16(computed) + "): the file is corrupt");
  }
  for (const TensorInfo& t : manifest_.tensors)
    if (t.encoding == Encoding::Bitmap) validate_bitmap(tensor(t), path_ + ": tensor '" + t.name + "'");
}

}  // namespace endor
