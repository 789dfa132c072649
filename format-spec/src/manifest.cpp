// The JSON manifest (SPEC.md §4): serialisation, and parsing that checks every type, enum,
// name, formula and extent before anything downstream trusts an offset.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <unordered_map>
#include <utility>

#include "detail.h"

namespace endor {

using nlohmann::json;

uint64_t TensorInfo::numel() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n = detail::checked_mul(n, d, "tensor element count");
  return n;
}

const TensorInfo* Manifest::find_tensor(std::string_view name) const {
  for (const TensorInfo& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

const FileInfo* Manifest::find_file(std::string_view name) const {
  for (const FileInfo& f : files)
    if (f.name == name) return &f;
  return nullptr;
}

json Manifest::to_json() const {
  json groups_json = json::array(), tensors_json = json::array(), files_json = json::array();
  for (const GroupInfo& g : groups)
    groups_json.push_back({{"name", g.name},
                           {"tier", to_string(g.tier)},
                           {"offset", g.offset},
                           {"size", g.size},
                           {"checksum", detail::hex16(g.checksum)}});
  auto group_name = [&](uint32_t g) -> const std::string& {
    if (g >= groups.size()) throw Error("manifest: group index " + std::to_string(g) + " out of range");
    return groups[g].name;
  };
  for (const TensorInfo& t : tensors) {
    json j = {{"name", t.name},
              {"group", group_name(t.group)},
              {"offset", t.offset},
              {"size", t.size},
              {"shape", t.shape},
              {"encoding", to_string(t.encoding)},
              {"dtype", to_string(t.dtype())},
              {"nnz", t.nnz},
              {"source_dtype", t.source_dtype}};
    if (is_grouped(t.dtype())) j["group_size"] = t.group_size;
    tensors_json.push_back(std::move(j));
  }
  for (const FileInfo& f : files)
    files_json.push_back({{"name", f.name}, {"group", group_name(f.group)}, {"offset", f.offset}, {"size", f.size}});
  return json{{"format", "endor"},
              {"version", {version_major, version_minor}},
              {"config", config},
              {"generation_config", generation_config},
              {"provenance", provenance},
              {"groups", std::move(groups_json)},
              {"tensors", std::move(tensors_json)},
              {"files", std::move(files_json)}};
}

namespace {

// Typed access to the parsed JSON. `key` is the path of the value ("tensors[3].shape[1]") so a
// wrong type is reported where it is, in our words rather than nlohmann's.
class ManifestParser {
 public:
  explicit ManifestParser(const std::string& path) : prefix_(path.empty() ? "manifest" : path + ": manifest") {}

  [[noreturn]] void fail(const std::string& what) const { detail::fail(prefix_, what); }

  const json& member(const json& obj, const std::string& obj_key, const char* name) const {
    auto it = obj.find(name);
    if (it == obj.end()) fail("missing key " + join(obj_key, name));
    return *it;
  }
  const json& object(const json& v, const std::string& key) const {
    if (!v.is_object()) fail(key + " must be an object");
    return v;
  }
  const json& array(const json& v, const std::string& key) const {
    if (!v.is_array()) fail(key + " must be an array");
    return v;
  }
  const std::string& string(const json& v, const std::string& key) const {
    if (!v.is_string()) fail(key + " must be a string");
    return v.get_ref<const std::string&>();
  }
  uint64_t u64(const json& v, const std::string& key) const {
    if (v.is_number_unsigned()) return v.get<uint64_t>();
    if (v.is_number_integer() && v.get<int64_t>() >= 0) return uint64_t(v.get<int64_t>());
    fail(key + " must be a non-negative integer");
  }
  uint32_t u32(const json& v, const std::string& key) const {
    const uint64_t x = u64(v, key);
    if (x > UINT32_MAX) fail(key + " = " + std::to_string(x) + " does not fit in 32 bits");
    return uint32_t(x);
  }
  static std::string join(const std::string& obj_key, const char* name) {
    return obj_key.empty() ? std::string(name) : obj_key + "." + name;
  }
  static std::string at(const char* array_key, size_t i) { return std::string(array_key) + "[" + std::to_string(i) + "]"; }

 private:
  std::string prefix_;
};

uint64_t parse_checksum(const ManifestParser& p, const std::string& s, const std::string& key) {
  if (s.size() != 16) p.fail(key + " must be 16 lowercase hex digits");
  uint64_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else p.fail(key + " must be 16 lowercase hex digits");
    v = (v << 4) | uint64_t(d);
  }
  return v;
}

// One blob (tensor or file) inside a group, for the overlap/cover checks.
struct Blob {
  uint64_t offset, end;
  std::string what;  // "tensor 'x'" / "file 'y'"
};

// format, version (which must agree with the header's), config, generation_config, provenance.
void parse_top_level(const ManifestParser& p, const json& root, const Header& header, Manifest& m) {
  if (p.string(p.member(root, "", "format"), "format") != "endor") p.fail("format must be \"endor\"");
  const json& version = p.array(p.member(root, "", "version"), "version");
  if (version.size() != 2) p.fail("version must be [major, minor]");
  const uint64_t major = p.u64(version[0], "version[0]"), minor = p.u64(version[1], "version[1]");
  if (major != header.version_major || minor != header.version_minor)
    p.fail("version " + std::to_string(major) + "." + std::to_string(minor) + " disagrees with the header's " +
           std::to_string(header.version_major) + "." + std::to_string(header.version_minor));
  m.version_major = header.version_major;
  m.version_minor = header.version_minor;

  m.config = p.object(p.member(root, "", "config"), "config");
  m.generation_config = p.member(root, "", "generation_config");
  if (!m.generation_config.is_null() && !m.generation_config.is_object())
    p.fail("generation_config must be an object or null");
  m.provenance = p.object(p.member(root, "", "provenance"), "provenance");
}

// groups[i]'s members, its name non-empty and its tier known; the checks against the other groups are
// parse_groups'.
GroupInfo parse_group(const ManifestParser& p, const json& g, const std::string& key) {
  GroupInfo info;
  info.name = p.string(p.member(g, key, "name"), key + ".name");
  const std::string& tier = p.string(p.member(g, key, "tier"), key + ".tier");
  info.offset = p.u64(p.member(g, key, "offset"), key + ".offset");
  info.size = p.u64(p.member(g, key, "size"), key + ".size");
  info.checksum = parse_checksum(p, p.string(p.member(g, key, "checksum"), key + ".checksum"), key + ".checksum");
  if (info.name.empty()) p.fail(key + ".name is empty");
  if (auto t = parse_tier(tier)) info.tier = *t;
  else p.fail("group '" + info.name + "': unknown tier '" + tier + "' (expected gpu, cpu or disk)");
  return info;
}

// The groups: names unique, aligned, inside the data region, in increasing order, disjoint. Returns the
// index of each name.
std::unordered_map<std::string, uint32_t> parse_groups(const ManifestParser& p, const json& root,
                                                       const Header& header, Manifest& m) {
  const uint64_t data_begin = header.data_offset;
  const uint64_t data_end = header.data_offset + header.data_bytes;  // parse_header checked the sum
  const json& groups = p.array(p.member(root, "", "groups"), "groups");
  std::unordered_map<std::string, uint32_t> group_by_name;
  if (groups.size() > UINT32_MAX) p.fail("too many groups");
  uint64_t prev_end = data_begin;
  for (size_t i = 0; i < groups.size(); ++i) {
    const std::string key = ManifestParser::at("groups", i);
    GroupInfo info = parse_group(p, p.object(groups[i], key), key);
    const std::string what = "group '" + info.name + "'";
    if (!group_by_name.emplace(info.name, uint32_t(i)).second) p.fail("duplicate group name '" + info.name + "'");
    if (info.offset % kGroupAlignment != 0)
      p.fail(what + ": offset " + std::to_string(info.offset) + " is not a multiple of " +
             std::to_string(kGroupAlignment));
    uint64_t end;
    if (info.offset < data_begin || __builtin_add_overflow(info.offset, info.size, &end) || end > data_end)
      p.fail(what + ": extent [" + std::to_string(info.offset) + ", +" + std::to_string(info.size) +
             ") is outside the data region [" + std::to_string(data_begin) + ", " + std::to_string(data_end) + ")");
    if (info.offset < prev_end)
      p.fail(what + ": starts at " + std::to_string(info.offset) + ", before the previous group ends (" +
             std::to_string(prev_end) + "): groups must be in file order and must not overlap");
    prev_end = end;
    m.groups.push_back(std::move(info));
  }
  return group_by_name;
}

// Where tensors and files lie: each names a known group, lies inside it, 64-aligned; check_cover then
// checks that each group's blobs are disjoint and span it exactly.
class BlobPlacement {
 public:
  BlobPlacement(const ManifestParser& p, const std::vector<GroupInfo>& groups,
                std::unordered_map<std::string, uint32_t> group_by_name)
      : p_(p), groups_(groups), group_by_name_(std::move(group_by_name)), blobs_(groups.size()) {}

  uint32_t lookup_group(const json& obj, const std::string& key, const std::string& what) const {
    const std::string& name = p_.string(p_.member(obj, key, "group"), key + ".group");
    auto it = group_by_name_.find(name);
    if (it == group_by_name_.end()) p_.fail(what + ": unknown group '" + name + "'");
    return it->second;
  }

  void add(const std::string& what, uint32_t g, uint64_t offset, uint64_t size) {
    const GroupInfo& group = groups_[g];
    uint64_t end;
    if (offset % kTensorAlignment != 0)
      p_.fail(what + ": offset " + std::to_string(offset) + " is not a multiple of " + std::to_string(kTensorAlignment));
    if (offset < group.offset || __builtin_add_overflow(offset, size, &end) || end > group.offset + group.size)
      p_.fail(what + ": extent [" + std::to_string(offset) + ", +" + std::to_string(size) + ") is outside group '" +
              group.name + "' [" + std::to_string(group.offset) + ", " + std::to_string(group.offset + group.size) + ")");
    blobs_[g].push_back({offset, end, what});
  }

  void check_cover() {
    for (size_t g = 0; g < groups_.size(); ++g) {
      const GroupInfo& group = groups_[g];
      std::vector<Blob>& b = blobs_[g];
      std::sort(b.begin(), b.end(), [](const Blob& x, const Blob& y) {
        return x.offset != y.offset ? x.offset < y.offset : x.end < y.end;
      });
      for (size_t k = 1; k < b.size(); ++k)
        if (b[k].offset < b[k - 1].end) p_.fail(b[k].what + " overlaps " + b[k - 1].what);
      if (b.empty() ? group.size != 0 : (b.front().offset != group.offset || b.back().end != group.offset + group.size))
        p_.fail("group '" + group.name + "': extent [" + std::to_string(group.offset) + ", +" +
                std::to_string(group.size) + ") does not span exactly from its first blob to the end of its last");
    }
  }

 private:
  const ManifestParser& p_;
  const std::vector<GroupInfo>& groups_;
  std::unordered_map<std::string, uint32_t> group_by_name_;
  std::vector<std::vector<Blob>> blobs_;
};

// tensors[i]'s form: shape, encoding, dtype (a codec this build does not know is refused by name: SPEC.md
// §8, new codecs are new strings), nnz and the optional group_size and source_dtype.
void parse_tensor_form(const ManifestParser& p, const json& t, const std::string& key, const std::string& what,
                       TensorInfo& info) {
  const json& shape = p.array(p.member(t, key, "shape"), key + ".shape");
  if (shape.empty() || shape.size() > kMaxRank)
    p.fail(what + ": shape must have 1 to " + std::to_string(kMaxRank) + " dimensions");
  for (size_t d = 0; d < shape.size(); ++d)
    info.shape.push_back(p.u64(shape[d], key + ".shape[" + std::to_string(d) + "]"));
  const std::string& encoding = p.string(p.member(t, key, "encoding"), key + ".encoding");
  const std::string& dtype = p.string(p.member(t, key, "dtype"), key + ".dtype");
  if (auto e = parse_encoding(encoding)) info.encoding = *e;
  else p.fail(what + ": unsupported encoding '" + encoding + "' (this build reads dense, bitmap)");
  if (auto d = parse_dtype(dtype)) {
    info.value_type = value_type_of(*d);
    info.int4_params = int4_params_of(*d);
  } else {
    p.fail(what + ": unsupported dtype '" + dtype + "' (this build reads f16, bf16, f32, int8, int4, int4k, int8g)");
  }
  info.nnz = p.u64(p.member(t, key, "nnz"), key + ".nnz");
  if (auto it = t.find("group_size"); it != t.end()) info.group_size = p.u32(*it, key + ".group_size");
  if (auto it = t.find("source_dtype"); it != t.end()) info.source_dtype = p.string(*it, key + ".source_dtype");
}

// A tensor's size must be what its shape, encoding, dtype and nnz make it (SPEC.md's layout formulas).
void check_tensor_size(const ManifestParser& p, const TensorInfo& info, const std::string& what) {
  TensorLayout layout;
  try {
    layout = compute_layout(info.shape, info.encoding, info.value_type, info.group_size, info.nnz, info.int4_params);
  } catch (const Error& e) {
    p.fail(what + ": " + e.what());
  }
  if (info.size != layout.total_bytes)
    p.fail(what + ": size " + std::to_string(info.size) + " does not match its shape/encoding/dtype/nnz (" +
           std::to_string(layout.total_bytes) + " bytes expected)");
}

// items[i]'s name: a string, not empty, not taken by an earlier item of its kind (`names`).
std::string parse_unique_name(const ManifestParser& p, const json& item, const std::string& key, const char* kind,
                              std::unordered_map<std::string, uint32_t>& names, size_t i) {
  std::string name = p.string(p.member(item, key, "name"), key + ".name");
  if (name.empty()) p.fail(key + ".name is empty");
  if (!names.emplace(name, uint32_t(i)).second) p.fail(std::string("duplicate ") + kind + " name '" + name + "'");
  return name;
}

void parse_tensors(const ManifestParser& p, const json& root, BlobPlacement& placement, Manifest& m) {
  const json& tensors = p.array(p.member(root, "", "tensors"), "tensors");
  if (tensors.size() > UINT32_MAX) p.fail("too many tensors");
  std::unordered_map<std::string, uint32_t> tensor_names;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::string key = ManifestParser::at("tensors", i);
    const json& t = p.object(tensors[i], key);
    TensorInfo info;
    info.name = parse_unique_name(p, t, key, "tensor", tensor_names, i);
    const std::string what = "tensor '" + info.name + "'";
    info.group = placement.lookup_group(t, key, what);
    info.offset = p.u64(p.member(t, key, "offset"), key + ".offset");
    info.size = p.u64(p.member(t, key, "size"), key + ".size");
    parse_tensor_form(p, t, key, what, info);
    check_tensor_size(p, info, what);
    placement.add(what, info.group, info.offset, info.size);
    m.groups[info.group].tensors.push_back(uint32_t(i));
    m.tensors.push_back(std::move(info));
  }
}

void parse_files(const ManifestParser& p, const json& root, BlobPlacement& placement, Manifest& m) {
  const json& files = p.array(p.member(root, "", "files"), "files");
  if (files.size() > UINT32_MAX) p.fail("too many files");
  std::unordered_map<std::string, uint32_t> file_names;
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string key = ManifestParser::at("files", i);
    const json& f = p.object(files[i], key);
    FileInfo info;
    info.name = parse_unique_name(p, f, key, "file", file_names, i);
    const std::string what = "file '" + info.name + "'";
    info.group = placement.lookup_group(f, key, what);
    info.offset = p.u64(p.member(f, key, "offset"), key + ".offset");
    info.size = p.u64(p.member(f, key, "size"), key + ".size");
    placement.add(what, info.group, info.offset, info.size);
    m.groups[info.group].files.push_back(uint32_t(i));
    m.files.push_back(std::move(info));
  }
}

