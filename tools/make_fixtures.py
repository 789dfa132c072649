#!/usr/bin/env python3
"""Writes the tiny Hugging Face checkpoints and transformers references under tests/fixtures/models.

Usage: python3 tools/make_fixtures.py [--out tests/fixtures/models] [--only NAME ...]

Each model folder holds a checkpoint saved by transformers (config.json, safetensors, generation
config), a byte-level BPE tokenizer.json, reference.json (prompts, config summary, greedy
continuation, file list) and float32 logits [tokens, vocab] per prompt and weight variant, all
computed by transformers on CPU in float32 with eager attention. Deterministic: fixed seeds, one
thread, same bytes on every run with the same library versions (tools/requirements-fixtures.txt).
The weight variants' exact arithmetic is documented in fixtures_lib/weight_variants.py.
"""
import argparse
import copy
import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import safetensors
import tokenizers
import torch
import transformers
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fixtures_lib.corpus import LONG_PROMPT_TEXT, PROMPT_TEXTS  # noqa: E402
from fixtures_lib.model_specs import SPECS, ModelSpec, randomize_parameters  # noqa: E402
from fixtures_lib.tokenizers_fx import build_llama3_tokenizer, build_opt_tokenizer  # noqa: E402
from fixtures_lib import weight_variants as wv  # noqa: E402

N_NEW_TOKENS = 32
MAX_PROMPT_TOKENS = 12
# In a subfolder so a reader globbing "<folder>/*.safetensors" never takes it for a shard.
VARIANT_WEIGHTS_FILE = "variant_weights/mag50.safetensors"
DTYPE_NAMES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


def versions() -> dict:
    return {"python": sys.version.split()[0], "torch": torch.__version__,
            "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
            "safetensors": safetensors.__version__, "numpy": np.__version__}


# ---- checkpoint writing -------------------------------------------------------------------------

def checkpoint_files(folder: Path) -> list:
    return sorted(p.name for p in folder.glob("*.safetensors"))


def strip_model_prefix(folder: Path) -> None:
    """Rewrites model.safetensors with keys 'model.X' -> 'X' (same tensors, same metadata)."""
    path = folder / "model.safetensors"
    with safe_open(str(path), "pt") as f:
        metadata = f.metadata()
    tensors = load_file(str(path))
    renamed = {(k[len("model."):] if k.startswith("model.") else k): v for k, v in tensors.items()}
    assert len(renamed) == len(tensors)
    save_file(renamed, str(path), metadata=metadata)


def to_hub_style_config(folder: Path) -> None:
    """transformers 5 writes rope_parameters {rope_theta, rope_type, ...} and "dtype"; checkpoints on
    the hub (saved by 4.x) have top-level rope_theta, rope_scaling (absent for default RoPE) and
    "torch_dtype". Rewrite to the latter so the runtime sees both layouts."""
    path = folder / "config.json"
    cfg = json.loads(path.read_text())
    rope = dict(cfg.pop("rope_parameters"))
    cfg["rope_theta"] = rope.pop("rope_theta")
    if rope.get("rope_type", "default") != "default":
        cfg["rope_scaling"] = rope
    cfg["torch_dtype"] = cfg.pop("dtype")
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def save_checkpoint(spec: ModelSpec, model, folder: Path) -> None:
    saved = copy.deepcopy(model).to(spec.dtype)
    kwargs = {"max_shard_size": spec.max_shard_size} if spec.max_shard_size else {}
    saved.save_pretrained(str(folder), **kwargs)
    if spec.strip_model_prefix:
        strip_model_prefix(folder)
    if spec.hub_style_config:
        to_hub_style_config(folder)


def load_f32(folder: Path, dtype: torch.dtype, moe: bool = False):
    """Loads like a user would (native dtype), then converts to float32 for the references. MoE
    models run their experts eagerly (a loop over experts, index_add_ in expert order)."""
    extra = {"experts_implementation": "eager"} if moe else {}
    model, info = AutoModelForCausalLM.from_pretrained(
        str(folder), dtype=dtype, attn_implementation="eager", output_loading_info=True, **extra)
    for key in ("missing_keys", "unexpected_keys", "mismatched_keys"):
        assert not info.get(key), f"{folder.name}: {key} {info.get(key)}"
    return model.float().eval()


