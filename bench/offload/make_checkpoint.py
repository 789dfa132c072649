#!/usr/bin/env python3
"""Writes a Llama-shaped checkpoint with random f16 weights in Hugging Face format, for the offloading
benchmark (bench/offload/run.sh): config.json and generation_config.json from transformers'
LlamaConfig / GenerationConfig, weights as sharded safetensors + model.safetensors.index.json,
exactly what save_pretrained writes and from_pretrained / endor-pack read. The tensors are drawn
with torch (on the GPU when there is one: seconds for 7B) from a fixed seed, one tensor at a time,
instead of initialising a model. The data is throwaway: never commit it.

Shapes: --shape 7b (Llama-2-7B: hidden 4096, 32 layers, 32 heads, intermediate 11008, vocab 32000,
13.5 GB) or --shape tiny (hidden 256, 6 layers, 4 heads, intermediate 688, vocab 1024, ~12 MB, for the
CPU run of the same script). Weights N(0, 0.02^2) (initializer_range), norm weights 1.

--layers N keeps the shape's widths with N decoder blocks (e.g. 8 of Llama-2-7B's 32, when disk or
time is short: per-token figures per block scale linearly).

Usage: make_checkpoint.py OUT_DIR [--shape 7b|tiny] [--layers N] [--seed 0] [--shard-bytes 2G]
"""
import argparse
import json
import os
import sys
import time

import torch
from safetensors.torch import save_file
from transformers import GenerationConfig, LlamaConfig

SHAPES = {
    "7b": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
               num_key_value_heads=32, vocab_size=32000, max_position_embeddings=4096),
    "tiny": dict(hidden_size=256, intermediate_size=688, num_hidden_layers=6, num_attention_heads=4,
                 num_key_value_heads=4, vocab_size=1024, max_position_embeddings=512),
}


def tensor_plan(c):
    """(name, shape) in the order save_pretrained writes a LlamaForCausalLM."""
    h, i, v = c.hidden_size, c.intermediate_size, c.vocab_size
    kv = c.num_key_value_heads * (h // c.num_attention_heads)
    plan = [("model.embed_tokens.weight", (v, h))]
    for l in range(c.num_hidden_layers):
        p = f"model.layers.{l}."
        plan += [(p + "self_attn.q_proj.weight", (h, h)), (p + "self_attn.k_proj.weight", (kv, h)),
                 (p + "self_attn.v_proj.weight", (kv, h)), (p + "self_attn.o_proj.weight", (h, h)),
                 (p + "mlp.gate_proj.weight", (i, h)), (p + "mlp.up_proj.weight", (i, h)),
                 (p + "mlp.down_proj.weight", (h, i)), (p + "input_layernorm.weight", (h,)),
                 (p + "post_attention_layernorm.weight", (h,))]
    plan += [("model.norm.weight", (h,)), ("lm_head.weight", (v, h))]
    return plan


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper()
    return int(float(t[:-1]) * units[t[-1]]) if t and t[-1] in units else int(t)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="7b")
    ap.add_argument("--layers", type=int, default=0, help="decoder blocks (default: the shape's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shard-bytes", default="2G")
    a = ap.parse_args()
    t0 = time.time()
    os.makedirs(a.out, exist_ok=True)
    shape = dict(SHAPES[a.shape])
    if a.layers > 0:
        shape["num_hidden_layers"] = a.layers
    config = LlamaConfig(**shape, rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
                         bos_token_id=1, eos_token_id=2, initializer_range=0.02, torch_dtype="float16")
    config.architectures = ["LlamaForCausalLM"]
    config.save_pretrained(a.out)
    GenerationConfig(bos_token_id=1, eos_token_id=2, do_sample=False).save_pretrained(a.out)

    device = "cuda" if torch.cuda.is_available() else "cpu"
    gen = torch.Generator(device=device)
    gen.manual_seed(a.seed)
    plan = tensor_plan(config)
    limit = parse_size(a.shard_bytes)
    shards, cur, cur_bytes = [], [], 0
    for name, shape in plan:
        n = 2
        for d in shape:
            n *= d
        if cur and cur_bytes + n > limit:
            shards.append(cur)
            cur, cur_bytes = [], 0
        cur.append((name, shape))
        cur_bytes += n
    shards.append(cur)

    weight_map, total = {}, 0
    for k, tensors in enumerate(shards):
        fname = (f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors" if len(shards) > 1 else "model.safetensors")
        data = {}
        for name, shape in tensors:
            if len(shape) == 1:
                t = torch.ones(shape, dtype=torch.float16)
            else:
                t = (torch.randn(shape, generator=gen, device=device, dtype=torch.float32) * config.initializer_range)
                t = t.to(torch.float16).cpu()
            data[name] = t
            weight_map[name] = fname
            total += t.numel() * 2
        save_file(data, os.path.join(a.out, fname), metadata={"format": "pt"})
        print(f"wrote {fname} ({sum(t.numel() * 2 for t in data.values()) / 1e9:.2f} GB)", flush=True)
        del data
    if len(shards) > 1:
        with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    print(f"{a.out}: {a.shape}, {total / 1e9:.2f} GB of f16 weights in {len(shards)} file(s), "
          f"seed {a.seed}, {time.time() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