// Tensors and files are each listed in file order (groups are, so each group's are too).
template <typename Items>
void check_file_order(const ManifestParser& p, const Items& items, const char* kind, const char* what) {
  for (size_t k = 1; k < items.size(); ++k)
    if (items[k].offset < items[k - 1].offset)
      p.fail(std::string(kind) + " are not listed in file order (" + what + " '" + items[k].name + "' at " +
             std::to_string(items[k].offset) + " follows '" + items[k - 1].name + "' at " +
             std::to_string(items[k - 1].offset) + ")");
}

}  // namespace

// Each check fails with the first error in document order: the top-level keys, then every group, every
// tensor, every file, then the orders and the groups' cover.
Manifest Manifest::from_json(const json& root, const Header& header, const std::string& path) {
  ManifestParser p(path);
  Manifest m;
  p.object(root, "the top level");
  parse_top_level(p, root, header, m);
  std::unordered_map<std::string, uint32_t> group_by_name = parse_groups(p, root, header, m);
  BlobPlacement placement(p, m.groups, std::move(group_by_name));
  parse_tensors(p, root, placement, m);
  parse_files(p, root, placement, m);
  check_file_order(p, m.tensors, "tensors", "tensor");
  check_file_order(p, m.files, "files", "file");
  placement.check_cover();
  return m;
}

}  // namespace endor
