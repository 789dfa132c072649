// The fixed 128-byte header (SPEC.md §3): serialisation and the validation a reader performs
// before it trusts any offset.
#include <xxhash.h>

#include <cstdio>
#include <cstring>

#include "detail.h"

namespace endor {

using detail::fail;
using detail::load_u16;
using detail::load_u32;
using detail::load_u64;

namespace {
// Field offsets inside the header (SPEC.md §3).
constexpr size_t kOffMajor = 8, kOffMinor = 10, kOffHeaderBytes = 12, kOffAlignment = 16,
                 kOffFlags = 20, kOffFileBytes = 24, kOffDataOffset = 32, kOffDataBytes = 40,
                 kOffManifestOffset = 48, kOffManifestBytes = 56, kOffManifestChecksum = 64,
                 kOffReserved = 72, kOffHeaderChecksum = 120;

std::string hex_u32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}
}  // namespace

void write_header(const Header& h, uint8_t out[kHeaderBytes]) {
  std::memset(out, 0, kHeaderBytes);
  std::memcpy(out, kMagic, 8);
  detail::store_u16(out + kOffMajor, h.version_major);
  detail::store_u16(out + kOffMinor, h.version_minor);
  detail::store_u32(out + kOffHeaderBytes, h.header_bytes);
  detail::store_u32(out + kOffAlignment, h.alignment);
  detail::store_u32(out + kOffFlags, h.flags);
  detail::store_u64(out + kOffFileBytes, h.file_bytes);
  detail::store_u64(out + kOffDataOffset, h.data_offset);
  detail::store_u64(out + kOffDataBytes, h.data_bytes);
  detail::store_u64(out + kOffManifestOffset, h.manifest_offset);
  detail::store_u64(out + kOffManifestBytes, h.manifest_bytes);
  detail::store_u64(out + kOffManifestChecksum, h.manifest_checksum);
  detail::store_u64(out + kOffHeaderChecksum, XXH3_64bits(out, kOffHeaderChecksum));
}

Header parse_header(const uint8_t* bytes, uint64_t n_bytes, const std::string& path) {
  if (n_bytes < kHeaderBytes)
    fail(path, "file is too short (" + std::to_string(n_bytes) + " bytes) to hold the " +
                   std::to_string(kHeaderBytes) + "-byte .endor header (truncated?)");
  if (std::memcmp(bytes, kMagic, 8) != 0) fail(path, "not an .endor file (bad magic)");

  Header h;
  h.version_major = load_u16(bytes + kOffMajor);
  h.version_minor = load_u16(bytes + kOffMinor);
  // The version is checked before the checksum: a future major may lay the header out differently.
  if (h.version_major != kVersionMajor)
    fail(path, "unsupported format version " + std::to_string(h.version_major) + "." +
                   std::to_string(h.version_minor) + " (this build reads " + std::to_string(kVersionMajor) +
                   ".x)");
  const uint64_t stored = load_u64(bytes + kOffHeaderChecksum);
  const uint64_t computed = XXH3_64bits(bytes, kOffHeaderChecksum);
  if (stored != computed)
    fail(path, "header checksum mismatch (stored " + detail::hex16(stored) + ", computed " +
                   detail::hex16(computed) + ")");

  h.header_bytes = load_u32(bytes + kOffHeaderBytes);
  h.alignment = load_u32(bytes + kOffAlignment);
  h.flags = load_u32(bytes + kOffFlags);
  h.file_bytes = load_u64(bytes + kOffFileBytes);
  h.data_offset = load_u64(bytes + kOffDataOffset);
  h.data_bytes = load_u64(bytes + kOffDataBytes);
  h.manifest_offset = load_u64(bytes + kOffManifestOffset);
  h.manifest_bytes = load_u64(bytes + kOffManifestBytes);
  h.manifest_checksum = load_u64(bytes + kOffManifestChecksum);

  if (h.flags != 0) fail(path, "header flags " + hex_u32(h.flags) + " are not 0 (unknown feature bits)");
  if (h.header_bytes != kHeaderBytes)
    fail(path, "header_bytes is " + std::to_string(h.header_bytes) + ", expected " + std::to_string(kHeaderBytes));
  if (h.alignment != kGroupAlignment)
    fail(path, "alignment is " + std::to_string(h.alignment) + ", expected " + std::to_string(kGroupAlignment));
  for (size_t i = kOffReserved; i < kOffHeaderChecksum; ++i)
    if (bytes[i] != 0) fail(path, "reserved header byte " + std::to_string(i) + " is not 0");
  if (h.file_bytes != n_bytes)
    fail(path, "header says the file has " + std::to_string(h.file_bytes) + " bytes but it has " +
                   std::to_string(n_bytes) + " (truncated or appended to?)");
  if (h.manifest_bytes > kMaxManifestBytes)
    fail(path, "manifest of " + std::to_string(h.manifest_bytes) + " bytes exceeds the " +
                   std::to_string(kMaxManifestBytes >> 20) + " MiB limit");
  if (h.manifest_bytes == 0) fail(path, "manifest is empty");
  if (h.data_offset < kHeaderBytes || h.data_offset % h.alignment != 0)
    fail(path, "data_offset " + std::to_string(h.data_offset) + " is not a multiple of " +
                   std::to_string(h.alignment) + " after the header");
  // [data_offset, manifest_offset) holds the groups, [manifest_offset, file_bytes) the manifest.
  uint64_t data_end, manifest_end;
  if (__builtin_add_overflow(h.data_offset, h.data_bytes, &data_end) || data_end != h.manifest_offset)
    fail(path, "data region [" + std::to_string(h.data_offset) + " + " + std::to_string(h.data_bytes) +
                   ") does not end where the manifest starts (" + std::to_string(h.manifest_offset) + ")");
  if (__builtin_add_overflow(h.manifest_offset, h.manifest_bytes, &manifest_end) || manifest_end != h.file_bytes)
    fail(path, "manifest region [" + std::to_string(h.manifest_offset) + " + " +
                   std::to_string(h.manifest_bytes) + ") does not end at the end of the file (" +
                   std::to_string(h.file_bytes) + ")");
  return h;
}

}  // namespace endor
