#!/usr/bin/env python3
"""Writes a mixture-of-experts checkpoint with random f16 weights in Hugging Face format, for the MoE
benchmark (bench/moe/run.sh): config.json of Qwen3MoeForCausalLM or MixtralForCausalLM (the fields
tests/fixtures/models/qwen3-moe-tiny and mixtral-tiny have), generation_config.json, sharded safetensors
+ model.safetensors.index.json, and the tokenizer of the matching tiny fixture (a byte-level BPE of 512
ids) with <extra_N> entries up to the model's vocabulary, so that every generated id decodes. Streams tensor by
tensor in row chunks (numpy only, no torch): well under 1 GB of memory whatever the size. The data is
throwaway: never commit it.

Shapes (--shape):
  qwen3-30b-a3b  hidden 2048, 128 experts, top-8 (norm_topk_prob true), moe_intermediate_size 768,
                 32 heads / 4 kv heads, head_dim 128, vocab 151936; 48 blocks in the real model
                 (1.25 GB of f16 a block, embed + head 1.24 GB)
  mixtral-8x7b   hidden 4096, 8 experts, top-2, intermediate 14336, 32 / 8 heads, vocab 32000;
                 32 blocks in the real model (2.8 GB of f16 a block)
--layers N keeps the widths with N decoder blocks. Weights N(0, 0.02^2), norm weights 1 + N(0, 0.1^2), except:
the token embedding N(0, 1) and the Linears that write into the residual stream (o_proj, the experts'
down_proj / w2) N(0, 0.002^2) (GPT-2's 0.02 / sqrt(2 * blocks) for the real block count). With every
weight at 0.02 the attention output (about the mean of the context's values: the same vector every step)
outweighs the embedding 50 to 1, every router sees the same input and picks the same top-k for every
token; this way each token routes on its own embedding, about uniformly over the experts.

Usage: make_moe_checkpoint.py OUT_DIR --shape qwen3-30b-a3b --layers 4 [--seed 0] [--shard-bytes 2G]
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_big_checkpoint import write_shard  # noqa: E402  (f16 safetensors, row chunks)

SHAPES = {
    "qwen3-30b-a3b": dict(family="qwen3_moe", hidden=2048, experts=128, top_k=8, expert_width=768,
                          dense_width=6144, heads=32, kv_heads=4, head_dim=128, vocab=151936, layers=48,
                          rope_theta=1000000.0, eps=1e-6, fixture="qwen3-moe-tiny"),
    "mixtral-8x7b": dict(family="mixtral", hidden=4096, experts=8, top_k=2, expert_width=14336,
                         dense_width=14336, heads=32, kv_heads=8, head_dim=128, vocab=32000, layers=32,
                         rope_theta=1000000.0, eps=1e-5, fixture="mixtral-tiny"),
}
BOS, EOS = 510, 511  # the fixtures' tokenizer's special ids
RESIDUAL = 0.002     # o_proj and the experts' down projections (see the docstring)


def block_plan(s, i):
    """(name, shape, scale) of decoder block i in the order transformers writes it."""
    h, q, kv, w = s["hidden"], s["heads"] * s["head_dim"], s["kv_heads"] * s["head_dim"], s["expert_width"]
    p = f"model.layers.{i}."
    plan = [(p + "input_layernorm.weight", (h,), 0.1),
            (p + "self_attn.q_proj.weight", (q, h), 0.02), (p + "self_attn.k_proj.weight", (kv, h), 0.02),
            (p + "self_attn.v_proj.weight", (kv, h), 0.02), (p + "self_attn.o_proj.weight", (h, q), RESIDUAL)]
    if s["family"] == "qwen3_moe":
        plan += [(p + "self_attn.q_norm.weight", (s["head_dim"],), 0.1),
                 (p + "self_attn.k_norm.weight", (s["head_dim"],), 0.1)]
    plan.append((p + "post_attention_layernorm.weight", (h,), 0.1))
    if s["family"] == "qwen3_moe":
        plan.append((p + "mlp.gate.weight", (s["experts"], h), 0.02))
        for e in range(s["experts"]):
            x = f"{p}mlp.experts.{e}."
            plan += [(x + "gate_proj.weight", (w, h), 0.02), (x + "up_proj.weight", (w, h), 0.02),
                     (x + "down_proj.weight", (h, w), RESIDUAL)]
    else:
        plan.append((p + "block_sparse_moe.gate.weight", (s["experts"], h), 0.02))
        for e in range(s["experts"]):
            x = f"{p}block_sparse_moe.experts.{e}."
            plan += [(x + "w1.weight", (w, h), 0.02), (x + "w3.weight", (w, h), 0.02), (x + "w2.weight", (h, w), RESIDUAL)]
    return plan


def tensor_plan(s, layers):
    plan = [("model.embed_tokens.weight", (s["vocab"], s["hidden"]), 1.0)]
    for i in range(layers):
        plan += block_plan(s, i)
    plan += [("model.norm.weight", (s["hidden"],), 0.1), ("lm_head.weight", (s["vocab"], s["hidden"]), 0.02)]
    return plan


def config_json(s, layers):
    c = {"vocab_size": s["vocab"], "hidden_size": s["hidden"], "num_hidden_layers": layers,
         "num_attention_heads": s["heads"], "num_key_value_heads": s["kv_heads"], "head_dim": s["head_dim"],
         "num_experts_per_tok": s["top_k"], "num_local_experts": s["experts"], "hidden_act": "silu",
         "max_position_embeddings": 4096, "rms_norm_eps": s["eps"], "rope_theta": s["rope_theta"],
         "tie_word_embeddings": False, "torch_dtype": "float16", "bos_token_id": BOS, "eos_token_id": EOS,
         "attention_dropout": 0.0, "use_cache": True, "sliding_window": None, "initializer_range": 0.02}
    if s["family"] == "qwen3_moe":
        c.update({"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "num_experts": s["experts"],
                  "moe_intermediate_size": s["expert_width"], "intermediate_size": s["dense_width"],
                  "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": [],
                  "use_sliding_window": False, "attention_bias": False, "router_aux_loss_coef": 0.001})
    else:
        c.update({"architectures": ["MixtralForCausalLM"], "model_type": "mixtral",
                  "intermediate_size": s["expert_width"], "router_jitter_noise": 0.0, "router_aux_loss_coef": 0.02})
    return c


def padded_tokenizer(path, vocab):
    """The fixture's tokenizer.json with vocab entries <extra_N> for every id it leaves unused below
    `vocab`, so that every id the model can generate decodes (endor-infer --prompts prints text)."""
    with open(path, encoding="utf-8") as f:
        tok = json.load(f)
    used = set(tok["model"]["vocab"].values()) | {a["id"] for a in tok.get("added_tokens", [])}
    for i in range(vocab):
        if i not in used:
            tok["model"]["vocab"][f"<extra_{i}>"] = i
    return tok


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper()
    return int(float(t[:-1]) * units[t[-1]]) if t and t[-1] in units else int(t)


def shard(plan, limit):
    """Consecutive runs of tensors of at most `limit` bytes each (a tensor larger than that alone)."""
    out, cur, acc = [], [], 0
    for t in plan:
        n = int(np.prod(t[1])) * 2
        if cur and acc + n > limit:
            out.append(cur)
            cur, acc = [], 0
        cur.append(t)
        acc += n
    if cur:
        out.append(cur)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--shape", choices=sorted(SHAPES), required=True)
    ap.add_argument("--layers", type=int, default=0, help="decoder blocks (default: the real model's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shard-bytes", default="2G")
    a = ap.parse_args()
    s = SHAPES[a.shape]
    layers = a.layers or s["layers"]
    if layers < 1 or layers > s["layers"]:
        sys.exit(f"error: --layers {layers} is outside [1, {s['layers']}] for {a.shape}")
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(config_json(s, layers), f, indent=2)
    with open(os.path.join(a.out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": BOS, "eos_token_id": EOS, "do_sample": False}, f, indent=2)
    fixture = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "models", s["fixture"])
    with open(os.path.join(a.out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(padded_tokenizer(os.path.join(fixture, "tokenizer.json"), s["vocab"]), f, ensure_ascii=False)
    plan = tensor_plan(s, layers)
    total = sum(int(np.prod(t[1])) * 2 for t in plan)
    shards = shard(plan, parse_size(a.shard_bytes))
    rng = np.random.default_rng(a.seed)
    weight_map = {}
    for i, tensors in enumerate(shards):
        name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" if len(shards) > 1 else "model.safetensors"
        write_shard(os.path.join(a.out, name), tensors, rng)
        weight_map.update({t[0]: name for t in tensors})
        print(f"wrote {name}", flush=True)
    if len(shards) > 1:
        with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    print(f"{a.out}: {a.shape}, {layers} blocks, {total / 1e9:.2f} GB of f16 weights in {len(shards)} file(s)")


if __name__ == "__main__":
    main()
