// ContainerReader: maps a .endor file read-only and validates it completely (SPEC.md §9)
// before handing out any view into it.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

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

void ContainerReader::validate() {
  header_ = parse_header(base_, header_.file_bytes, path_);
  const uint8_t* manifest = base_ + header_.manifest_offset;
  const uint64_t computed = XXH3_64bits(manifest, header_.manifest_bytes);
  if (computed != header_.manifest_checksum)
    fail(path_, "manifest checksum mismatch (stored " + detail::hex16(header_.manifest_checksum) + ", computed " +
                    detail::hex16(computed) + ")");
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
  v.layout = compute_layout(info.shape, info.encoding, info.value_type, info.group_size, info.nnz);
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
  const GroupInfo& group = manifest_.groups.at(g);
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
