#!/usr/bin/env python3
"""Load an `endor-pack export` folder in transformers (compressed-tensors for the pack-quantized
one) and check it against Endor. float32 arithmetic on CPU, eager attention.

  export_check_transformers.py weights FOLDER FILE.endor
      every parameter transformers loads equals the container's decoded tensor bit for bit (a tied
      lm_head: the embedding); exit 1 otherwise
  export_check_transformers.py logits FOLDER --ids "1 2 3" --endor-logits X.npy [--rtol 1e-3]
      transformers' logits on the ids against `endor-infer FILE.endor --exact --ids ... --dump-logits
      X.npy`: max |a − b| / max |b| over all positions; exit 1 above rtol
  export_check_transformers.py perplexity FOLDER --ids-file IDS.txt --ctx L
      mean NLL and perplexity as endor-infer --perplexity computes them (non-overlapping windows of
      L tokens, the tail dropped, each window's mean NLL over L − 1 predictions, their mean)
  export_check_transformers.py all --ct CT --hf HF --endor FILE.endor --ids ... --endor-logits X.npy
                                   --ids-file IDS.txt --ctx L
      weights of both folders, logits of CT, perplexity of HF, in one process (torch loads once)

A pack-quantized folder is loaded with dequantize=True: transformers 5.24 with compressed-tensors
0.20 builds its compressed modules with unpacked zero points ([out, groups]) and refuses the
format's packed ones ([ceil(out/8), groups], as compressed-tensors itself writes them and vLLM reads
them); dequantizing on load goes through compressed-tensors' own decompression.
Needs torch, transformers, compressed-tensors, numpy (tools/requirements-export.txt).
"""
import argparse
import math
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def load(folder):
    import json
    from transformers import AutoModelForCausalLM
    cfg = json.load(open(os.path.join(folder, "config.json")))
    kw = {"dtype": torch.float32, "attn_implementation": "eager"}
    if "quantization_config" in cfg:
        from transformers import CompressedTensorsConfig
        kw["quantization_config"] = CompressedTensorsConfig(dequantize=True)
    model = AutoModelForCausalLM.from_pretrained(folder, **kw)
    model.eval()
    return model


def cmd_weights(a):
    sys.path.insert(0, HERE)
    import endor_decode
    model = load(a.folder)
    e = endor_decode.EndorFile(a.endor)
    params = dict(model.named_parameters(remove_duplicate=False))
    bad, seen = 0, 0
    for name, p in params.items():
        src = name
        if name == "lm_head.weight" and name not in e.tensors:
            src = next(n for n in e.tensors if n.endswith("embed_tokens.weight"))
        if src not in e.tensors:
            print(f"NOT IN THE CONTAINER {name}")
            bad += 1
            continue
        want = e.decode(src).reshape(-1)
        got = p.detach().to(torch.float32).numpy().reshape(-1)
        seen += 1
        if want.shape != got.shape or not np.array_equal(want.view(np.uint32), got.view(np.uint32)):
            print(f"DIFFERS {name}")
            bad += 1
    print(f"{seen} parameters compared, {bad} problems")
    return 1 if bad else 0


def cmd_logits(a):
    ids = [int(x) for x in a.ids.split()]
    model = load(a.folder)
    with torch.no_grad():
        got = model(input_ids=torch.tensor([ids])).logits[0].float().numpy()
    want = np.load(a.endor_logits).astype(np.float32).reshape(got.shape)
    rel = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
    print(f"{len(ids)} tokens, max |transformers - endor| / max |endor| = {rel:.3g} (limit {a.rtol:g})")
    return 0 if rel <= a.rtol else 1


def cmd_perplexity(a):
    ids = [int(x) for x in open(a.ids_file).read().split()]
    model = load(a.folder)
    L = a.ctx
    n = len(ids) // L
    means = []
    with torch.no_grad():
        for w in range(n):
            x = torch.tensor([ids[w * L:(w + 1) * L]])
            logits = model(input_ids=x).logits[0].double()
            nll = torch.nn.functional.cross_entropy(logits[:-1], x[0, 1:], reduction="sum").item()
            means.append(nll / (L - 1))
    mean = sum(means) / len(means)
    print(f"windows: {n} x {L}")
    print(f"mean NLL: {mean:.9f}")
    print(f"perplexity: {math.exp(mean):.6f}")
    return 0


def cmd_all(a):
    rc = 0
    for folder in (a.ct, a.hf):
        print(f"== weights {folder}")
        rc |= cmd_weights(argparse.Namespace(folder=folder, endor=a.endor))
    print(f"== logits {a.ct}")
    rc |= cmd_logits(argparse.Namespace(folder=a.ct, ids=a.ids, endor_logits=a.endor_logits, rtol=a.rtol))
    print(f"== perplexity {a.hf}")
    rc |= cmd_perplexity(argparse.Namespace(folder=a.hf, ids_file=a.ids_file, ctx=a.ctx))
    return rc


def main():
    torch.set_num_threads(max(1, int(os.environ.get("ENDOR_TORCH_THREADS", "2"))))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("weights")
    w.add_argument("folder")
    w.add_argument("endor")
    lg = sub.add_parser("logits")
    lg.add_argument("folder")
    lg.add_argument("--ids", required=True)
    lg.add_argument("--endor-logits", required=True)
    lg.add_argument("--rtol", type=float, default=1e-3)
    p = sub.add_parser("perplexity")
    p.add_argument("folder")
    p.add_argument("--ids-file", required=True)
    p.add_argument("--ctx", type=int, required=True)
    al = sub.add_parser("all")
    for k in ("--ct", "--hf", "--endor", "--ids", "--endor-logits", "--ids-file"):
        al.add_argument(k, required=True)
    al.add_argument("--ctx", type=int, required=True)
    al.add_argument("--rtol", type=float, default=1e-3)
    a = ap.parse_args()
    return {"weights": cmd_weights, "logits": cmd_logits, "perplexity": cmd_perplexity, "all": cmd_all}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
