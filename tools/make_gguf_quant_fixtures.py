#!/usr/bin/env python3
"""Make the fixtures for reading llama.cpp's quantized GGUF types (tests/fixtures/gguf/), read by
tests/packer/test_gguf.cpp. Reference: gguf-py's gguf.quants.dequantize (numpy, f32).

  quant-blocks.gguf   for each type T of Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 IQ4_NL Q2_K Q3_K Q4_K Q5_K Q6_K
                      IQ4_XS: tensor "T" of random block bytes (seed 0; the f16 fields d / dmin / m
                      random finite values ±10^[-3, 0.5]), then two edge blocks (every other byte
                      0x00 with d = 65504 and dmin/m = −65504; every other byte 0xFF with d = 2^-24,
                      the smallest f16 subnormal), and tensor "T.expected", F32: gguf-py's
                      dequantization of "T".
  llama-mix.gguf      a one-layer llama (hidden 256, 2 heads / 1 KV head, FFN 256, a 260-token
                      byte-level vocabulary as tests/packer/gguf_builder.h's, untied output) with
                      random f16 weights, quantized by llama.cpp's own llama-quantize (Q4_K_M as the
                      base, one tensor per type with --tensor-type / --output-tensor-type /
                      --token-embedding-type: Q6_K Q4_K Q5_K Q3_K Q2_K IQ4_XS IQ4_NL Q5_0 Q5_1).
  llama-mix.json      per tensor of llama-mix.gguf: its type, element count, XXH64 (seed 0) of
                      gguf-py's dequantization as f32 little-endian bytes (GGUF order), and the bit
                      patterns of its first 64 values.

Usage: python3 tools/make_gguf_quant_fixtures.py [--out DIR] [--llama-quantize PATH]
  --llama-quantize defaults to ~/.cache/endor/peers/llama-build/bin/llama-quantize (built by
  bench/peers/build_llama.sh); without it only quant-blocks.gguf is made.
Needs: numpy, gguf, xxhash (tools/requirements-gguf-quants.txt).
"""
import argparse
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# Byte offsets of each block's f16 fields: the scale(s) first, then minimums (written negative-max
# in the first edge block).
F16_FIELDS = {
    "Q8_0": ([0], []), "Q4_0": ([0], []), "Q4_1": ([0], [2]), "Q5_0": ([0], []), "Q5_1": ([0], [2]),
    "IQ4_NL": ([0], []), "Q2_K": ([80], [82]), "Q3_K": ([108], []), "Q4_K": ([0], [2]),
    "Q5_K": ([0], [2]), "Q6_K": ([208], []), "IQ4_XS": ([0], []),
}
RANDOM_BLOCKS = {32: 8, 256: 3}

# llama-mix.gguf: which tensor gets which type.
MIX = {
    "token_embd.weight": "Q6_K",
    "blk.0.attn_q.weight": "Q4_K",
    "blk.0.attn_k.weight": "Q5_K",
    "blk.0.attn_v.weight": "Q3_K",
    "blk.0.attn_output.weight": "Q2_K",
    "blk.0.ffn_gate.weight": "IQ4_XS",
    "blk.0.ffn_up.weight": "IQ4_NL",
    "blk.0.ffn_down.weight": "Q5_0",
    "output.weight": "Q5_1",
}
HIDDEN, HEADS, KV_HEADS, FFN, CTX = 256, 2, 1, 256, 128


def random_blocks(gguf, name, rng):
    qt = gguf.GGMLQuantizationType[name]
    block, size = gguf.GGML_QUANT_SIZES[qt]
    scales, mins = F16_FIELDS[name]
    n = RANDOM_BLOCKS[block]
    blocks = rng.integers(0, 256, size=(n + 2, size), dtype=np.uint8)
    def put(b, off, value):
        blocks[b, off:off + 2] = np.array([value], dtype=np.float16).view(np.uint8)
    for b in range(n):
        for off in scales + mins:
            put(b, off, rng.choice([-1.0, 1.0]) * 10.0 ** rng.uniform(-3, 0.5))
    blocks[n, :] = 0x00
    blocks[n + 1, :] = 0xFF
    for off in scales:
        put(n, off, 65504.0)
        blocks[n + 1, off:off + 2] = np.array([1, 0], dtype=np.uint8)  # f16 0x0001 = 2^-24
    for off in mins:
        put(n, off, -65504.0)
        blocks[n + 1, off:off + 2] = np.array([1, 0], dtype=np.uint8)
    values = gguf.quants.dequantize(blocks.reshape(-1), qt).astype(np.float32, copy=False)
    assert values.size == (n + 2) * block and np.all(np.isfinite(values)), name
    return qt, blocks.reshape(1, -1), values


def make_blocks(gguf, out):
    rng = np.random.default_rng(0)
    path = os.path.join(out, "quant-blocks.gguf")
    w = gguf.GGUFWriter(path, "none")
    for name in F16_FIELDS:
        qt, raw, values = random_blocks(gguf, name, rng)
        w.add_tensor(name, raw, raw_dtype=qt)
        w.add_tensor(name + ".expected", values.reshape(1, -1))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print("wrote", path, os.path.getsize(path), "bytes")


def byte_level_tokens():
    # GPT-2's bytes_to_unicode alphabet, 3 merges and a control token (tests/packer/gguf_builder.h).
    keep = [c for c in range(256) if 33 <= c <= 126 or 161 <= c <= 172 or c >= 174]
    extra, tokens = 0, []
    for c in range(256):
        if c in keep:
            tokens.append(chr(c))
        else:
            tokens.append(chr(256 + extra))
            extra += 1
    return tokens + ["th", "the", "\u0120the", "<|endoftext|>"]


