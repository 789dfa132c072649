#!/usr/bin/env python3
"""Held-out perplexity of samples/kjv-llama pruned by a torch re-implementation of the Wanda
reference procedure (locuslab/wanda lib/prune.py prune_wanda: sequential over decoder layers,
WrappedGPT statistics, per-row stable sort / N:M topk, re-run of the pruned layer), and by per-row
magnitude (the same procedure with the score |W|). f32 on CPU with transformers.

An independent check of endor-pack's Wanda on the sample model: scripts/accuracy.sh prints these
next to endor-pack's figures. Windows are drawn with Python's random (the reference's C4 loader
does the same), so they differ from endor-pack's std::mt19937_64 windows: expect agreement within
the window-sampling noise, not digit for digit. Perplexity as tools/make_ppl_fixture.py (windows
of 256, one BOS, mean of per-window mean NLL).

Usage: python3 tools/wanda_reference_ppl.py [--model samples/kjv-llama] [--nsamples 128]
       [--seqlen 256] [--seed 0]
Prints one line per variant: "<method> <pattern> <perplexity>", then per Linear kind the spread
of the dense model's input-channel norms ||X_j|| over the calibration windows (max/median, the
range over layers): "spread <linear> <min over layers> <max over layers>".
"""
import argparse
import math
import os
import random

import torch
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM


def load(path):
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


@torch.no_grad()
def perplexity(model, ids, L=256):
    n = len(ids) // L
    t = torch.tensor(ids[: n * L]).view(n, L)
    nll = []
    for i in range(0, n, 8):
        x = t[i:i + 8]
        logits = model(input_ids=x).logits.float()
        ce = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), x[:, 1:].reshape(-1),
                                               reduction="none")
        nll += ce.view(x.size(0), L - 1).double().mean(1).tolist()
    return math.exp(sum(nll) / len(nll))


def run_layer(layer, x, pos, pe):
    out = layer(x, attention_mask=None, position_ids=pos, position_embeddings=pe)
    return out[0] if isinstance(out, tuple) else out


@torch.no_grad()
def prune(model, calib_ids, method, nm, nsamples, seqlen, seed):
    random.seed(seed)
    starts = [random.randint(0, len(calib_ids) - seqlen - 1) for _ in range(nsamples)]
    m = model.model
    inps = torch.cat([m.embed_tokens(torch.tensor(calib_ids[s:s + seqlen]).unsqueeze(0)) for s in starts])
    pos = torch.arange(seqlen).unsqueeze(0)
    pe = m.rotary_emb(inps[:1], pos)
    for layer in m.layers:
        linears = {n: mod for n, mod in layer.named_modules() if isinstance(mod, torch.nn.Linear)}
        scaler = {n: torch.zeros(mod.in_features) for n, mod in linears.items()}
        count = {n: 0 for n in linears}

        def hook_for(n):
            def hook(mod, inp, out):  # WrappedGPT.add_batch with one sample per call
                x = inp[0].reshape(-1, inp[0].shape[-1]).t().float()
                scaler[n] *= count[n] / (count[n] + 1)
                count[n] += 1
                scaler[n] += torch.norm(x, p=2, dim=1) ** 2 / count[n]
            return hook

        hooks = [linears[n].register_forward_hook(hook_for(n)) for n in linears]
        for j in range(nsamples):
            run_layer(layer, inps[j:j + 1], pos, pe)
        for h in hooks:
            h.remove()
        for n, mod in linears.items():
            W = mod.weight.data
            score = W.abs() * (torch.sqrt(scaler[n].reshape(1, -1)) if method == "wanda" else 1.0)
            mask = torch.zeros_like(W, dtype=torch.bool)
            if nm:
                N, M = nm
                for ii in range(0, W.shape[1], M):
                    mask.scatter_(1, ii + torch.topk(score[:, ii:ii + M], N, dim=1, largest=False)[1], True)
            else:
                idx = torch.sort(score, dim=-1, stable=True)[1][:, : int(W.shape[1] * 0.5)]
                mask.scatter_(1, idx, True)
            W[mask] = 0
        inps = torch.cat([run_layer(layer, inps[j:j + 1], pos, pe) for j in range(nsamples)])
    return model


@torch.no_grad()
def channel_norm_spread(model, calib_ids, nsamples, seqlen, seed):
    """{linear kind: [max/median of ||X_j|| per layer]} on the dense model."""
    random.seed(seed)
    starts = [random.randint(0, len(calib_ids) - seqlen - 1) for _ in range(nsamples)]
    sums, hooks = {}, []
    for n, mod in model.named_modules():
        if isinstance(mod, torch.nn.Linear) and ".layers." in n:
            def hook(mod, inp, out, n=n):
                v = inp[0].reshape(-1, inp[0].shape[-1]).float()
                sums[n] = sums.get(n, 0) + (v ** 2).sum(0)
            hooks.append(mod.register_forward_hook(hook))
    for s in starts:
        model(input_ids=torch.tensor(calib_ids[s:s + seqlen]).unsqueeze(0))
    for h in hooks:
        h.remove()
    spread = {}
    for n, s in sums.items():
        r = s.sqrt()
        spread.setdefault(n.split(".")[-1], []).append(float(r.max() / r.median()))
    return spread


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(root, "samples", "kjv-llama"))
    ap.add_argument("--nsamples", type=int, default=128)
    ap.add_argument("--seqlen", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    tok = Tokenizer.from_file(os.path.join(a.model, "tokenizer.json"))
    with open(os.path.join(a.model, "heldout.txt"), encoding="utf-8") as f:
        heldout = tok.encode(f.read()).ids
    with open(os.path.join(a.model, "calib.txt"), encoding="utf-8") as f:
        calib = tok.encode(f.read()).ids
    for nm, label in ((None, "50%"), ((2, 4), "2:4")):
        for method in ("magnitude", "wanda"):
            model = prune(load(a.model), calib, method, nm, a.nsamples, a.seqlen, a.seed)
            print(f"{method} {label} {perplexity(model, heldout):.3f}", flush=True)
    for kind, v in channel_norm_spread(load(a.model), calib, a.nsamples, a.seqlen, a.seed).items():
        print(f"spread {kind} {min(v):.1f} {max(v):.1f}")


if __name__ == "__main__":
    main()
