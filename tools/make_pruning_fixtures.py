#!/usr/bin/env python3
"""Reference fixtures for packer/pruning (tests/pruning/): small layers pruned by torch
re-implementations of wanda (lib/layerwrapper.py WrappedGPT, lib/prune.py prune_wanda /
prune_magnitude) and sparsegpt (sparsegpt.py SparseGPT.add_batch / fasterprune), f32 on CPU.

The SparseGPT quantizer is Endor's stored one (ALGORITHMS.md "Quantization", pruning.h), not the
reference's quant.py: int8 per-row symmetric and int4 per-group asymmetric with f16 params (an
integer zero point as quant.py's, its step rounded to 7 bits so min = -z*scale fits f16), codes
rounded half away from zero, pruned entries exactly 0 (not quantized). int4 group params are
found when the loop reaches the group's first column, over the group's current (updated) W.

Usage: python3 tools/make_pruning_fixtures.py   (writes tests/fixtures/pruning/, deterministic)
"""
import json
import math
import pathlib

import numpy as np
import torch

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "pruning"
TOKENS_PER_SAMPLE = 16

# name: (n_out, n_in, samples per add_batch call, dead input columns)
LAYERS = {
    "a": (48, 96, [1, 2, 1, 3, 1], []),
    "b": (40, 130, [1, 1, 2, 2], [7]),       # fewer tokens than inputs, a dead input, a partial block
    "c": (32, 192, [2, 1, 1, 2, 1, 1], []),  # two blocks (128 + 64)
}
WANDA = [
    dict(name="a_u50", layer="a", ratio=0.5),
    dict(name="a_2of4", layer="a", n=2, m=4),
    dict(name="b_u50", layer="b", ratio=0.5),
    dict(name="c_4of8", layer="c", n=4, m=8),
    dict(name="c_u70", layer="c", ratio=0.7),
]
MAGNITUDE = [
    dict(name="a_u50", layer="a", ratio=0.5),
    dict(name="c_2of4", layer="c", n=2, m=4),
]
SPARSEGPT = [
    dict(name="a_u50", layer="a", ratio=0.5),
    dict(name="a_2of4", layer="a", n=2, m=4),
    dict(name="a_u50_int8", layer="a", ratio=0.5, quant="int8"),
    dict(name="b_u50", layer="b", ratio=0.5),
    dict(name="b_u50_int8", layer="b", ratio=0.5, quant="int8"),
    dict(name="b_u50_int4g32", layer="b", ratio=0.5, quant="int4", group_size=32),
    dict(name="c_2of4_int4g32", layer="c", n=2, m=4, quant="int4", group_size=32),
    dict(name="c_4of8_int8", layer="c", n=4, m=8, quant="int8"),
    dict(name="c_u60_int4g96_b64", layer="c", ratio=0.6, quant="int4", group_size=96, block_size=64),
]