# ---- references ---------------------------------------------------------------------------------

@torch.no_grad()
def full_logits(model, ids: list) -> np.ndarray:
    x = torch.tensor([ids], dtype=torch.long)
    out = model(input_ids=x, attention_mask=torch.ones_like(x), use_cache=False)
    return out.logits[0].float().numpy()


@torch.no_grad()
def greedy(model, ids: list, pad_id: int):
    """32 new tokens from model.generate (greedy, with KV cache) for a model copy whose
    generation_config has no eos_token_id, so nothing stops early and no logits processor touches
    the scores. (transformers 5 treats None in a generation_config passed to generate() as "unset"
    and refills it from model.generation_config, so clearing it there is the only way; with an eos
    id set, min_new_tokens would mask the EOS logit and change the argmax.) Cross-checked against
    the argmax of full no-cache forwards; returns (tokens, smallest top-1 minus top-2 margin)."""
    model.generation_config.eos_token_id = None
    x = torch.tensor([ids], dtype=torch.long)
    out = model.generate(x, attention_mask=torch.ones_like(x), do_sample=False,
                         max_new_tokens=N_NEW_TOKENS, min_new_tokens=N_NEW_TOKENS,
                         pad_token_id=pad_id)
    new = out[0, len(ids):].tolist()
    assert len(new) == N_NEW_TOKENS
    seq, margins = list(ids), []
    for tok in new:
        last = full_logits(model, seq)[-1]
        top2 = np.sort(last)[-2:]
        margins.append(float(top2[1] - top2[0]))
        assert int(np.argmax(last)) == tok, (
            f"generate() picked {tok}, no-cache argmax is {int(np.argmax(last))} at {len(seq)}")
        seq.append(tok)
    return new, min(margins)


def config_summary(model) -> dict:
    c = model.config
    keys = ["model_type", "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "head_dim", "intermediate_size", "ffn_dim", "word_embed_proj_dim",
            "do_layer_norm_before", "max_position_embeddings", "rms_norm_eps", "sliding_window",
            "use_sliding_window", "tie_word_embeddings", "bos_token_id", "eos_token_id",
            "pad_token_id", "hidden_act", "activation_function", "attention_bias", "num_experts",
            "num_local_experts", "num_experts_per_tok", "moe_intermediate_size", "norm_topk_prob"]
    summary = {"architecture": type(model).__name__}
    for k in keys:
        if hasattr(c, k):
            summary[k] = getattr(c, k)
    rope = getattr(c, "rope_parameters", None)
    if rope:
        summary["rope_parameters"] = dict(rope)
    return summary


def check_sliding_window(spec, model, prompt: list) -> dict:
    """Asserts that eager attention applies the window and pins down its meaning: query i attends
    key j iff i - W < j <= i (W keys including itself)."""
    window = model.config.sliding_window
    assert len(prompt) > window + 1
    cfg = copy.deepcopy(model.config)
    cfg.sliding_window = None
    full = type(model)(cfg).eval()
    full.load_state_dict(model.state_dict())
    a, b = full_logits(model, prompt), full_logits(full, prompt)
    same = np.array([np.array_equal(a[i], b[i]) for i in range(len(prompt))])
    assert same[:window].all(), "positions inside the window must match the unwindowed model"
    assert not same[window:].any(), "sliding_window had no effect in eager attention"
    return {"sliding_window": window, "positions_identical_to_full_attention": int(same.sum()),
            "semantics": f"query i attends keys j with i-{window} < j <= i",
            "max_abs_diff_vs_no_window": float(np.abs(a - b).max())}


def check_rope_scaling(model, prompt: list) -> dict:
    cfg = copy.deepcopy(model.config)
    cfg.rope_parameters = {"rope_type": "default",
                           "rope_theta": model.config.rope_parameters["rope_theta"]}
    plain = type(model)(cfg).eval()
    plain.load_state_dict(model.state_dict())
    diff = float(np.abs(full_logits(model, prompt) - full_logits(plain, prompt)).max())
    assert diff > 1e-2, f"llama3 rope scaling changed the logits by only {diff}"
    return {"max_abs_diff_vs_unscaled_rope": diff}


