"""Weight variants of one checkpoint: the exact arithmetic the C++ packer must reproduce.

All arrays are numpy float32, Linear weights are [out, in] (row = output), computed on CPU.

rounding
  f16(x)  = float32(float16(x)),  bf16(x) = float32(bfloat16(x)); both round to nearest even.
  round(x) = round half AWAY from zero, like C's roundf(x), applied to a float32 x.

mag50 (per-row magnitude pruning, p = 0.5)
  For each output row r of W [out, in]: order = stable argsort of |W[r, :]| (float32 values, ties
  keep the lower column first); zero the first int(in * p) columns of that order (set to +0.0).
  So among equal |w| at the boundary the LOWER column index is pruned. Such ties are real in the
  16-bit checkpoints (e.g. 105 of 1152 rows of llama-gqa-bf16), so the packer must sort the same way.
  Applies to every 2-D Linear weight INSIDE the decoder blocks (q/k/v/o or out_proj, gate/up/down,
  fc1/fc2). Never embeddings, positions, lm_head, project_in/out, norms or biases.

int8 (after pruning; per output row, symmetric, over the present = non-zero values)
  s  = max(max_c |W[r, c]|, 1e-5) / 127                 (float32 division)
  q  = clamp(round(W[r, c] / s), -127, 127)            (W / s is a float32 division)
  W' = q * s                                            (float32 multiply)
  Pruned entries give q = 0, W' = 0. (A present value with |W| < s/2 also decodes to 0.)

int4 (after pruning; per (row r, group of G = 32 consecutive input columns [32g, min(32g+32, in))),
      asymmetric, over the present values of the group)
  If the group has no present value: all its entries stay 0 (no parameters needed).
  mn, mx = min, max of the present values                        (float32)
  lo, hi = min(mn, 0), max(mx, 0)                                 (the grid holds an exact 0)
  step   = (hi - lo) / 15, rounded UP to 7 significant bits      (below f16's normal range: up
                                                                   to a multiple of 2^-24)
  z      = clamp(round(-lo / step), 0, 15);  mn = -z * step       (exact; code z decodes to 0)
  (if mn is not an f16 value: scale = f16((mx - mn) / 15) or 1, mn = f16(mn), as before 2026-11-25)
  q      = clamp(round((x - mn) / scale), 0, 15)                   (float32 subtract, then divide)
  x'     = q * scale + mn                                          (float32 multiply, then add; no FMA)
  Pruned entries stay exactly 0 (they are not quantized).

Every tensor that is not a pruned Linear weight is rounded with f16() in all mag50_* variants.

Mixture-of-experts models (Qwen3-MoE, Mixtral): transformers holds the experts of a block stacked,
experts.gate_up_proj [E, 2I, H] and experts.down_proj [E, H, I]; each expert's [2I, H] and [H, I] is
pruned and quantized as the Linears above (row by row, so gate and up alike). The router
(mlp.gate.weight, [E, H]) is never pruned, quantized or rounded: it stays float32 in every variant,
as endor-pack keeps it in the source dtype.
"""
import numpy as np
import torch

SPARSITY = 0.5
INT4_GROUP = 32

VARIANTS = ["orig", "f16", "bf16", "mag50_f16", "mag50_int8", "mag50_int4"]

VARIANT_DOC = {
    "orig": "the weights as saved in the checkpoint (as float32)",
    "f16": "every tensor rounded to float16 and back",
    "bf16": "every tensor rounded to bfloat16 and back",
    "mag50_f16": "decoder-block Linear weights pruned 50% per output row by magnitude, then every "
                 "tensor rounded to float16",
    "mag50_int8": "same pruning, then pruned Linear weights INT8 per output row symmetric over the "
                  "present values (dequantized to f32); other tensors rounded to float16",
    "mag50_int4": "same pruning, then pruned Linear weights 4-bit asymmetric per (row, group of 32 "
                  "input columns) over the present values, scale and min rounded to float16 "
                  "(dequantized to f32); other tensors rounded to float16",
}


def round_f16(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float16).astype(np.float32)


def round_bf16(x: np.ndarray) -> np.ndarray:
    return torch.from_numpy(np.ascontiguousarray(x)).to(torch.bfloat16).to(torch.float32).numpy()


def round_half_away(x: np.ndarray) -> np.ndarray:
    """C roundf() of float32 values (the +0.5 is exact in float64)."""
    x64 = x.astype(np.float64)
    return (np.sign(x64) * np.floor(np.abs(x64) + 0.5)).astype(np.float32)


def prune_magnitude_rows(w: np.ndarray, sparsity: float = SPARSITY) -> np.ndarray:
    rows, cols = w.shape
    n_prune = int(cols * sparsity)
    order = np.argsort(np.abs(w), axis=1, kind="stable")[:, :n_prune]
    out = w.copy()
    np.put_along_axis(out, order, np.float32(0.0), axis=1)
    return out


