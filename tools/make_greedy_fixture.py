#!/usr/bin/env python3
"""Greedy continuation of the dense sample model by transformers: the reference for the quick-start
golden test (tests/infer/test_quickstart.cpp).

Writes tests/infer/golden/greedy_transformers.json with the prompt, its ids (real `tokenizers`
encoding, add_special_tokens: one <s> first), the ids transformers' generate() picks greedily
(do_sample=False, float32 compute from the saved f16 weights, stopping at EOS as generate does by
default) and their text (decode with skip_special_tokens). endor-infer on the dense f32 container
must produce exactly these ids (--ids) and this text (-p); the 50 % golden text is then taken from
endor-infer itself.

Usage: python3 tools/make_greedy_fixture.py [--model samples/kjv-llama]
       [--out tests/infer/golden/greedy_transformers.json] [--prompt "And God said"] [-n 48]
"""
import argparse
import hashlib
import json
import os

import torch


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="samples/kjv-llama")
    ap.add_argument("--out", default="tests/infer/golden/greedy_transformers.json")
    ap.add_argument("--prompt", default="And God said")
    ap.add_argument("-n", type=int, default=48, help="max new tokens")
    args = ap.parse_args()
    torch.set_num_threads(1)

    import tokenizers
    import transformers
    from transformers import LlamaForCausalLM

    tok = tokenizers.Tokenizer.from_file(os.path.join(args.model, "tokenizer.json"))
    model = LlamaForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    prompt_ids = tok.encode(args.prompt).ids
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt_ids]), do_sample=False, max_new_tokens=args.n)
    new_ids = out[0, len(prompt_ids):].tolist()

    # The logit margin of each greedy choice over the runner-up (float32): the test's exact
    # comparison is only meaningful when no step is a near-tie.
    with torch.no_grad():
        logits = model(input_ids=out[:, :-1]).logits[0, len(prompt_ids) - 1:]
    top2 = torch.topk(logits, 2, dim=-1).values
    margins = (top2[:, 0] - top2[:, 1]).tolist()

    ref = {
        "generated_by": "tools/make_greedy_fixture.py",
        "model_dir": os.path.relpath(os.path.abspath(args.model),
                                     os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
        "model_sha256": sha256(os.path.join(args.model, "model.safetensors")),
        "dtype": "float32 compute from the saved f16 weights",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "tokenizers": tokenizers.__version__},
        "prompt": args.prompt,
        "prompt_ids": prompt_ids,
        "max_new_tokens": args.n,
        "new_ids": new_ids,
        "new_text": tok.decode(new_ids, skip_special_tokens=True),
        "min_logit_margin": min(margins),
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")
    print(f"{args.out}: {len(new_ids)} new ids, smallest top-1 margin {min(margins):.4f}")
    print(args.prompt + ref["new_text"])


if __name__ == "__main__":
    main()