def correlated_inputs(gen, n_samples, n_in, dead):
    """[n_samples, tokens, n_in]: low-rank mixing + noise, log-normal column scales, outliers."""
    t = n_samples * TOKENS_PER_SAMPLE
    k = max(4, n_in // 3)
    x = torch.randn(t, k, generator=gen) @ torch.randn(k, n_in, generator=gen) / math.sqrt(k)
    x += 0.3 * torch.randn(t, n_in, generator=gen)
    x *= torch.exp(0.7 * torch.randn(n_in, generator=gen))
    x[:, torch.randperm(n_in, generator=gen)[:3]] *= 8.0
    x[:, dead] = 0.0
    return x.reshape(n_samples, TOKENS_PER_SAMPLE, n_in).contiguous()


def batches_of(x, sizes):
    out, s = [], 0
    for b in sizes:
        out.append(x[s:s + b])
        s += b
    return out


# ---- wanda (lib/layerwrapper.py, lib/prune.py) ------------------------------------------------
def wanda_scaler(batches, n_in):
    scaler_row, nsamples = torch.zeros(n_in), 0
    for inp in batches:                      # WrappedGPT.add_batch, inp: [b, seq, in]
        tmp = inp.shape[0]
        inp = inp.reshape((-1, inp.shape[-1])).t()
        scaler_row *= nsamples / (nsamples + tmp)
        nsamples += tmp
        inp = inp.type(torch.float32)
        scaler_row += torch.norm(inp, p=2, dim=1) ** 2 / nsamples
    return scaler_row


def lowest_n_mask(metric, n, m):
    mask = torch.zeros_like(metric) == 1
    for ii in range(metric.shape[1]):
        if ii % m == 0:
            tmp = metric[:, ii:(ii + m)].float()
            mask.scatter_(1, ii + torch.topk(tmp, n, dim=1, largest=False)[1], True)
    return mask


def wanda_mask(w, scaler_row, case):
    metric = torch.abs(w) * torch.sqrt(scaler_row.reshape((1, -1)))
    if "m" in case:
        return lowest_n_mask(metric, case["n"], case["m"])
    mask = torch.zeros_like(metric) == 1
    sort_res = torch.sort(metric, dim=-1, stable=True)
    indices = sort_res[1][:, :int(metric.shape[1] * case["ratio"])]
    mask.scatter_(1, indices, True)
    return mask


def magnitude_mask(w, case):
    metric = torch.abs(w)
    if "m" in case:
        return lowest_n_mask(metric, case["n"], case["m"])
    thresh = torch.sort(metric.flatten())[0][int(w.numel() * case["ratio"])]
    return metric <= thresh


# ---- sparsegpt (sparsegpt.py) with Endor's stored quantizers ----------------------------------
def hessian(batches, n_in):
    h, nsamples = torch.zeros((n_in, n_in)), 0
    for inp in batches:                      # SparseGPT.add_batch
        tmp = inp.shape[0]
        inp = inp.reshape((-1, inp.shape[-1])).t()
        h *= nsamples / (nsamples + tmp)
        nsamples += tmp
        inp = math.sqrt(2 / nsamples) * inp.float()
        h += inp.matmul(inp.t())
    return h


def round_half_away(v):
    t = torch.trunc(v)
    return t + torch.where((v - t).abs() >= 0.5, torch.sign(v), torch.zeros_like(v))


def int8_scales(w):
    return torch.clamp(w.abs().amax(dim=1), min=1e-5) / 127.0


def int8_quant(x, scale):
    code = torch.clamp(round_half_away(x / scale), -127, 127)
    return code, code * scale


def int4_params(g):
    """g: [rows, cols] current values of one group -> f16 (scale, min): format.h int4_grid, the
    range widened to hold 0, the step rounded up to 7 significant bits, min = -z*scale for an
    integer z in [0, 15] (code z is exactly 0); where min would overflow f16, the grid over
    [mn, mx] (scale guarded to 1 where it is 0)."""
    mn, mx = g.amin(dim=1), g.amax(dim=1)
    lo, hi = torch.clamp(mn, max=0.0), torch.clamp(mx, min=0.0)
    step = (hi - lo) / 15.0
    f, e = torch.frexp(step)
    s = torch.ldexp(torch.ceil(f * 128.0) / 128.0, e.float())
    tiny = s.half().float() != s
    s = torch.where(tiny, torch.ldexp(torch.ceil(torch.ldexp(step, torch.tensor(24.0))), torch.tensor(-24.0)), s)
    zero_range = hi == lo
    s = torch.where(zero_range, torch.ones_like(s), s)
    z = torch.clamp(round_half_away(-lo / s), 0, 15)
    m = torch.where(z == 0, torch.zeros_like(s), -z * s)
    ok = (s.half().float() == s) & (m.half().float() == m)
    old_scale = (mx - mn) / 15.0
    old_s16 = old_scale.half()
    old_s16 = torch.where(old_s16 == 0, torch.ones_like(old_s16), old_s16)
    s16 = torch.where(ok, s.half(), old_s16)
    m16 = torch.where(ok, m.half(), mn.half())
    return s16, m16


def int4_quant(x, s16, m16):
    scale, mn = s16.float(), m16.float()
    code = torch.clamp(round_half_away((x - mn) / scale), 0, 15)
    return code, code * scale + mn


def fasterprune(w, h, case):
    """sparsegpt.py fasterprune, plus the records the tests use to recognise near-ties."""
    sparsity = case.get("ratio", 0.0)
    prunen, prunem = case.get("n", 0), case.get("m", 0)
    blocksize, percdamp = case.get("block_size", 128), case.get("percdamp", 0.01)
    quant, gsize = case.get("quant", "none"), case.get("group_size", 0)
    rows, columns = w.shape
    W = w.clone().float()
    rec = {"score": torch.zeros_like(W)}
    if quant != "none":
        rec["prequant"] = torch.zeros_like(W)  # w at the moment it was quantized
    thresholds = []
    if quant == "int8":
        rec["row_scales"] = int8_scales(W)
        codes = torch.zeros_like(W)
    if quant == "int4":
        n_groups = (columns + gsize - 1) // gsize
        g_scales = torch.zeros((rows, n_groups), dtype=torch.float16)
        g_mins = torch.zeros((rows, n_groups), dtype=torch.float16)
        codes = torch.zeros_like(W)

    H = h.clone()
    dead = torch.diag(H) == 0
    H[dead, dead] = 1
    W[:, dead] = 0
    damp = percdamp * torch.mean(torch.diag(H))
    diag = torch.arange(columns)
    H[diag, diag] += damp
    H = torch.linalg.cholesky(H)
    H = torch.cholesky_inverse(H)
    H = torch.linalg.cholesky(H, upper=True)
    Hinv = H
    rec["hinv_diag"] = torch.diag(Hinv).clone()
    mask = torch.zeros_like(W) == 1

    for i1 in range(0, columns, blocksize):
        i2 = min(i1 + blocksize, columns)
        count = i2 - i1
        W1 = W[:, i1:i2].clone()
        Q1 = torch.zeros_like(W1)
        Err1 = torch.zeros_like(W1)
        Hinv1 = Hinv[i1:i2, i1:i2]
        if prunen == 0:
            tmp = W1 ** 2 / (torch.diag(Hinv1).reshape((1, -1))) ** 2
            thresh = torch.sort(tmp.flatten())[0][int(tmp.numel() * sparsity)]
            mask1 = tmp <= thresh
            rec["score"][:, i1:i2] = tmp
            thresholds.append(thresh.item())
        else:
            mask1 = torch.zeros_like(W1) == 1
        for i in range(count):
            w_col = W1[:, i]
            d = Hinv1[i, i]
            if prunen != 0 and i % prunem == 0:
                tmp = W1[:, i:(i + prunem)] ** 2 / (torch.diag(Hinv1)[i:(i + prunem)].reshape((1, -1))) ** 2
                mask1.scatter_(1, i + torch.topk(tmp, prunen, dim=1, largest=False)[1], True)
                rec["score"][:, i1 + i:i1 + i + prunem] = tmp
            c = i1 + i
            if quant == "int4" and c % gsize == 0:
                end = min(c + gsize, columns)
                cur = W1[:, i:min(count, end - i1)]
                if end > i2:  # the group reaches into later blocks: their current W
                    cur = torch.cat([cur, W[:, i2:end]], dim=1)
                g_scales[:, c // gsize], g_mins[:, c // gsize] = int4_params(cur)
            q = w_col.clone()
            if quant != "none":
                rec["prequant"][:, c] = w_col
            if quant == "int8":
                code, q = int8_quant(w_col, rec["row_scales"])
            elif quant == "int4":
                code, q = int4_quant(w_col, g_scales[:, c // gsize], g_mins[:, c // gsize])
            if quant != "none":
                codes[:, c] = torch.where(mask1[:, i], torch.zeros_like(code), code)
            q[mask1[:, i]] = 0
            Q1[:, i] = q
            err1 = (w_col - q) / d
            W1[:, i:] -= err1.unsqueeze(1).matmul(Hinv1[i, i:].unsqueeze(0))
            Err1[:, i] = err1
        W[:, i1:i2] = Q1
        mask[:, i1:i2] = mask1
        W[:, i2:] -= Err1.matmul(Hinv[i1:i2, i2:])

    rec["W"] = W
    rec["mask"] = mask
    if prunen == 0:
        rec["thresh"] = torch.tensor(thresholds, dtype=torch.float32)
    if quant != "none":
        rec["codes"] = codes.to(torch.int8 if quant == "int8" else torch.uint8)
    if quant == "int4":
        rec["group_scales"], rec["group_mins"] = g_scales, g_mins
    return rec


# ---- output -------------------------------------------------------------------------------
def save(name, t):
    a = t.numpy() if isinstance(t, torch.Tensor) else t
    if a.dtype == np.bool_:
        a = a.astype(np.uint8)
    elif a.dtype == np.float16:
        a = a.view(np.uint16)  # f16 bits, as the container stores them
    np.save(OUT / f"{name}.npy", np.ascontiguousarray(a.astype(a.dtype.newbyteorder("<"))))


def relative_gap_at_cut(metric, k):
    """Smallest relative gap between the k-th and (k+1)-th lowest score over rows."""
    s = torch.sort(metric, dim=1)[0]
    return ((s[:, k] - s[:, k - 1]) / s[:, k]).min().item()


def main():
    torch.set_num_threads(1)
    OUT.mkdir(parents=True, exist_ok=True)
    for old in OUT.glob("*.npy"):
        old.unlink()
    gen = torch.Generator().manual_seed(20240917)
    layers, weights, scalers, hessians = {}, {}, {}, {}
    for name, (n_out, n_in, sizes, dead) in LAYERS.items():
        x = correlated_inputs(gen, sum(sizes), n_in, dead)
        w = torch.randn(n_out, n_in, generator=gen) * torch.exp(0.3 * torch.randn(n_out, 1, generator=gen))
        batches = batches_of(x, sizes)
        weights[name], scalers[name], hessians[name] = w, wanda_scaler(batches, n_in), hessian(batches, n_in)
        save(f"{name}_W", w)
        save(f"{name}_X", x)
        save(f"{name}_wanda_scaler", scalers[name])
        save(f"{name}_H", hessians[name])
        layers[name] = dict(n_out=n_out, n_in=n_in, tokens_per_sample=TOKENS_PER_SAMPLE,
                            batch_samples=sizes, dead_inputs=dead)
    for case in WANDA:
        w = weights[case["layer"]]
        save(f"wanda_{case['name']}_mask", wanda_mask(w, scalers[case["layer"]], case))
        if "ratio" in case:
            metric = torch.abs(w) * torch.sqrt(scalers[case["layer"]])
            k = int(w.shape[1] * case["ratio"])
            print(f"wanda {case['name']}: min relative score gap at the cut {relative_gap_at_cut(metric, k):.2e}")
    for case in MAGNITUDE:
        save(f"magnitude_{case['name']}_mask", magnitude_mask(weights[case["layer"]], case))
    for case in SPARSEGPT:
        rec = fasterprune(weights[case["layer"]], hessians[case["layer"]], case)
        for key, t in rec.items():
            save(f"sparsegpt_{case['name']}_{key}", t)
        print(f"sparsegpt {case['name']}: sparsity {rec['mask'].float().mean().item():.4f}")
    manifest = dict(layers=layers, wanda=WANDA, magnitude=MAGNITUDE, sparsegpt=SPARSEGPT)
    (OUT / "cases.json").write_text(json.dumps(manifest, indent=1) + "\n")
    total = sum(p.stat().st_size for p in OUT.iterdir())
    print(f"wrote {len(list(OUT.iterdir()))} files, {total / 1024:.0f} KiB, to {OUT}")


if __name__ == "__main__":
    main()
