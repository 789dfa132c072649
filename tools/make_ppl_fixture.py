#!/usr/bin/env python3
"""Generate tests/fixtures/perplexity/ from the sample model with transformers + tokenizers.

Writes
  text.txt        the first ~3 KB of samples/kjv-llama/heldout.txt, cut after a whole line
  reference.json  the exact token ids of text.txt (real `tokenizers` encoding: one <s> first),
                  the window length, per-window mean NLL and the perplexity transformers computes
                  on the sample model in float32 (from its saved f16 weights), plus the same
                  figures for the whole heldout.txt at the model's context (256), which
                  `endor-infer --perplexity` must match within 0.1 %.

Convention (Wanda/SparseGPT, docs/algorithms.md "Perplexity"): the text is tokenized
once with one BOS at the start, cut into non-overlapping windows of L tokens (tail dropped),
no cache across windows; per window the mean cross-entropy of logits[:-1] vs ids[1:];
ppl = exp(mean over windows).

Usage: python3 tools/make_ppl_fixture.py [--model samples/kjv-llama]
       [--out tests/fixtures/perplexity] [--bytes 3000] [--window 64]
"""
import argparse
import hashlib
import json
import math
import os

import torch


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@torch.no_grad()
def window_nlls(model, ids, L):
    """Per-window mean NLL (float64 from float32 logits) over non-overlapping windows of L."""
    n = len(ids) // L
    if n == 0:
        raise SystemExit(f"error: {len(ids)} tokens make no window of {L}")
    t = torch.tensor(ids[: n * L], dtype=torch.long).view(n, L)
    out = []
    for i in range(0, n, 8):
        x = t[i:i + 8]
        logits = model(input_ids=x).logits.float()
        ce = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)),
                                               x[:, 1:].reshape(-1), reduction="none")
        out.extend(ce.view(x.size(0), L - 1).double().mean(dim=1).tolist())
    return out


def summary(nll):
    mean = sum(nll) / len(nll)
    return {"windows": len(nll), "window_mean_nll": nll, "mean_nll": mean, "perplexity": math.exp(mean)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="samples/kjv-llama")
    ap.add_argument("--out", default="tests/fixtures/perplexity")
    ap.add_argument("--bytes", type=int, default=3000, help="approximate size of text.txt")
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    import tokenizers
    import transformers
    from transformers import LlamaForCausalLM

    tok = tokenizers.Tokenizer.from_file(os.path.join(args.model, "tokenizer.json"))
    model = LlamaForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()

    heldout_path = os.path.join(args.model, "heldout.txt")
    with open(heldout_path, encoding="utf-8", newline="") as f:
        heldout = f.read()
    cut = heldout.index("\n", args.bytes) + 1  # whole lines only; ends with "\n"
    text = heldout[:cut]
    os.makedirs(args.out, exist_ok=True)
    text_path = os.path.join(args.out, "text.txt")
    with open(text_path, "w", encoding="utf-8", newline="") as f:
        f.write(text)

    ids = tok.encode(text).ids
    assert ids[0] == tok.token_to_id("<s>") and ids.count(ids[0]) == 1, "expected exactly one leading <s>"
    small = summary(window_nlls(model, ids, args.window))

    full_ids = tok.encode(heldout).ids
    L = model.config.max_position_embeddings
    full = summary(window_nlls(model, full_ids, L))
    full.pop("window_mean_nll")  # 150+ numbers; the aggregate is what the CLI test checks

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    rel = lambda p: os.path.relpath(os.path.abspath(p), repo)  # paths in the json: repo-relative
    ref = {
        "generated_by": "tools/make_ppl_fixture.py",
        "convention": "one BOS at the start; non-overlapping windows of `window` tokens, tail dropped; "
                      "per window mean CE of logits[:-1] vs ids[1:]; ppl = exp(mean over windows)",
        "model_dir": rel(args.model),
        "model_sha256": sha256(os.path.join(args.model, "model.safetensors")),
        "tokenizer_sha256": sha256(os.path.join(args.model, "tokenizer.json")),
        "dtype": "float32 compute from the saved f16 weights",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "tokenizers": tokenizers.__version__},
        "text_file": "text.txt",
        "text_bytes": len(text.encode("utf-8")),
        "window": args.window,
        "bos_id": ids[0],
        "token_ids": ids,
        **small,
        "heldout_full": {"text_file": rel(heldout_path), "text_bytes": len(heldout.encode("utf-8")),
                         "tokens": len(full_ids), "window": L, **full},
    }
    text_json = json.dumps({**ref, "token_ids": "@IDS@"}, indent=1)
    text_json = text_json.replace('"@IDS@"', json.dumps(ids))  # the ids on one line
    with open(os.path.join(args.out, "reference.json"), "w") as f:
        f.write(text_json + "\n")
    print(f"{text_path}: {ref['text_bytes']} bytes, {len(ids)} tokens, {small['windows']} windows of "
          f"{args.window}: ppl {small['perplexity']:.6f}")
    print(f"{heldout_path}: {len(full_ids)} tokens, {full['windows']} windows of {L}: "
          f"ppl {full['perplexity']:.6f}")


if __name__ == "__main__":
    main()
