#!/usr/bin/env python3
"""Independent reader of compressed-tensors `pack-quantized` folders (numpy only), written from the
format's description, not from compressed-tensors' code: the check that `endor-pack export --to
compressed-tensors` writes what the format says.

The format (compressed-tensors 0.20, config.json "quantization_config"):
  config_groups.*.weights: num_bits (4 or 8 here), type "int", symmetric, strategy
  ("group" with group_size, "channel", "tensor"), targets (module names, "re:" regexes, or the
  class "Linear"); "ignore" lists modules left unquantized.
  Per quantized module M (a Linear of weight [out, in]):
    M.weight_packed      int32 [out, ceil(in·b/32)]: element i of a row at bits [i·b, (i+1)·b) of
                         the row's little-endian int32 words, stored as q + 2^(b−1), q signed
    M.weight_scale       float [out, in/group_size] (group), [out, 1] (channel), [1] (tensor)
    M.weight_zero_point  int32 [ceil(out·b/32), groups] (asymmetric only): zero points packed
                         the same way along the OUTPUT dimension, stored as zp + 2^(b−1)
    M.weight_shape       int [2] = (out, in)
  Dequantized: x = (q − zp) · scale  (here in float32).

  ct_reader.py DIR                       list the quantized modules and their schemes
  ct_reader.py --check DIR FILE.endor    decode every tensor of DIR and compare it bit for bit with
                                         FILE.endor decoded by tools/endor_decode.py; exit 1 on any
                                         difference
"""
import argparse
import json
import os
import re
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))

ST_DTYPES = {"F16": np.float16, "F32": np.float32, "F64": np.float64, "I8": np.int8, "I16": np.int16,
             "I32": np.int32, "I64": np.int64, "U8": np.uint8, "BF16": "bf16"}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        raw = data[base + b:base + end]
        dt = ST_DTYPES[e["dtype"]]
        if dt == "bf16":  # the upper 16 bits of a float32
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            a = np.frombuffer(raw, dtype=np.dtype(dt).newbyteorder("<"))
        out[name] = a.reshape(e["shape"]) if e["shape"] else a.reshape(())
    return out


def read_folder(d):
    index = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(index):
        tensors = {}
        for shard in sorted(set(json.load(open(index))["weight_map"].values())):
            tensors.update(read_safetensors(os.path.join(d, shard)))
        return tensors
    return read_safetensors(os.path.join(d, "model.safetensors"))


def unpack_fields(words, count, bits):
    """Fields 0..count-1 (b bits each, b in {4, 8}) of a run of little-endian int32 words."""
    per_word = 32 // bits
    w = words.astype(np.uint32)
    shifts = (np.arange(per_word, dtype=np.uint32) * bits)
    fields = (w[..., :, None] >> shifts) & np.uint32((1 << bits) - 1)
    return fields.reshape(*w.shape[:-1], -1)[..., :count].astype(np.int32)


def scheme_for(module, qc):
    def match(target):
        if target == "Linear" or target == module:
            return True
        return target.startswith("re:") and re.match(target[3:], module) is not None
    if any(match(t) for t in qc.get("ignore") or [] if t != "Linear"):
        return None
    for g in qc["config_groups"].values():
        if any(match(t) for t in g.get("targets", [])):
            return g["weights"]
    return None


def dequantize(module, t, w):
    bits = w["num_bits"]
    offset = 1 << (bits - 1)
    out_f, in_f = (int(x) for x in t[module + ".weight_shape"])
    q = unpack_fields(t[module + ".weight_packed"], in_f, bits) - offset            # [out, in]
    scale = t[module + ".weight_scale"].astype(np.float32)
    if w["strategy"] == "group":
        gs = w["group_size"]
        groups = in_f // gs
    elif w["strategy"] == "channel":
        gs, groups = in_f, 1
    else:
        gs, groups = in_f, 1
        scale = np.broadcast_to(scale.reshape(1, 1), (out_f, 1))
    scale = scale.reshape(out_f, groups)
    if w.get("symmetric", True):
        zp = np.zeros((out_f, groups), dtype=np.int32)
    else:
        zp = unpack_fields(t[module + ".weight_zero_point"].T, out_f, bits).T - offset  # [out, groups]
    d = (q.reshape(out_f, groups, gs) - zp[:, :, None]).astype(np.float32)
    return (d * scale[:, :, None]).reshape(out_f, in_f)


def decode_folder(d):
    cfg = json.load(open(os.path.join(d, "config.json")))
    qc = cfg.get("quantization_config") or {}
    if qc.get("quant_method") != "compressed-tensors" or qc.get("format") != "pack-quantized":
        raise SystemExit(f"{d}: not a compressed-tensors pack-quantized folder")
    t = read_folder(d)
    out, schemes = {}, {}
    for name in t:
        if name.endswith(".weight_packed"):
            module = name[:-len(".weight_packed")]
            w = scheme_for(module, qc)
            if w is None:
                raise SystemExit(f"{d}: {module} is packed but no config group targets it")
            out[module + ".weight"] = dequantize(module, t, w)
            schemes[module] = w
    for name, a in t.items():
        if not re.search(r"\.weight_(packed|scale|zero_point|shape)$", name):
            out[name] = a.astype(np.float32)
    return out, schemes


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder")
    ap.add_argument("endor", nargs="?")
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    values, schemes = decode_folder(a.folder)
    if not a.check:
        for m, w in sorted(schemes.items()):
            print(f"{m}: int{w['num_bits']} {w['strategy']} group {w.get('group_size')} symmetric {w.get('symmetric')}")
        return 0
    sys.path.insert(0, HERE)
    import endor_decode
    e = endor_decode.EndorFile(a.endor)
    bad = 0
    for name in e.tensors:
        if name not in values:
            print(f"MISSING {name}")
            bad += 1
            continue
        want = e.decode(name).reshape(-1)
        got = values[name].reshape(-1)
        if want.shape != got.shape or not np.array_equal(want.view(np.uint32), got.view(np.uint32)):
            n = int(np.sum(want.view(np.uint32) != got.view(np.uint32))) if want.shape == got.shape else -1
            print(f"DIFFERS {name}: {n} elements")
            bad += 1
    extra = set(values) - set(e.tensors)
    for name in sorted(extra):
        print(f"EXTRA {name}")
    print(f"{len(e.tensors)} tensors, {len(schemes)} packed modules, {bad + len(extra)} problems")
    return 1 if bad or extra else 0


if __name__ == "__main__":
    sys.exit(main())
