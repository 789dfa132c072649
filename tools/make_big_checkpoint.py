#!/usr/bin/env python3
"""Writes a large Llama-shaped checkpoint with random f16 weights, for measuring endor-pack's
memory (peak RSS) and speed on realistic tensor sizes. Streams tensor by tensor in row chunks,
so generating a 4 GB checkpoint needs well under 1 GB of memory. The data is throwaway: do not
commit it.

Usage (defaults give ~4.2 GB: Llama-2-7B layer shapes, 9 layers, 2 shards):
  nice -n 10 python3 tools/make_big_checkpoint.py /tmp/big-llama
  nice -n 10 /usr/bin/time -v build/packer/endor-pack prune /tmp/big-llama -o /tmp/big.endor --sparsity 0.5
"""
import argparse
import json
import os
import struct

import numpy as np


def tensor_plan(a):
    """(name, shape, scale) in file order, Llama naming with the model. prefix."""
    hd = a.hidden // a.heads
    kv = a.kv_heads * hd
    plan = [("model.embed_tokens.weight", (a.vocab, a.hidden), 0.02)]
    for i in range(a.layers):
        p = f"model.layers.{i}."
        plan += [
            (p + "input_layernorm.weight", (a.hidden,), 0.1),
            (p + "self_attn.q_proj.weight", (a.hidden, a.hidden), 0.02),
            (p + "self_attn.k_proj.weight", (kv, a.hidden), 0.02),
            (p + "self_attn.v_proj.weight", (kv, a.hidden), 0.02),
            (p + "self_attn.o_proj.weight", (a.hidden, a.hidden), 0.02),
            (p + "post_attention_layernorm.weight", (a.hidden,), 0.1),
            (p + "mlp.gate_proj.weight", (a.intermediate, a.hidden), 0.02),
            (p + "mlp.up_proj.weight", (a.intermediate, a.hidden), 0.02),
            (p + "mlp.down_proj.weight", (a.hidden, a.intermediate), 0.02),
        ]
    plan += [("model.norm.weight", (a.hidden,), 0.1), ("lm_head.weight", (a.vocab, a.hidden), 0.02)]
    return plan


def write_shard(path, tensors, rng):
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape, _ in tensors:
        n = int(np.prod(shape)) * 2
        header[name] = {"dtype": "F16", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name, shape, scale in tensors:
            rows = shape[0] if len(shape) == 2 else 1
            cols = int(np.prod(shape)) // rows
            step = max(1, (16 << 20) // cols)
            for r in range(0, rows, step):
                n = min(step, rows - r) * cols
                vals = rng.standard_normal(n, dtype=np.float32) * scale
                if len(shape) == 1:
                    vals += 1.0  # norm weights around 1
                f.write(vals.astype(np.float16).tobytes())
    return offset


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=9)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--intermediate", type=int, default=11008)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    plan = tensor_plan(a)
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": a.vocab,
        "hidden_size": a.hidden, "intermediate_size": a.intermediate, "num_hidden_layers": a.layers,
        "num_attention_heads": a.heads, "num_key_value_heads": a.kv_heads,
        "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "tie_word_embeddings": False, "torch_dtype": "float16", "bos_token_id": 1, "eos_token_id": 2,
    }
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    rng = np.random.default_rng(a.seed)
    total = sum(int(np.prod(s)) * 2 for _, s, _ in plan)
    per_shard = total / max(1, a.shards)
    shards, cur, acc = [], [], 0
    for t in plan:
        cur.append(t)
        acc += int(np.prod(t[1])) * 2
        if acc >= per_shard * (len(shards) + 1) and len(shards) < a.shards - 1:
            shards.append(cur)
            cur = []
    if cur:
        shards.append(cur)
    weight_map = {}
    for i, tensors in enumerate(shards):
        name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" if len(shards) > 1 else "model.safetensors"
        write_shard(os.path.join(a.out, name), tensors, rng)
        for t in tensors:
            weight_map[t[0]] = name
        print(f"wrote {name}", flush=True)
    if len(shards) > 1:
        with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    print(f"{a.out}: {total / 1e9:.2f} GB of f16 weights in {len(shards)} file(s)")


if __name__ == "__main__":
    main()
