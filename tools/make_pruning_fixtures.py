#!/usr/bin/env python3
"""Reference fixtures for packer/pruning (tests/pruning/): small layers pruned by torch
re-implementations of wanda (lib/layerwrapper.py WrappedGPT, lib/prune.py prune_wanda /
prune_magnitude), sparsegpt (sparsegpt.py SparseGPT.add_batch / fasterprune) and gptq
(IST-DASLab gptq.py GPTQ.fasterquant with static_groups=True, actorder on and off), f32 on CPU.

The SparseGPT quantizer is Endor's stored one (docs/algorithms.md "Quantization", pruning.h), not the
reference's quant.py: int8 per-row symmetric and int4 per-group asymmetric with f16 params (an
integer zero point as quant.py's, its step rounded to 7 bits so min = -z*scale fits f16), codes
rounded half away from zero, pruned entries exactly 0 (not quantized). int4 group params are
found when the loop reaches the group's first column, over the group's current (updated) W.

GPTQ uses the same stored quantizers with static groups (every group's parameters from the input
W after dead inputs are zeroed, before any column is quantized): int8 per row, the zero-code int4
grid (SPEC.md §7.2) and the int4k coded grid (SPEC.md §6.7/§7.4, round to nearest: a float
minimum per group, six-bit codes under f16 super-block scales). No pruning.

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
# GPTQ on the first `rows` output rows of a layer (rows are independent given H; few rows keep
# the fixtures small). quant: int4 (zero-code grid), int4k (coded grid) or int8.
GPTQ = [
    dict(name="a_int4g32", layer="a", rows=16, quant="int4", group_size=32),
    dict(name="a_int4g32_act", layer="a", rows=16, quant="int4", group_size=32, act_order=True),
    dict(name="b_int4g64_act", layer="b", rows=16, quant="int4", group_size=64, act_order=True),  # dead input, partial group and block
    dict(name="a_int4kg32", layer="a", rows=16, quant="int4k", group_size=32),
    dict(name="b_int4kg32_act", layer="b", rows=16, quant="int4k", group_size=32, act_order=True),
    dict(name="a_int4kg64_act_b32", layer="a", rows=24, quant="int4k", group_size=64, act_order=True, block_size=32),
    dict(name="b_int8", layer="b", rows=16, quant="int8"),
    dict(name="a_int8_act_b64", layer="a", rows=16, quant="int8", act_order=True, block_size=64),
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


# ---- gptq (gptq.py GPTQ.fasterquant, static_groups=True) with Endor's stored quantizers ------
def int4k_params(W, gsize):
    """SPEC.md §7.4's round-to-nearest int4k grid over every group of W [rows, cols]: per group
    S_want = (mx - lo)/15, M_want = lo = min(mn, 0); per super-block of 8 consecutive parameters
    (row-major, p = r*groups_per_row + g) d = f16(max S_want/63), dmin = f16(max -M_want/63),
    sc = clamp(round(S_want/d), 1, 63), mc = clamp(round(-M_want/dmin), 0, 63) (0 where the wanted
    value or the super scale is 0). Returns the decoded S = d*sc, M = -(dmin*mc) as [rows, gpr]
    f32, the f16 (d, dmin) pairs [n_super*2] and the (sc, mc) codes [n_params*2]."""
    rows, cols = W.shape
    gpr = (cols + gsize - 1) // gsize
    s_want, m_want = torch.zeros(rows, gpr), torch.zeros(rows, gpr)
    for g in range(gpr):
        grp = W[:, g * gsize:(g + 1) * gsize]
        lo = torch.clamp(grp.amin(dim=1), max=0.0)
        s_want[:, g] = (grp.amax(dim=1) - lo) / 15.0
        m_want[:, g] = lo
    s, m = s_want.flatten(), m_want.flatten()
    n = s.numel()
    n_super = (n + 7) // 8
    pad = n_super * 8 - n
    smax = torch.cat([s, torch.zeros(pad)]).view(n_super, 8).amax(dim=1)
    mmax = torch.cat([-m, torch.zeros(pad)]).view(n_super, 8).amax(dim=1)
    d16, dmin16 = (smax / 63.0).half(), (mmax / 63.0).half()
    d, dmin = d16.float().repeat_interleave(8)[:n], dmin16.float().repeat_interleave(8)[:n]
    sc = torch.where((s == 0) | (d == 0), torch.zeros_like(s), torch.clamp(round_half_away(s / d), 1, 63))
    mc = torch.where((m == 0) | (dmin == 0), torch.zeros_like(m), torch.clamp(round_half_away(-m / dmin), 0, 63))
    scale, mins = d * sc, -(dmin * mc)
    super_scales = torch.stack([d16, dmin16], dim=1).flatten()
    codes = torch.stack([sc, mc], dim=1).flatten().to(torch.uint8)
    return scale.view(rows, gpr), mins.view(rows, gpr), super_scales, codes


def int4_code_on(x, scale, mn):
    """pruning.h int4_code_on: clamp(round((x - min)/scale), 0, 15), 0 where scale is 0."""
    safe = torch.where(scale == 0, torch.ones_like(scale), scale)
    code = torch.where(scale == 0, torch.zeros_like(x), torch.clamp(round_half_away((x - mn) / safe), 0, 15))
    return code, code * scale + mn


def fasterquant(w, h, case):
    """gptq.py fasterquant(static_groups=True, actorder=case["act_order"]), plus the records the
    tests use to recognise near-ties (prequant: w at the moment it was quantized; perm: the
    processing order, perm[c] = original column of working column c; hinv_diag: U's diagonal in
    that order; loss: sum over the layer of (w - q)^2/d^2 / 2, as the reference's Losses)."""
    blocksize, percdamp = case.get("block_size", 128), case.get("percdamp", 0.01)
    quant, gsize, actorder = case["quant"], case.get("group_size", 0), case.get("act_order", False)
    rows, columns = w.shape
    W = w.clone().float()
    rec = {}
    if quant == "int8":
        rec["row_scales"] = int8_scales(W)   # quantizer.find_params(W) before the dead inputs

    H = h.clone()
    dead = torch.diag(H) == 0
    H[dead, dead] = 1
    W[:, dead] = 0

    # static_groups: every group's quantizer from the (dead-zeroed) input W
    gpr = (columns + gsize - 1) // gsize if gsize else 0
    if quant == "int4":
        s16 = torch.zeros((rows, gpr), dtype=torch.float16)
        m16 = torch.zeros((rows, gpr), dtype=torch.float16)
        for g in range(gpr):
            s16[:, g], m16[:, g] = int4_params(W[:, g * gsize:(g + 1) * gsize])
        g_scale, g_min = s16.float(), m16.float()
        rec["group_scales"], rec["group_mins"] = s16, m16
    if quant == "int4k":
        g_scale, g_min, rec["super_scales"], rec["param_codes"] = int4k_params(W, gsize)

    if actorder:
        perm = torch.argsort(torch.diag(H), descending=True, stable=True)
    else:
        perm = torch.arange(columns)
    W = W[:, perm]
    H = H[perm][:, perm]
    invperm = torch.argsort(perm)

    damp = percdamp * torch.mean(torch.diag(H))
    diag = torch.arange(columns)
    H[diag, diag] += damp
    H = torch.linalg.cholesky(H)
    H = torch.cholesky_inverse(H)
    H = torch.linalg.cholesky(H, upper=True)
    Hinv = H

    Q = torch.zeros_like(W)
    codes = torch.zeros_like(W)            # original column order
    prequant = torch.zeros_like(W)         # original column order
    loss = torch.zeros(rows, dtype=torch.float64)
    for i1 in range(0, columns, blocksize):
        i2 = min(i1 + blocksize, columns)
        count = i2 - i1
        W1 = W[:, i1:i2].clone()
        Q1 = torch.zeros_like(W1)
        Err1 = torch.zeros_like(W1)
        Hinv1 = Hinv[i1:i2, i1:i2]
        for i in range(count):
            w_col = W1[:, i]
            d = Hinv1[i, i]
            oc = perm[i1 + i].item()       # groups[perm[idx] // groupsize]
            prequant[:, oc] = w_col
            if quant == "int8":
                code, q = int8_quant(w_col, rec["row_scales"])
            else:
                code, q = int4_code_on(w_col, g_scale[:, oc // gsize], g_min[:, oc // gsize])
            codes[:, oc] = code
            Q1[:, i] = q
            loss += ((w_col - q) ** 2 / d ** 2).double()
            err1 = (w_col - q) / d
            W1[:, i:] -= err1.unsqueeze(1).matmul(Hinv1[i, i:].unsqueeze(0))
            Err1[:, i] = err1
        Q[:, i1:i2] = Q1
        W[:, i2:] -= Err1.matmul(Hinv[i1:i2, i2:])

    if quant == "int8":
        rec["_scale"] = rec["row_scales"].unsqueeze(1).expand(rows, columns)
    else:
        idx = torch.arange(columns) // gsize
        rec["_scale"], rec["_min"] = g_scale[:, idx], g_min[:, idx]
    rec["_W"] = Q[:, invperm]              # = codes decoded on the parameters; the tests decode
    rec["codes"] = codes.to(torch.int8 if quant == "int8" else torch.uint8)
    rec["prequant"] = prequant
    rec["perm"] = perm.to(torch.int32)
    rec["hinv_diag"] = torch.diag(Hinv).clone()  # processing order
    rec["loss"] = torch.tensor([loss.sum().item() / 2], dtype=torch.float64)
    return rec


def code_tie_margin(rec):
    """Smallest distance, in code units, of a reference code argument from a rounding boundary
    (informational: how close the fixtures come to ties)."""
    v = (rec["prequant"] - rec["_min"] if "_min" in rec else rec["prequant"]) / rec["_scale"]
    return (v - (torch.floor(v) + 0.5)).abs().min().item()


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
    for case in GPTQ:
        rows = case["rows"]
        rec = fasterquant(weights[case["layer"]][:rows], hessians[case["layer"]], case)
        for key, t in rec.items():
            if not key.startswith("_"):
                save(f"gptq_{case['name']}_{key}", t)
        print(f"gptq {case['name']}: loss {rec['loss'].item():.6g}, smallest distance of a code argument "
              f"from a rounding boundary {code_tie_margin(rec):.2e} code units")
    manifest = dict(layers=layers, wanda=WANDA, magnitude=MAGNITUDE, sparsegpt=SPARSEGPT, gptq=GPTQ)
    (OUT / "cases.json").write_text(json.dumps(manifest, indent=1) + "\n")
    total = sum(p.stat().st_size for p in OUT.iterdir())
    print(f"wrote {len(list(OUT.iterdir()))} files, {total / 1024:.0f} KiB, to {OUT}")


if __name__ == "__main__":
    main()
