#!/usr/bin/env python3
"""Independent reader of .endor v1 files, written from format-spec/SPEC.md only (numpy; the
checksums are verified when the `xxhash` module is importable, and skipped with a note otherwise).

  endor_decode.py FILE                    list the tensors, decode each, check the bitmap index
  endor_decode.py FILE --tensor NAME      print one tensor's decoded values
  endor_decode.py --check-vectors DIR     decode every DIR/*.endor, compare bit for bit with
                                          DIR/*.expected.json; exit 1 on any mismatch

It exists to prove the spec is implementable from its text; the C++ reader is the product.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

MAGIC = b"\x89ENDOR\r\n"
HEADER_BYTES = 128
ALIGNMENT = 4096
INDEX_BLOCK_COLS = 4096
MAX_MANIFEST_BYTES = 64 << 20
VALUE_BITS = {"f16": 16, "bf16": 16, "f32": 32, "int8": 8, "int4": 4, "int4k": 4, "int8g": 8}
INT4K_SUPER = 8  # parameters per int4k super-block (SPEC.md §6.7)

try:
    import xxhash  # optional
except ImportError:
    xxhash = None


class FormatError(Exception):
    pass


def align16(x):
    return (x + 15) // 16 * 16


def layout(shape, encoding, dtype, group_size, nnz):
    """SPEC.md §6.2: byte offsets of the sections of a tensor blob."""
    if not 1 <= len(shape) <= 8 or any(d < 1 for d in shape):
        raise FormatError(f"bad shape {shape}")
    rows, cols = (1, shape[0]) if len(shape) == 1 else (shape[0], int(np.prod(shape[1:], dtype=object)))
    numel = rows * cols
    if encoding == "dense" and nnz != numel:
        raise FormatError("dense tensor needs nnz == numel")
    if encoding == "bitmap" and (nnz > numel or nnz > 2**32 - 1):
        raise FormatError("nnz out of range")
    if (dtype in ("int4", "int4k", "int8g")) != (group_size >= 1):
        raise FormatError("group_size must be >= 1 for int4/int4k/int8g and 0 otherwise")
    L = {"rows": rows, "cols": cols, "nnz": nnz, "group_size": group_size}
    sections = []
    if encoding == "bitmap":
        L["words_per_row"] = -(-cols // 64)
        L["blocks_per_row"] = -(-cols // INDEX_BLOCK_COLS)
        sections += [("bitmap", rows * L["words_per_row"] * 8), ("index", rows * L["blocks_per_row"] * 4)]
    sections.append(("values", -(-nnz // 2) if VALUE_BITS[dtype] == 4 else nnz * VALUE_BITS[dtype] // 8))
    if dtype == "int8":
        sections.append(("scales", rows * 4))
    if dtype == "int4":
        L["groups_per_row"] = -(-cols // group_size)
        sections += [("scales", rows * L["groups_per_row"] * 2), ("mins", rows * L["groups_per_row"] * 2)]
    if dtype == "int8g":  # §6.8: one f16 scale per (row, group), no mins
        L["groups_per_row"] = -(-cols // group_size)
        sections.append(("scales", rows * L["groups_per_row"] * 2))
    if dtype == "int4k":
        L["groups_per_row"] = -(-cols // group_size)
        L["n_super"] = -(-(rows * L["groups_per_row"]) // INT4K_SUPER)
        sections += [("scales", L["n_super"] * 4), ("mins", L["n_super"] * 12)]
    cursor, total = 0, 0
    for name, n in sections:
        offset = align16(cursor)
        L[name] = (offset, n)
        cursor = offset + n
        if n:
            total = cursor
    L["total_bytes"] = total
    return L


class EndorFile:
    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            self.data = f.read()
        d = self.data
        if len(d) < HEADER_BYTES:
            raise FormatError("file too short")
        if d[:8] != MAGIC:
            raise FormatError("bad magic")
        major, minor = struct.unpack_from("<HH", d, 8)
        if major != 1:
            raise FormatError(f"unsupported format version {major}.{minor} (this reader reads 1.x)")
        (hdr_bytes, alignment, flags, file_bytes, data_offset, data_bytes, m_off, m_bytes, m_sum) = struct.unpack_from(
            "<IIIQQQQQQ", d, 12)
        (hdr_sum,) = struct.unpack_from("<Q", d, 120)
        self.checksums_verified = xxhash is not None
        if xxhash is not None and xxhash.xxh3_64_intdigest(d[:120]) != hdr_sum:
            raise FormatError("header checksum mismatch")
        if flags != 0 or hdr_bytes != HEADER_BYTES or alignment != ALIGNMENT or any(d[72:120]):
            raise FormatError("bad header fields")
        if file_bytes != len(d):
            raise FormatError("file length does not match the header")
        if not (0 < m_bytes <= MAX_MANIFEST_BYTES) or data_offset % ALIGNMENT or data_offset < HEADER_BYTES:
            raise FormatError("bad region sizes")
        if data_offset + data_bytes != m_off or m_off + m_bytes != file_bytes:
            raise FormatError("data and manifest regions do not tile the file")
        manifest_bytes = d[m_off:m_off + m_bytes]
        if xxhash is not None and xxhash.xxh3_64_intdigest(manifest_bytes) != m_sum:
            raise FormatError("manifest checksum mismatch")
        self.manifest = json.loads(manifest_bytes.decode("utf-8"))
        m = self.manifest
        if m.get("format") != "endor" or m.get("version") != [major, minor]:
            raise FormatError("manifest format/version disagree with the header")
        self.groups = {g["name"]: g for g in m["groups"]}
        for g in m["groups"]:
            if g["offset"] % ALIGNMENT or g["offset"] < data_offset or g["offset"] + g["size"] > m_off:
                raise FormatError(f"group {g['name']} outside the data region")
            if xxhash is not None:
                if f"{xxhash.xxh3_64_intdigest(d[g['offset']:g['offset'] + g['size']]):016x}" != g["checksum"]:
                    raise FormatError(f"group {g['name']} checksum mismatch")
        self.tensors = {}
        for t in m["tensors"]:
            g = self.groups[t["group"]]
            L = layout(t["shape"], t["encoding"], t["dtype"], t.get("group_size", 0), t["nnz"])
            if L["total_bytes"] != t["size"]:
                raise FormatError(f"tensor {t['name']}: size does not match the layout")
            if t["offset"] % 64 or t["offset"] < g["offset"] or t["offset"] + t["size"] > g["offset"] + g["size"]:
                raise FormatError(f"tensor {t['name']} outside its group")
            self.tensors[t["name"]] = (t, L)

    def file(self, name):
        for f in self.manifest["files"]:
            if f["name"] == name:
                return self.data[f["offset"]:f["offset"] + f["size"]]
        return None

    def decode(self, name):
        """SPEC.md §6.3: the decoded f32 value of every element, shape [rows, cols]."""
        t, L = self.tensors[name]
        blob = self.data[t["offset"]:t["offset"] + t["size"]]
        rows, cols, nnz, dtype = L["rows"], L["cols"], L["nnz"], t["dtype"]

        def section(key, np_dtype, count):
            off, _ = L[key]
            return np.frombuffer(blob, dtype=np_dtype, count=count, offset=off)

        if t["encoding"] == "bitmap":
            wpr, bpr = L["words_per_row"], L["blocks_per_row"]
            raw = np.frombuffer(blob, dtype=np.uint8, count=rows * wpr * 8, offset=L["bitmap"][0])
            bits = np.unpackbits(raw.reshape(rows, wpr * 8), axis=1, bitorder="little")  # bit c%64 of word c/64
            if bits[:, cols:].any():
                raise FormatError(f"tensor {name}: padding bits set")
            present = bits[:, :cols].astype(bool)
            if int(present.sum()) != nnz:
                raise FormatError(f"tensor {name}: bitmap popcount != nnz")
            index = section("index", "<u4", rows * bpr).reshape(rows, bpr)
            before = np.concatenate([[0], np.cumsum(present.reshape(-1))])  # values before flat position
            starts = np.arange(rows)[:, None] * cols + np.arange(bpr)[None, :] * INDEX_BLOCK_COLS
            if not np.array_equal(index.astype(np.int64), before[starts]):
                raise FormatError(f"tensor {name}: bitmap index inconsistent")
        else:
            present = np.ones((rows, cols), dtype=bool)
        r_idx, c_idx = np.nonzero(present)  # row-major order of the stored values

        if dtype == "f16":
            vals = section("values", "<f2", nnz).astype(np.float32)
        elif dtype == "bf16":
            vals = (section("values", "<u2", nnz).astype(np.uint32) << 16).view(np.float32)
        elif dtype == "f32":
            vals = section("values", "<f4", nnz).copy()
        elif dtype == "int8":
            q = section("values", "i1", nnz).astype(np.float32)
            scale = section("scales", "<f4", rows)
            vals = q * scale[r_idx]
        elif dtype == "int8g":
            q = section("values", "i1", nnz).astype(np.float32)
            gpr = L["groups_per_row"]
            scale = section("scales", "<f2", rows * gpr).astype(np.float32).reshape(rows, gpr)
            vals = q * scale[r_idx, c_idx // L["group_size"]]  # exact in f32
        elif dtype in ("int4", "int4k"):
            packed = section("values", "u1", -(-nnz // 2))
            codes = np.empty(packed.size * 2, dtype=np.uint8)
            codes[0::2] = packed & 0x0F  # even value: low nibble
            codes[1::2] = packed >> 4
            gpr = L["groups_per_row"]
            if dtype == "int4":
                scale = section("scales", "<f2", rows * gpr).astype(np.float32).reshape(rows, gpr)
                mins = section("mins", "<f2", rows * gpr).astype(np.float32).reshape(rows, gpr)
            else:  # int4k: per super-block f16 (d, dmin) and 16 six-bit codes, LSB first
                ns = L["n_super"]
                dd = section("scales", "<f2", 2 * ns).astype(np.float32).reshape(ns, 2)
                raw = section("mins", "u1", 12 * ns).reshape(ns, 12)
                bits = np.unpackbits(raw, axis=1, bitorder="little").reshape(ns, 16, 6)
                codes6 = (bits * (1 << np.arange(6, dtype=np.uint8))).sum(axis=2).astype(np.float32)  # [ns, 16]
                sc = (dd[:, :1] * codes6[:, :8]).reshape(-1)[: rows * gpr]   # exact in f32
                mn = -(dd[:, 1:] * codes6[:, 8:]).reshape(-1)[: rows * gpr]
                scale, mins = sc.reshape(rows, gpr), mn.reshape(rows, gpr)
            g_idx = c_idx // L["group_size"]
            vals = codes[:nnz].astype(np.float32) * scale[r_idx, g_idx] + mins[r_idx, g_idx]
        else:
            raise FormatError(f"tensor {name}: unsupported dtype {dtype}")
        out = np.zeros((rows, cols), dtype=np.float32)  # absent elements: +0.0
        out[r_idx, c_idx] = vals
        return out


def schema_errors(manifest):
    """Validates against format-spec/manifest.schema.json when jsonschema is importable."""
    try:
        import jsonschema
    except ImportError:
        return None
    here = os.path.dirname(os.path.abspath(__file__))
    schema = json.load(open(os.path.join(here, "..", "format-spec", "manifest.schema.json")))
    validator = jsonschema.Draft202012Validator(schema)
    return [e.message for e in validator.iter_errors(manifest)]


def check_vectors(directory):
    failures = 0
    schema_checked = False
    names = sorted(f[:-len(".endor")] for f in os.listdir(directory) if f.endswith(".endor"))
    for name in names:
        expected = json.load(open(os.path.join(directory, name + ".expected.json")))
        ef = EndorFile(os.path.join(directory, name + ".endor"))
        problems = []
        for t in expected["tensors"]:
            got = ef.decode(t["name"]).reshape(-1)
            want = np.array(t["values"], dtype=np.float64).astype(np.float32)
            if not np.array_equal(got.view(np.uint32), want.view(np.uint32)):
                bad = int(np.nonzero(got.view(np.uint32) != want.view(np.uint32))[0][0])
                problems.append(f"{t['name']}[{bad}] = {got[bad]!r}, expected {want[bad]!r}")
        for f in expected["files"]:
            if ef.file(f["name"]) != f["text"].encode("utf-8"):
                problems.append(f"file {f['name']} differs")
        errors = schema_errors(ef.manifest)
        if errors is not None:
            schema_checked = True
            problems += [f"schema: {e}" for e in errors]
        status = "ok" if not problems else "FAIL " + "; ".join(problems)
        print(f"{name}: {len(expected['tensors'])} tensor(s) {status}")
        failures += bool(problems)
    if xxhash is None:
        print("note: checksums not verified (python module xxhash not installed)")
    if not schema_checked:
        print("note: manifests not validated against the schema (python module jsonschema not installed)")
    print(f"{len(names) - failures}/{len(names)} vectors match")
    return 1 if failures or not names else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", nargs="?")
    ap.add_argument("--tensor")
    ap.add_argument("--check-vectors", metavar="DIR")
    args = ap.parse_args()
    try:
        if args.check_vectors:
            return check_vectors(args.check_vectors)
        if not args.file:
            ap.error("give a FILE or --check-vectors DIR")
        ef = EndorFile(args.file)
        if args.tensor:
            np.set_printoptions(threshold=sys.maxsize)
            print(ef.decode(args.tensor))
            return 0
        for name, (t, L) in ef.tensors.items():
            ef.decode(name)
            print(f"{name}: {t['encoding']} {t['dtype']} shape {t['shape']} nnz {t['nnz']} bytes {t['size']}")
        return 0
    except (FormatError, OSError, ValueError, KeyError) as e:
        print(f"error: {args.file or args.check_vectors}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