def quantize_int8_rows(w: np.ndarray) -> np.ndarray:
    out = np.zeros_like(w)
    for r in range(w.shape[0]):
        row = w[r]
        s = np.float32(max(np.float32(np.abs(row).max()), np.float32(1e-5))) / np.float32(127)
        q = np.clip(round_half_away(row / s), -127, 127).astype(np.float32)
        out[r] = q * s
    return out


def int4_grid(mn: np.float32, mx: np.float32):
    """format.h int4_grid: (scale, min) as float32 values of f16s, min = -z*scale."""
    f16 = lambda v: round_f16(np.array([v], np.float32))[0]
    lo, hi = min(mn, np.float32(0)), max(mx, np.float32(0))
    if hi == lo:
        return np.float32(1), np.float32(0)
    step = np.float32((hi - lo) / np.float32(15))
    f, e = np.frexp(step)
    s = np.float32(np.ldexp(np.float32(np.ceil(f * np.float32(128)) / np.float32(128)), e))
    if f16(s) != s:
        s = np.float32(np.ldexp(np.ceil(np.ldexp(np.float64(step), 24)), -24))
    z = np.float32(min(15.0, max(0.0, float(round_half_away(np.array([-lo / s], np.float32))[0]))))
    m = np.float32(0) if z == 0 else np.float32(-z * s)
    if f16(s) == s and f16(m) == m:
        return s, m
    scale = f16(np.float32((mx - mn) / np.float32(15)))
    return (np.float32(1) if scale == 0 else scale), f16(mn)


def quantize_int4_groups(w: np.ndarray, group: int = INT4_GROUP) -> np.ndarray:
    out = np.zeros_like(w)
    rows, cols = w.shape
    for r in range(rows):
        for c0 in range(0, cols, group):
            x = w[r, c0:c0 + group]
            present = x != 0
            if not present.any():
                continue
            mn = np.float32(x[present].min())
            mx = np.float32(x[present].max())
            scale, mn = int4_grid(mn, mx)
            q = np.clip(round_half_away((x - mn) / scale), 0, 15).astype(np.float32)
            deq = (q * scale).astype(np.float32) + mn
            out[r, c0:c0 + group] = np.where(present, deq, np.float32(0))
    return out


def prunable_linear_weights(model) -> list:
    """Names of the 2-D Linear weights inside decoder blocks (".layers.<i>."), in module order, and
    of MoE blocks' stacked expert weights (3-D, one Linear per expert)."""
    names = []
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and ".layers." in name:
            names.append(name + ".weight")
    for name, p in model.named_parameters():
        if p.dim() == 3 and ".experts." in name:
            names.append(name)
    return names


def is_router(name: str) -> bool:
    return name.endswith("mlp.gate.weight") or name.endswith("block_sparse_moe.gate.weight")


def variant_of_linear(w: np.ndarray, variant: str, name: str) -> np.ndarray:
    """One 2-D Linear weight pruned and quantized as `variant` says."""
    new = prune_magnitude_rows(w)
    zeros = (new == 0).sum(axis=1)
    n_prune = int(w.shape[1] * SPARSITY)
    assert (zeros == n_prune).all(), (name, zeros.min(), zeros.max(), n_prune)
    if variant == "mag50_f16":
        new = round_f16(new)
    elif variant == "mag50_int8":
        new = quantize_int8_rows(new)
    elif variant == "mag50_int4":
        new = quantize_int4_groups(new)
    else:
        raise ValueError(variant)
    # Pruned entries must still be exactly zero after quantization.
    assert np.isfinite(new).all() and np.all(new[prune_mask(w)] == 0), name
    return new


def apply_variant(model, variant: str) -> dict:
    """Rewrites the parameters of `model` (a float32 copy) in place. Returns per-tensor stats."""
    pruned = set(prunable_linear_weights(model))
    stats = {}
    with torch.no_grad():
        # named_parameters() yields a tied tensor once, so lm_head follows the embedding.
        for name, p in model.named_parameters():
            w = p.detach().cpu().numpy().astype(np.float32, copy=True)
            if variant == "orig" or is_router(name):
                continue
            if variant == "f16":
                new = round_f16(w)
            elif variant == "bf16":
                new = round_bf16(w)
            elif name in pruned and w.ndim == 3:  # stacked experts: each expert a Linear
                new = np.stack([variant_of_linear(w[e], variant, f"{name}[{e}]") for e in range(w.shape[0])])
                stats[name] = {"zeros_per_row": int(w.shape[2] * SPARSITY), "in": int(w.shape[2]),
                               "experts": int(w.shape[0])}
            elif name in pruned:
                new = variant_of_linear(w, variant, name)
                stats[name] = {"zeros_per_row": int(w.shape[1] * SPARSITY), "in": int(w.shape[1])}
            else:
                new = round_f16(w)
            p.copy_(torch.from_numpy(new))
    return stats


def prune_mask(w: np.ndarray) -> np.ndarray:
    """Boolean mask of the entries prune_magnitude_rows() zeroes."""
    return prune_magnitude_rows(w) == 0
