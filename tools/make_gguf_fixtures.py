#!/usr/bin/env python3
"""Make the GGUF import fixtures (tests/fixtures/gguf/), read by tests/packer/test_gguf.cpp.

  tiny-llama.gguf   a 2-layer llama (hidden 64, 4 heads / 2 KV heads, head_dim 16, FFN 128, untied
                    head) with random weights, written by the `gguf` package's GGUFWriter as
                    llama.cpp's convert does: q/k rows permuted for llama.cpp's rotary layout, every
                    readable tensor type used once or more (token_embd Q8_0, attn_q Q4_1, attn_k
                    Q4_0, attn_v Q8_0, attn_output F16, ffn_gate BF16, ffn_up Q4_1, ffn_down Q4_0,
                    norms F32, output Q8_0), quantized by gguf.quants; the tokenizer is the bytebpe
                    fixture (tests/fixtures/tokenizers/bytebpe: byte-level BPE, 1000 ids) as
                    tokenizer.ggml.* with pre "gpt-2" and a chat template.
  tiny-llama-hf/    what transformers makes of that file: from_pretrained(dir, gguf_file=...,
                    dtype=float32) (gguf's dequantize, q/k un-permuted), save_pretrained, f32
                    safetensors + config.json (tokenizer files not kept: the test compares weights).
  expected.json     per tensor type: gguf.quants.dequantize of the first 64 values (GGUF order)
                    of a tensor of that type, as f32 bit patterns (a direct check of the
                    dequantizers that does not go through transformers).

Usage: python3 tools/make_gguf_fixtures.py [--out DIR]
Needs: numpy, torch, transformers, gguf (tools/requirements-fixtures.txt). Deterministic (seed 0).
"""
import argparse
import json
import os
import shutil
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

HIDDEN, HEADS, KV_HEADS, FFN, LAYERS, CTX = 64, 4, 2, 128, 2, 256
TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def permute(w, n_head):
    # llama.cpp convert_hf_to_gguf.py LlamaModel.permute: rows (head, half, i) -> (head, i, half)
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "gguf"))
    args = ap.parse_args()
    import gguf
    from gguf import GGMLQuantizationType as Q
    import torch
    from transformers import AutoModelForCausalLM

    tok = json.load(open(os.path.join(ROOT, "tests", "fixtures", "tokenizers", "bytebpe", "tokenizer.json")))
    vocab = tok["model"]["vocab"]
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    special = {a["id"] for a in tok["added_tokens"] if a["special"]}
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    V = len(tokens)

    rng = np.random.default_rng(0)
    def rand(*shape, scale=0.05):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    # HF layout [out, in]; GGUF stores the same bytes with ne reversed.
    tensors = [("token_embd.weight", rand(V, HIDDEN), Q.Q8_0)]
    for l in range(LAYERS):
        p = f"blk.{l}."
        tensors += [
            (p + "attn_norm.weight", 1 + rand(HIDDEN), Q.F32),
            (p + "attn_q.weight", permute(rand(HIDDEN, HIDDEN), HEADS), Q.Q4_1),
            (p + "attn_k.weight", permute(rand(KV_HEADS * 16, HIDDEN), KV_HEADS), Q.Q4_0),
            (p + "attn_v.weight", rand(KV_HEADS * 16, HIDDEN), Q.Q8_0),
            (p + "attn_output.weight", rand(HIDDEN, HIDDEN), Q.F16),
            (p + "ffn_norm.weight", 1 + rand(HIDDEN), Q.F32),
            (p + "ffn_gate.weight", rand(FFN, HIDDEN), Q.BF16),
            (p + "ffn_up.weight", rand(FFN, HIDDEN), Q.Q4_1),
            (p + "ffn_down.weight", rand(HIDDEN, FFN), Q.Q4_0),
        ]
    tensors += [("output_norm.weight", 1 + rand(HIDDEN), Q.F32), ("output.weight", rand(V, HIDDEN), Q.Q8_0)]

    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "tiny-llama.gguf")
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("tiny llama fixture")
    w.add_context_length(CTX)
    w.add_block_count(LAYERS)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(HIDDEN // HEADS)
    w.add_file_type(3)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types([3 if i in special else 1 for i in range(V)])
    w.add_token_merges(merges)
    w.add_bos_token_id(0)
    w.add_eos_token_id(0)
    w.add_add_bos_token(False)
    w.add_chat_template(TEMPLATE)
    dequantized = {}
    for name, x, qt in tensors:
        data = gguf.quants.quantize(x, qt)
        w.add_tensor(name, data, raw_dtype=qt)
        if qt.name not in dequantized:
            dequantized[qt.name] = (name, gguf.quants.dequantize(data, qt).reshape(-1)[:64].astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    expected = {qt: {"tensor": name, "bits": [int(b) for b in vals.view(np.uint32)]}
                for qt, (name, vals) in sorted(dequantized.items())}
    with open(os.path.join(args.out, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")

    # What transformers makes of it.
    hf = os.path.join(args.out, "tiny-llama-hf")
    shutil.rmtree(hf, ignore_errors=True)
    with tempfile.TemporaryDirectory() as tmp:
        loaded = AutoModelForCausalLM.from_pretrained(args.out, gguf_file="tiny-llama.gguf", dtype=torch.float32)
        # transformers marks a GGUF-loaded model as quantized and refuses to save it; its weights
        # are plain dequantized tensors by now, so move them into a fresh model of the same config.
        config = loaded.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        model.load_state_dict(loaded.state_dict())
        model.save_pretrained(tmp)
        os.makedirs(hf)
        for f in ("config.json", "model.safetensors"):
            shutil.copy(os.path.join(tmp, f), hf)
    print("wrote", path, os.path.getsize(path), "bytes;", hf)


if __name__ == "__main__":
    main()
