// libFuzzer target for the .endor reader: open (all validation), verify, decode every tensor.
// Each input is tried twice: as given (exercising the checksum checks), and with the header and
// manifest checksums repaired so mutations reach the manifest parser and the decoders.
// Oracle: besides sanitizer reports, anything open() accepts must satisfy the extent
// invariants below; a violation traps.
#include <xxhash.h>

#include <cstring>
#include <vector>

#include "endor/format.h"

using namespace endor;

namespace {

void check_invariant(bool ok) {
  if (!ok) __builtin_trap();
}

void exercise(const uint8_t* data, size_t size) {
  std::unique_ptr<ContainerReader> r;
  try {
    r = ContainerReader::open_bytes(data, size, "fuzz.endor");
  } catch (const Error&) {
    return;
  }
  const Header& h = r->header();
  const Manifest& m = r->manifest();
  check_invariant(h.file_bytes == size && h.manifest_offset + h.manifest_bytes == size);
  for (size_t g = 0; g < m.groups.size(); ++g) {
    const GroupInfo& grp = m.groups[g];
    check_invariant(grp.offset % kGroupAlignment == 0 && grp.offset >= h.data_offset &&
                    grp.offset + grp.size <= h.manifest_offset);
    (void)r->verify_group(g);
  }
  try {
    r->verify_all();
  } catch (const Error&) {
  }
  (void)m.to_json().dump();
  for (const FileInfo& f : m.files) check_invariant(r->file(f.name)->size() == f.size);
  std::vector<float> out;
  for (const TensorInfo& t : m.tensors) {
    const TensorView v = r->tensor(t);
    const GroupInfo& grp = m.groups.at(t.group);
    check_invariant(t.offset % kTensorAlignment == 0 && t.offset >= grp.offset &&
                    t.offset + v.layout.total_bytes <= grp.offset + grp.size && v.layout.total_bytes == t.size);
    try {
      validate_bitmap(v, t.name);
    } catch (const Error&) {
      continue;  // decode_rows_f32's contract requires a valid bitmap
    }
    out.resize(v.layout.rows * v.layout.cols);  // bounded: every element costs >= 1 bit of the file
    decode_rows_f32(v, 0, v.layout.rows, out.data());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  exercise(data, size);
  if (size < kHeaderBytes) return 0;
  std::vector<uint8_t> fixed(data, data + size);
  uint64_t m_off, m_bytes;
  std::memcpy(&m_off, &fixed[48], 8);
  std::memcpy(&m_bytes, &fixed[56], 8);
  if (m_off <= size && m_bytes <= size - m_off) {
    const uint64_t sum = XXH3_64bits(fixed.data() + m_off, m_bytes);
    std::memcpy(&fixed[64], &sum, 8);
  }
  const uint64_t hsum = XXH3_64bits(fixed.data(), 120);
  std::memcpy(&fixed[120], &hsum, 8);
  exercise(fixed.data(), fixed.size());
  return 0;
}