def to_json(obj, indent: str = "") -> str:
    """Indented JSON with lists of numbers kept on one line (token ids stay readable)."""
    inner = indent + "  "
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        items = [f"{inner}{json.dumps(k)}: {to_json(v, inner)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    if isinstance(obj, list) and any(isinstance(v, (dict, list)) for v in obj):
        return "[\n" + ",\n".join(inner + to_json(v, inner) for v in obj) + "\n" + indent + "]"
    return json.dumps(obj)


# ---- one model ----------------------------------------------------------------------------------

def make_model(spec: ModelSpec, tokenizer, out_dir: Path) -> dict:
    torch.manual_seed(spec.seed)
    spec.config._attn_implementation = "eager"
    if spec.extra.get("moe"):
        spec.config._experts_implementation = "eager"
    model = spec.model_cls(copy.deepcopy(spec.config)).eval()
    randomize_parameters(model, spec.seed)

    tmp = out_dir / (spec.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_checkpoint(spec, model, tmp)
    tokenizer.save(str(tmp / "tokenizer.json"))

    texts = list(PROMPT_TEXTS)
    if spec.long_last_prompt:
        texts[-1] = LONG_PROMPT_TEXT
    prompts = [tokenizer.encode(t).ids for t in texts]
    lengths = [len(p) for p in prompts]
    assert len(set(lengths)) == len(lengths), lengths
    assert max(lengths[:2]) <= MAX_PROMPT_TOKENS and (spec.long_last_prompt or lengths[2] <= 12)

    # The model in memory with its parameters rounded to the checkpoint dtype: what the file must
    # reproduce. (Not model.to(dtype): that would also round the float32 RoPE inv_freq buffer,
    # which transformers keeps in float32 when loading a 16-bit checkpoint.)
    expected = copy.deepcopy(model).eval()
    with torch.no_grad():
        for p in expected.parameters():
            p.copy_(p.to(spec.dtype).float())
    loaded = load_f32(tmp, spec.dtype, bool(spec.extra.get("moe")))
    exp_sd, got_sd = expected.state_dict(), loaded.state_dict()
    assert exp_sd.keys() == got_sd.keys()
    for k in exp_sd:
        assert torch.equal(exp_sd[k], got_sd[k]), f"{spec.name}: {k} differs after reload"
    if spec.strip_model_prefix:
        with safe_open(str(tmp / "model.safetensors"), "pt") as f:
            assert not any(k.startswith("model.") for k in f.keys())

    checks = {}
    orig_logits = [full_logits(loaded, p) for p in prompts]
    for p, ref in zip(prompts, orig_logits):
        assert np.array_equal(full_logits(expected, p), ref), "reload changed the orig logits"
    if getattr(loaded.config, "sliding_window", None):
        checks["sliding_window"] = check_sliding_window(spec, loaded, prompts[2])
    rope = getattr(loaded.config, "rope_parameters", None) or {}
    if rope.get("rope_type", "default") != "default":
        checks["rope_scaling"] = check_rope_scaling(loaded, prompts[2])

    pad_id = loaded.config.pad_token_id if loaded.config.pad_token_id is not None else 0
    logit_files, greedy_by_variant, margins, diffs, pruned_stats = {}, {}, {}, {}, {}
    variant_weights = {}  # "<variant>:<tensor name>" -> float32 weight after pruning/quantization
    for variant in wv.VARIANTS:
        m = copy.deepcopy(loaded)
        stats = wv.apply_variant(m, variant)
        if stats:
            pruned_stats = stats
        files = []
        for i, p in enumerate(prompts):
            logits = orig_logits[i] if variant == "orig" else full_logits(m, p)
            name = f"logits_{variant}_p{i}.npy"
            np.save(tmp / name, logits.astype(np.float32))
            files.append(name)
            diffs.setdefault(variant, 0.0)
            diffs[variant] = max(diffs[variant], float(np.abs(logits - orig_logits[i]).max()))
        logit_files[variant] = files
        for wname in spec.extra.get("variant_weights", []) if variant.startswith("mag50") else []:
            variant_weights[f"{variant}:{wname}"] = dict(m.named_parameters())[wname].detach().clone()
        greedy_by_variant[variant], margins[variant] = greedy(m, prompts[0], pad_id)

    # A rounding variant equals orig exactly when the checkpoint already has that precision.
    ck = DTYPE_NAMES[spec.dtype]
    assert (diffs["f16"] == 0) == (ck == "float16") or ck == "bfloat16", diffs
    assert (diffs["bf16"] == 0) == (ck == "bfloat16"), diffs
    for v in ("mag50_f16", "mag50_int8", "mag50_int4"):
        assert diffs[v] > 0

    files = checkpoint_files(tmp)
    if variant_weights:
        # Bit-exact targets for the packer's pruning/quantization of single tensors.
        (tmp / VARIANT_WEIGHTS_FILE).parent.mkdir()
        save_file(variant_weights, str(tmp / VARIANT_WEIGHTS_FILE), metadata={"format": "pt"})
    tensor_names = []
    for fname in files:
        with safe_open(str(tmp / fname), "pt") as f:
            tensor_names += list(f.keys())
    lm_head_in_file = any(k.endswith("lm_head.weight") for k in tensor_names)

    reference = {
        "model": spec.name,
        "covers": spec.covers,
        "generated_by": "python3 tools/make_fixtures.py",
        "versions": versions(),
        "checkpoint": {
            "dtype": ck,
            "safetensors_files": files,
            "index_file": "model.safetensors.index.json" if (tmp / "model.safetensors.index.json").exists() else None,
            "n_tensors": len(tensor_names),
            "key_prefix": "" if spec.strip_model_prefix else "model.",
            "lm_head_in_file": lm_head_in_file,
            "config_style": "hub (rope_theta, rope_scaling, torch_dtype)" if spec.hub_style_config
                            else "transformers 5 (rope_parameters, dtype)",
        },
        "config": config_summary(loaded),
        "tokenizer": {"file": "tokenizer.json", "style": spec.tokenizer_style,
                      "vocab_size": tokenizer.get_vocab_size(),
                      "bos_prepended_by_post_processor": prompts[0][0]},
        "prompts": [{"text": t, "ids": p} for t, p in zip(texts, prompts)],
        "greedy": {
            "prompt_index": 0,
            "new_tokens": greedy_by_variant["orig"],
            "how": "model.generate(do_sample=False, max_new_tokens=32, min_new_tokens=32) with "
                   "eos_token_id cleared (no EOS stop, no score changes); equals the argmax of "
                   "full no-cache forwards",
            "by_variant": greedy_by_variant,
            "min_top2_logit_margin_by_variant": margins,
        },
        "logits": {
            "dtype": "float32", "shape": "[prompt tokens, vocab_size]",
            "how": "full-sequence forward without cache, eager attention, float32 on CPU",
            "files": logit_files,
            "max_abs_diff_vs_orig": diffs,
        },
        "variants": {v: wv.VARIANT_DOC[v] for v in wv.VARIANTS},
        "pruning": {"sparsity": wv.SPARSITY, "scope": "per output row",
                    "int4_group_size": wv.INT4_GROUP, "pruned_tensors": pruned_stats},
        "checks": checks,
    }
    if variant_weights:
        reference["variant_weights"] = {
            "file": VARIANT_WEIGHTS_FILE,
            "keys": "<variant>:<checkpoint tensor name>, float32 [out, in], the dequantized weight "
                    "the logits of that variant were computed with",
            "tensors": sorted(variant_weights)}
    (tmp / "reference.json").write_text(to_json(reference) + "\n")
    for f in tmp.rglob("*"):
        f.chmod(0o755 if f.is_dir() else 0o644)  # safetensors writes 0600

    final = out_dir / spec.name
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    return reference


def write_readme(out_dir: Path) -> None:
    v = versions()
    rows = "\n".join(f"| `{s.name}` | {s.covers} |" for s in SPECS)
    variants = "\n".join(f"- `{k}`: {d}" for k, d in wv.VARIANT_DOC.items())
    text = f"""# Tiny Hugging Face checkpoints with transformers references

Generated by `python3 tools/make_fixtures.py` (from the repository root; `--out DIR` to write
elsewhere, `--only NAME ...` for some models). Deterministic: fixed seeds, one CPU thread; the same
library versions give byte-identical files. Versions used: torch {v['torch']}, transformers
{v['transformers']}, tokenizers {v['tokenizers']}, safetensors {v['safetensors']}, numpy
{v['numpy']}, Python {v['python']} (`pip install -r tools/requirements-fixtures.txt`).

Every model has 2 layers, hidden 64, vocab 512, max_position_embeddings 128, random weights
(block matrices N(0, 0.2²), embeddings/lm_head N(0, 0.1²), norm weights 1 + 0.1·N, biases 0.05·N).

| folder | covers |
|---|---|
{rows}

Each folder: `config.json`, `generation_config.json`, safetensors (saved by `save_pretrained`),
`tokenizer.json` (byte-level BPE trained on `tools/fixtures_lib/corpus.py`; OPT style with
`</s>` = 2 prepended as BOS, or Llama-3 style with `<|begin_of_text|>` = 510 prepended and
`<|end_of_text|>` = 511), and `reference.json`: prompts (text and ids), config summary, checkpoint
facts (dtype, files, key prefix, whether `lm_head.weight` is in the file), the 32-token greedy
continuation of prompt 0 (per variant too, with the smallest top-1/top-2 logit margin along the
path), the logits file names and each variant's max |logit − orig| (a scale for tolerances).
`llama-tiny`, `qwen2-tiny` and `opt-postln-proj` also hold `variant_weights/mag50.safetensors`: a few
layer-0 weights after mag50 pruning and f16/int8/int4 rounding (float32, keys
`<variant>:<tensor name>`), bit-exact targets for the packer's quantizers.

`logits_<variant>_p<i>.npy`: float32 `[prompt tokens, 512]`, a full forward without cache, eager
attention, float32 on CPU, after rewriting the weights of a float32 copy of the loaded model:

{variants}

The exact pruning/quantization arithmetic (tie order, rounding, f16 scale/min of int4, empty
groups) is in the docstring of `tools/fixtures_lib/weight_variants.py`; the packer must match it.

Checked by the script (assert): reloading each folder reproduces the in-memory weights and `orig`
logits exactly; `opt-noprefix` loads without missing keys; f16/bf16 differ from orig unless the
checkpoint already has that precision; every pruned row has exactly int(in·0.5) zeros that stay
zero after quantization; `generate()` equals the argmax of no-cache forwards; `mistral-tiny`'s
window is applied in eager mode (query i sees keys i−3..i: positions 0..3 equal the unwindowed model,
the rest differ); `llama3-rope` differs from the same weights with default RoPE.

Config layouts: transformers 5 writes `rope_parameters` {{rope_theta, rope_type, ...}} and `dtype`;
`llama3-rope` and `qwen2-tiny` are rewritten to the hub layout of 4.x-era checkpoints (top-level
`rope_theta`, `rope_scaling`, `torch_dtype`) and transformers loads both identically.
Tied embeddings (`opt-*`, `llama-gqa-bf16`, `qwen2-tiny`): `lm_head.weight` is NOT in the file.
"""
    (out_dir / "README.md").write_text(text)


# ---- main ---------------------------------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="tests/fixtures/models")
    ap.add_argument("--only", nargs="*", help="model names to (re)generate (default: all)")
    args = ap.parse_args()

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    vocab = SPECS[0].config.vocab_size
    toks = {"opt": build_opt_tokenizer(vocab), "llama3": build_llama3_tokenizer(vocab)}
    names = [s.name for s in SPECS]
    for n in args.only or []:
        if n not in names:
            print(f"error: unknown model '{n}' (known: {', '.join(names)})", file=sys.stderr)
            return 2
    for spec in SPECS:
        if args.only and spec.name not in args.only:
            continue
        ref = make_model(spec, toks[spec.tokenizer_style], out_dir)
        size = sum(p.stat().st_size for p in (out_dir / spec.name).rglob("*") if p.is_file())
        print(f"{spec.name:16s} {size / 1024:7.1f} KiB  greedy {ref['greedy']['new_tokens'][:6]}...")
    write_readme(out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