def make_mix(gguf, out, quantize):
    tokens = byte_level_tokens()
    V = len(tokens)
    rng = np.random.default_rng(1)
    def rand(*shape):
        return (rng.standard_normal(shape) * 0.05).astype(np.float16)
    head_dim = HIDDEN // HEADS
    tensors = [
        ("token_embd.weight", rand(V, HIDDEN)),
        ("blk.0.attn_norm.weight", (1 + rng.standard_normal(HIDDEN) * 0.05).astype(np.float32)),
        ("blk.0.attn_q.weight", rand(HIDDEN, HIDDEN)),
        ("blk.0.attn_k.weight", rand(KV_HEADS * head_dim, HIDDEN)),
        ("blk.0.attn_v.weight", rand(KV_HEADS * head_dim, HIDDEN)),
        ("blk.0.attn_output.weight", rand(HIDDEN, HIDDEN)),
        ("blk.0.ffn_norm.weight", (1 + rng.standard_normal(HIDDEN) * 0.05).astype(np.float32)),
        ("blk.0.ffn_gate.weight", rand(FFN, HIDDEN)),
        ("blk.0.ffn_up.weight", rand(FFN, HIDDEN)),
        ("blk.0.ffn_down.weight", rand(HIDDEN, FFN)),
        ("output_norm.weight", (1 + rng.standard_normal(HIDDEN) * 0.05).astype(np.float32)),
        ("output.weight", rand(V, HIDDEN)),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        f16 = os.path.join(tmp, "mix-F16.gguf")
        w = gguf.GGUFWriter(f16, "llama")
        w.add_name("llama-quantize type mix fixture")
        w.add_context_length(CTX)
        w.add_block_count(1)
        w.add_embedding_length(HIDDEN)
        w.add_feed_forward_length(FFN)
        w.add_head_count(HEADS)
        w.add_head_count_kv(KV_HEADS)
        w.add_rope_freq_base(10000.0)
        w.add_layer_norm_rms_eps(1e-5)
        w.add_rope_dimension_count(head_dim)
        w.add_vocab_size(V)
        w.add_file_type(1)  # MOSTLY_F16
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("gpt-2")
        w.add_token_list(tokens)
        w.add_token_types([1] * (V - 1) + [3])
        w.add_token_merges(["t h", "th e", "\u0120 the"])
        w.add_bos_token_id(V - 1)
        w.add_eos_token_id(V - 1)
        w.add_add_bos_token(False)
        for name, x in tensors:
            w.add_tensor(name, x)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        path = os.path.join(out, "llama-mix.gguf")
        cmd = [quantize, "--token-embedding-type", MIX["token_embd.weight"].lower(),
               "--output-tensor-type", MIX["output.weight"].lower()]
        for name, t in MIX.items():
            if name.startswith("blk."):
                cmd += ["--tensor-type", name.split(".")[2] + "=" + t.lower()]
        cmd += [f16, path, "Q4_K_M"]
        print(" ".join(cmd))
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit("llama-quantize failed:\n" + r.stdout[-3000:] + r.stderr[-3000:])

    import xxhash
    reader = gguf.GGUFReader(path)
    expected = {}
    for t in reader.tensors:
        qt = gguf.GGMLQuantizationType(t.tensor_type)
        if t.name in MIX and qt.name != MIX[t.name]:
            sys.exit(f"llama-quantize gave {t.name} type {qt.name}, not {MIX[t.name]}")
        values = gguf.quants.dequantize(np.asarray(t.data), qt).astype(np.float32, copy=False).reshape(-1)
        expected[t.name] = {"type": qt.name, "elements": int(values.size),
                            "xxh64": xxhash.xxh64_hexdigest(values.astype("<f4").tobytes()),
                            "first_bits": [int(b) for b in values[:64].view(np.uint32)]}
    commit = "unknown"
    info = os.path.join(os.path.dirname(os.path.dirname(quantize)), "common", "build-info.cpp")
    if os.path.exists(info):
        m = re.search(r'LLAMA_COMMIT\s*=\s*"([0-9a-f]+)"', open(info).read())
        commit = m.group(1) if m else commit
    with open(os.path.join(out, "llama-mix.json"), "w") as f:
        json.dump({"made_by": " ".join(os.path.basename(c) if c in (quantize,) else c for c in cmd[:-3]) +
                   " F16.gguf llama-mix.gguf Q4_K_M", "llama_cpp_commit": commit,
                   "gguf_py": importlib.metadata.version("gguf"), "tensors": expected}, f, indent=1)
        f.write("\n")
    print("wrote", path, os.path.getsize(path), "bytes;", len(expected), "tensors")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "gguf"))
    ap.add_argument("--llama-quantize",
                    default=os.path.expanduser("~/.cache/endor/peers/llama-build/bin/llama-quantize"))
    args = ap.parse_args()
    import gguf
    os.makedirs(args.out, exist_ok=True)
    make_blocks(gguf, args.out)
    if os.access(args.llama_quantize, os.X_OK):
        make_mix(gguf, args.out, args.llama_quantize)
    else:
        print(f"no llama-quantize at {args.llama_quantize} (bench/peers/build_llama.sh builds it): "
              "llama-mix.gguf not made", file=sys.stderr)


if __name__ == "__main__":
    main()
