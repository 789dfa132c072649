#!/usr/bin/env python3
"""Make the mixture-of-experts GGUF fixtures (tests/fixtures/gguf/), written by llama.cpp's own
convert_hf_to_gguf.py from the transformers fixtures, read by tests/runtime/test_models_vs_transformers.cpp.

  llamacpp-mixtral-tiny.f16.gguf      tests/fixtures/models/mixtral-tiny converted with --outtype f16
                                      (llama.cpp writes Mixtral as "llama" with llama.expert_count, the
                                      experts stacked as blk.N.ffn_{gate,up,down}_exps).
  llamacpp-mixtral-tiny.f16/          its reference: transformers on the fixture's folder with the
                                      tensors that file stores as F16 rounded to f16 (every matrix but
                                      the router; norms and the router stay f32, as the converter
                                      writes them; transformers does not read a llama GGUF with experts).
  llamacpp-qwen3-moe-tiny.q8_0.gguf   tests/fixtures/models/qwen3-moe-tiny with --outtype q8_0: Q8_0 expert
                                      blocks where a row is whole 32-column blocks (gate/up), F16 or F32
                                      elsewhere, as the converter chooses.
  llamacpp-qwen3-moe-tiny.q8_0/       its reference: transformers' own GGUF loader on that file
                                      (gguf-py's dequantization) with the fixture's config.json, the top-k
                                      weights renormalized as llama.cpp's qwen3moe always does (the
                                      fixture's folder has norm_topk_prob false); logits of
                                      reference.json's prompts, logits_p<i>.npy [tokens, vocab] f32.

The fixtures' tokenizers are tiny synthetic byte-level BPEs that the converter's pre-tokenizer hash
table does not list; it is told "qwen2" (the same split regex) instead of refusing, and reads them
as a plain fast tokenizer (tokenizer_config.json in a copy of the folder). Nothing else of the
converter is changed.

Usage: python3 tools/make_gguf_moe_fixtures.py --llama-cpp DIR [--out DIR]
  DIR: llama.cpp's source tree, e.g. vendor/llama.cpp of PyPI's llama-cpp-python sdist (0.3.36 made
  the committed files). Needs numpy, torch, transformers (tools/requirements-fixtures.txt), gguf-py
  (from DIR) and sentencepiece (the converter imports it).
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODELS = os.path.join(ROOT, "tests", "fixtures", "models")


def convert(llama_cpp, fixture, outtype, outfile):
    # A copy whose tokenizer_config.json names the plain fast tokenizer: the family's own class
    # (Qwen2TokenizerFast) would add special tokens past the tiny vocabulary.
    src = tempfile.mkdtemp()
    for f in ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json"):
        shutil.copy(os.path.join(fixture, f), src)
    json.dump({"tokenizer_class": "PreTrainedTokenizerFast"}, open(os.path.join(src, "tokenizer_config.json"), "w"))
    sys.path.insert(0, os.path.join(llama_cpp, "gguf-py"))
    sys.path.insert(0, llama_cpp)
    import convert_hf_to_gguf as conv
    from conversion import base
    base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "qwen2"
    argv = sys.argv
    sys.argv = ["convert_hf_to_gguf.py", src, "--outtype", outtype, "--outfile", outfile]
    try:
        conv.main()
    finally:
        sys.argv = argv
        shutil.rmtree(src)


def qwen3_moe_reference(gguf_path, fixture, out_dir):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
    d = os.path.dirname(gguf_path)
    # The fixture's config (transformers' GGUF key mapping for qwen3moe leaves out the experts'
    # width), renormalizing as llama.cpp does; the weights are the GGUF's, dequantized by gguf-py.
    config = AutoConfig.from_pretrained(fixture)
    config.norm_topk_prob = True
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=os.path.basename(gguf_path), config=config, dtype=torch.float32)
    n = 0
    for m in model.modules():
        if hasattr(m, "norm_topk_prob"):
            m.norm_topk_prob = True
            n += 1
    assert n > 0, "no MoE block found to renormalize"
    model.eval()
    save_logits(model, fixture, out_dir)


def mixtral_reference(fixture, out_dir):
    import torch
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(fixture, dtype=torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim >= 2 and not name.endswith("mlp.gate.weight"):  # the router stays f32
                p.copy_(p.to(torch.float16).to(torch.float32))
    model.eval()
    save_logits(model, fixture, out_dir)


def save_logits(model, fixture, out_dir):
    import torch
    ref = json.load(open(os.path.join(fixture, "reference.json")))
    os.makedirs(out_dir, exist_ok=True)
    with torch.no_grad():
        for i, p in enumerate(ref["prompts"]):
            ids = torch.tensor([p["ids"]])
            np.save(os.path.join(out_dir, f"logits_p{i}.npy"), model(ids).logits[0].float().numpy())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama-cpp", required=True)
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "gguf"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    mixtral = os.path.join(args.out, "llamacpp-mixtral-tiny.f16.gguf")
    qwen = os.path.join(args.out, "llamacpp-qwen3-moe-tiny.q8_0.gguf")
    convert(args.llama_cpp, os.path.join(MODELS, "mixtral-tiny"), "f16", mixtral)
    convert(args.llama_cpp, os.path.join(MODELS, "qwen3-moe-tiny"), "q8_0", qwen)
    mixtral_reference(os.path.join(MODELS, "mixtral-tiny"), os.path.join(args.out, "llamacpp-mixtral-tiny.f16"))
    # transformers reads a GGUF from a folder of its own (no config.json beside it to confuse it)
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(qwen, tmp)
        qwen3_moe_reference(os.path.join(tmp, os.path.basename(qwen)), os.path.join(MODELS, "qwen3-moe-tiny"),
                            os.path.join(args.out, "llamacpp-qwen3-moe-tiny.q8_0"))
    for f in (mixtral, qwen):
        print(f, os.path.getsize(f), "bytes")


if __name__ == "__main__":
    main()
