// ContainerWriter: streams groups into "<path>.tmp-<pid>", then writes the manifest and header
// and renames atomically (SPEC.md §2: the manifest comes last so memory stays bounded).
#include <algorithm>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>

#include "detail.h"

namespace endor {

using detail::fail;

struct ContainerWriter::HashState {
  XXH3_state_t* state = XXH3_createState();
  ~HashState() { XXH3_freeState(state); }
};

ContainerWriter::ContainerWriter(std::string path) : path_(std::move(path)), hash_(std::make_unique<HashState>()) {
  if (!hash_->state) throw Error("cannot create " + path_ + ": out of memory");
  temp_path_ = path_ + ".tmp-" + std::to_string(::getpid());
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    const int err = errno;
    std::string msg = "cannot create " + path_ + ": " + std::strerror(err);
    if (err == EEXIST) msg += " (temporary file " + temp_path_ + " is left over from another run)";
    throw Error(msg);
  }
  cursor_ = kGroupAlignment;  // data_offset: the header's page is written by commit()
}

ContainerWriter::~ContainerWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_path_.c_str());
}

void ContainerWriter::write_at(uint64_t offset, const void* bytes, uint64_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(bytes);
  while (n > 0) {
    const ssize_t w = ::pwrite(fd_, p, n > (1u << 30) ? (1u << 30) : size_t(n), off_t(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      fail("", "cannot write " + path_ + ": " + std::strerror(errno));
    }
    if (w == 0) fail("", "cannot write " + path_ + ": no progress (disk full?)");
    p += w;
    offset += uint64_t(w);
    n -= uint64_t(w);
  }
}

namespace {
// Zero bytes to pad the cursor up to `alignment`; fed to the group hash when inside a group.
const uint8_t kZeros[kGroupAlignment] = {};
}  // namespace

uint32_t ContainerWriter::begin_group(const std::string& name, Tier tier) {
  if (committed_) fail(path_, "begin_group after commit");
  if (in_group_) fail(path_, "begin_group('" + name + "') while group '" + manifest_.groups.back().name + "' is open");
  if (name.empty()) fail(path_, "group name is empty");
  for (const GroupInfo& g : manifest_.groups)
    if (g.name == name) fail(path_, "duplicate group name '" + name + "'");
  // Padding between groups is written (not left as a hole) so the file is plain zeros there.
  const uint64_t start = detail::align_up(cursor_, kGroupAlignment, "group offset");
  write_at(cursor_, kZeros, start - cursor_);
  cursor_ = start;
  GroupInfo g;
  g.name = name;
  g.tier = tier;
  g.offset = cursor_;
  manifest_.groups.push_back(std::move(g));
  XXH3_64bits_reset(hash_->state);
  in_group_ = true;
  return uint32_t(manifest_.groups.size() - 1);
}

void ContainerWriter::add_tensor(const TensorInfo& meta, const uint8_t* bytes, uint64_t n_bytes) {
  const std::string what = path_ + ": tensor '" + meta.name + "'";
  if (!in_group_) fail(what, "add_tensor outside a group");
  if (meta.name.empty()) fail(path_, "tensor name is empty");
  if (manifest_.find_tensor(meta.name)) fail(path_, "duplicate tensor name '" + meta.name + "'");
  TensorLayout layout;
  try {
    layout = compute_layout(meta.shape, meta.encoding, meta.value_type, meta.group_size, meta.nnz, meta.int4_params);
  } catch (const Error& e) {
    fail(what, e.what());
  }
  if (n_bytes != layout.total_bytes)
    fail(what, std::to_string(n_bytes) + " bytes given, the layout needs " + std::to_string(layout.total_bytes));

  const uint64_t offset = detail::align_up(cursor_, kTensorAlignment, "tensor offset");
  write_at(cursor_, kZeros, offset - cursor_);
  XXH3_64bits_update(hash_->state, kZeros, offset - cursor_);
  write_at(offset, bytes, n_bytes);
  XXH3_64bits_update(hash_->state, bytes, n_bytes);
  cursor_ = offset + n_bytes;

  TensorInfo info = meta;
  info.group = uint32_t(manifest_.groups.size() - 1);
  info.offset = offset;
  info.size = n_bytes;
  manifest_.groups.back().tensors.push_back(uint32_t(manifest_.tensors.size()));
  manifest_.tensors.push_back(std::move(info));
}

void ContainerWriter::add_file(const std::string& name, const void* bytes, uint64_t n_bytes) {
  if (!in_group_) fail(path_, "add_file('" + name + "') outside a group");
  if (name.empty()) fail(path_, "file name is empty");
  if (manifest_.find_file(name)) fail(path_, "duplicate file name '" + name + "'");
  const uint64_t offset = detail::align_up(cursor_, kTensorAlignment, "file offset");
  write_at(cursor_, kZeros, offset - cursor_);
  XXH3_64bits_update(hash_->state, kZeros, offset - cursor_);
  write_at(offset, bytes, n_bytes);
  XXH3_64bits_update(hash_->state, bytes, n_bytes);
  cursor_ = offset + n_bytes;

  FileInfo info;
  info.name = name;
  info.group = uint32_t(manifest_.groups.size() - 1);
  info.offset = offset;
  info.size = n_bytes;
  manifest_.groups.back().files.push_back(uint32_t(manifest_.files.size()));
  manifest_.files.push_back(std::move(info));
}

void ContainerWriter::end_group() {
  if (!in_group_) fail(path_, "end_group without begin_group");
  GroupInfo& g = manifest_.groups.back();
  g.size = cursor_ - g.offset;
  g.checksum = XXH3_64bits_digest(hash_->state);
  in_group_ = false;
}

void ContainerWriter::commit(const nlohmann::json& config, const nlohmann::json& generation_config,
                             const nlohmann::json& provenance) {
  if (committed_) fail(path_, "commit called twice");
  if (in_group_) fail(path_, "commit while group '" + manifest_.groups.back().name + "' is open");
  manifest_.config = config;
  manifest_.generation_config = generation_config;
  manifest_.provenance = provenance;
  // SPEC.md §8: the lowest minor version whose features the file uses (1.1: dtype "int4k";
  // 1.2: dtype "int8g").
  uint16_t minor = 0;
  for (const TensorInfo& t : manifest_.tensors) {
    if (t.dtype() == Dtype::Int4k) minor = std::max<uint16_t>(minor, 1);
    if (t.dtype() == Dtype::Int8g) minor = std::max<uint16_t>(minor, 2);
  }
  manifest_.version_minor = minor;

  std::string text;
  try {
    text = manifest_.to_json().dump();
  } catch (const nlohmann::json::exception& e) {
    fail(path_, std::string("cannot serialise the manifest (") + e.what() + ")");  // e.g. invalid UTF-8
  }
  if (text.size() > kMaxManifestBytes)
    fail(path_, "manifest of " + std::to_string(text.size()) + " bytes exceeds the 64 MiB limit");

  Header h;
  h.version_minor = manifest_.version_minor;
  h.data_offset = kGroupAlignment;
  h.data_bytes = cursor_ - kGroupAlignment;
  h.manifest_offset = cursor_;
  h.manifest_bytes = text.size();
  h.file_bytes = cursor_ + text.size();
  h.manifest_checksum = XXH3_64bits(text.data(), text.size());
  // What we write must read back: the reader's own checks run on it (cheap, and it catches a
  // caller that broke the groups through groups()).
  Manifest::from_json(nlohmann::json::parse(text), h, path_);

  write_at(cursor_, text.data(), text.size());
  uint8_t page[kGroupAlignment] = {};
  write_header(h, page);
  write_at(0, page, kGroupAlignment);
  if (::fsync(fd_) != 0) fail("", "cannot write " + path_ + ": fsync: " + std::strerror(errno));
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("", "cannot write " + path_ + ": close: " + std::strerror(errno));
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0)
    fail("", "cannot rename " + temp_path_ + " to " + path_ + ": " + std::strerror(errno));
  committed_ = true;
  // Make the rename durable; failure here leaves a complete file, so it is not an error.
  const size_t slash = path_.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path_.substr(0, slash));
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace endor
