#!/usr/bin/env python3
"""Perplexity of the SmolLM2 Hugging Face folder in torch, dense and pruned the way endor-pack
prunes, for bench/ACCURACY.md's cross-check column.

  dense      the folder as saved (bf16 weights, float32 arithmetic)
  magnitude  every decoder Linear: in each output row, the int(in * S) smallest |w| set to zero
             (endor-pack prune --method magnitude --sparsity S, --scope row), weights in bf16
  wanda      |w| * ||x_j||_2 per row (Wanda), calibration windows drawn as endor-pack draws them is
             not reproduced here (different RNG); used only as an independent sanity figure
  owl        wanda with OWL's non-uniform block sparsity (outlier ratio M, spread lambda)

Convention as tests/fixtures/smollm2/reference.json: /usr/share/common-licenses/GPL-3, no BOS,
non-overlapping 512-token windows, ppl = exp(mean of window mean NLLs).

Usage: python3 tools/smollm2_torch_reference.py [--model DIR] [--methods dense,magnitude]
       [--sparsity 0.5] [--calib FILE --calib-samples 32]
"""
import argparse
import math
import os
import random

import torch

from make_smollm2_fixture import fix_digit_split, window_nlls

HELDOUT = "/usr/share/common-licenses/GPL-3"


def linears(model):
    for i, layer in enumerate(model.model.layers):
        for name, mod in layer.named_modules():
            if isinstance(mod, torch.nn.Linear):
                yield i, name, mod


def ppl(model, ids, window=512):
    nll = window_nlls(model, ids, window)
    return math.exp(sum(nll) / len(nll))


def prune_rows(w, score, sparsity):
    k = int(w.shape[1] * sparsity)
    if k == 0:
        return
    idx = torch.sort(score, dim=1, stable=True).indices[:, :k]
    w.scatter_(1, idx, 0)


@torch.no_grad()
def activation_norms(model, calib_ids):
    norms = {}
    hooks = []
    for i, name, mod in linears(model):
        key = (i, name)
        norms[key] = torch.zeros(mod.in_features, dtype=torch.float64)

        def hook(m, inp, out, key=key):
            x = inp[0].reshape(-1, inp[0].shape[-1]).double()
            norms[key] += (x * x).sum(0)
        hooks.append(mod.register_forward_hook(hook))
    for ids in calib_ids:
        model(input_ids=torch.tensor([ids]))
    for h in hooks:
        h.remove()
    return {k: v.sqrt().float() for k, v in norms.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.expanduser("~/.cache/endor/smollm2-135m-instruct-hf"))
    ap.add_argument("--methods", default="dense,magnitude")
    ap.add_argument("--sparsity", type=float, default=0.5)
    ap.add_argument("--calib", default=None)
    ap.add_argument("--calib-samples", type=int, default=32)
    ap.add_argument("--owl-m", type=float, default=5.0)
    ap.add_argument("--owl-lambda", type=float, default=0.08)
    a = ap.parse_args()

    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(a.model)
    with open(HELDOUT, encoding="utf-8") as f:
        ids = tok(f.read(), add_special_tokens=False)["input_ids"]
    calib_ids = []
    if a.calib:
        with open(a.calib, encoding="utf-8") as f:
            cids = tok(f.read(), add_special_tokens=False)["input_ids"]
        rng = random.Random(0)
        for _ in range(a.calib_samples):
            s = rng.randrange(0, len(cids) - 512)
            calib_ids.append(cids[s:s + 512])

    for method in a.methods.split(","):
        model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.bfloat16).float().eval()
        with torch.no_grad():
            if method == "magnitude":
                for _, _, mod in linears(model):
                    prune_rows(mod.weight, mod.weight.abs(), a.sparsity)
            elif method in ("wanda", "owl"):
                norms = activation_norms(model, calib_ids)
                layer_sparsity = {}
                n_layers = len(model.model.layers)
                if method == "owl":
                    ratios = []
                    for i in range(n_layers):
                        scores = [(mod.weight.abs() * norms[(i, name)]).flatten()
                                  for j, name, mod in linears(model) if j == i]
                        s = torch.cat(scores)
                        ratios.append(float((s > a.owl_m * s.mean()).float().mean()))
                    r = torch.tensor(ratios, dtype=torch.float64)
                    r = (r - r.min()) / (r.max() - r.min()) * a.owl_lambda * 2
                    r = r - r.mean() + (1 - a.sparsity)
                    layer_sparsity = {i: 1 - float(r[i]) for i in range(n_layers)}
                    print("owl block sparsity:", " ".join(f"{layer_sparsity[i]:.3f}" for i in range(n_layers)))
                if os.environ.get("RAMP"):  # experiment: linear ramp of block sparsity, +-RAMP around S
                    d = float(os.environ["RAMP"])
                    layer_sparsity = {i: a.sparsity + d * (2 * i / (n_layers - 1) - 1) for i in range(n_layers)}
                for i, name, mod in linears(model):
                    prune_rows(mod.weight, mod.weight.abs() * norms[(i, name)], layer_sparsity.get(i, a.sparsity))
            # weights back through bf16, as endor stores a bf16 source
            for _, _, mod in linears(model):
                mod.weight.copy_(mod.weight.bfloat16().float())
        print(f"{method}: perplexity {ppl(model, ids):.4f}", flush=True)


if __name__ == "__main__":
    main()
