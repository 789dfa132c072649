#!/usr/bin/env python3
"""Train Endor's sample model: a small Llama (LlamaForCausalLM) on the King James Bible.

One script, four stages, each reproducible from the same seed:

  1. corpus     dump the KJV text from Debian's `bible-kjv-text` (read with the `bible`
                program of `bible-kjv`), clean it into plain prose (one verse per line, verse
                references stripped, a blank line between chapters) and split it by book into
                train / held-out text; calib.txt is every 13th training chapter (~300 KB).
  2. tokenizer  byte-level BPE (ByteLevel pre-tokenizer + decoder, as GPT-2/Llama-3) trained
                with `tokenizers` on the training text only; `<s>`=0 added by a
                TemplateProcessing post-processor, `</s>`=1.
  3. train      LlamaForCausalLM in float32 on random 256-token windows of the training token
                stream (each book is `<s> book </s>`), AdamW + warmup + cosine LR. A Hugging Face
                folder (f16 weights) is exported at every checkpoint, so a partial run is usable.
  4. evaluate   held-out perplexity with the Wanda/SparseGPT convention (one BOS, non-overlapping
                windows of L tokens, tail dropped, ppl = exp(mean of per-window mean NLL)) in
                float32 from the saved f16 weights; greedy and sampled text.

Usage (the command that produced samples/kjv-llama; see its README.md):
  nice -n 19 python3 tools/train_sample.py --out samples/kjv-llama --work /tmp/kjv-work \
      --batch 8 --steps 650 --lr 4e-3 --warmup 30 --ckpt-every 130 --threads 1 --seed 1611
  python3 tools/train_sample.py --out samples/kjv-llama --work /tmp/kjv-work --trial 8   # tokens/s
  python3 tools/train_sample.py --out samples/kjv-llama --work /tmp/kjv-work --eval-only

The machine this was made on has 2 cores shared with compile jobs: --threads defaults to 1.
"""
import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import torch

# Held-out books (whole books, never seen by the tokenizer or the model): narrative, wisdom,
# prophecy, gospel and epistles, ~185 KB. Names are the `bible` program's abbreviations.
HELDOUT_BOOKS = ["Ruth", "Eccl", "Joel", "Mark", "Gal", "Heb"]
CALIB_CHAPTER_STRIDE = 13  # every 13th training chapter -> ~300 KB of calibration text
VERSE_RE = re.compile(r"^(\d?[A-Za-z]+)(\d+):(\d+) (.*)$")


def log(msg):
    print(msg, flush=True)


# ----------------------------------------------------------------------------- 1. corpus
def dump_kjv(raw_path):
    """Returns the `bible` program's one-verse-per-line dump ("Ge1:1 In the beginning ...")."""
    if raw_path:
        with open(raw_path, encoding="utf-8") as f:
            return f.read()
    if shutil.which("bible") is None:
        raise SystemExit("error: `bible` not found: apt-get install -y bible-kjv bible-kjv-text")
    # -f toggles pretty-printing OFF: one verse per line, preceded by its reference.
    out = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], check=True, capture_output=True,
                         text=True, env=dict(os.environ, COLUMNS="100000"))
    return out.stdout


def parse_books(raw):
    """raw dump -> list of (book, [chapter text]) in canonical order; chapter text = verses,
    one per line, whitespace runs collapsed, references stripped."""
    books = []  # [(name, {chapter: [verses]})]
    for n, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        m = VERSE_RE.match(line)
        if not m:
            raise SystemExit(f"error: kjv dump line {n}: not 'BookC:V text': {line[:60]!r}")
        book, chap, verse = m.group(1), int(m.group(2)), " ".join(m.group(4).split())
        if not books or books[-1][0] != book:
            books.append((book, {}))
        books[-1][1].setdefault(chap, []).append(verse)
    if len(books) != 66:
        raise SystemExit(f"error: kjv dump has {len(books)} books, expected 66")
    return [(b, ["\n".join(v) + "\n" for _, v in sorted(ch.items())]) for b, ch in books]


def build_corpus(args):
    books = parse_books(dump_kjv(args.raw))
    train_books = [(b, ch) for b, ch in books if b not in HELDOUT_BOOKS]
    held_books = [(b, ch) for b, ch in books if b in HELDOUT_BOOKS]
    assert len(held_books) == len(HELDOUT_BOOKS)
    join = lambda chapters: "\n".join(chapters)  # blank line between chapters
    heldout = join([c for _, ch in held_books for c in ch])
    train_chapters = [c for _, ch in train_books for c in ch]
    calib = join(train_chapters[::CALIB_CHAPTER_STRIDE])
    os.makedirs(args.out, exist_ok=True)
    os.makedirs(args.work, exist_ok=True)
    for path, text in [(os.path.join(args.out, "heldout.txt"), heldout),
                       (os.path.join(args.out, "calib.txt"), calib)]:
        with open(path, "w", encoding="utf-8", newline="") as f:
            f.write(text)
    train_docs = [join(ch) for _, ch in train_books]  # one document per book
    with open(os.path.join(args.work, "train_books.json"), "w") as f:
        json.dump(train_docs, f)
    log(f"corpus: {len(train_books)} training books ({sum(map(len, train_docs))} chars), "
        f"held-out {HELDOUT_BOOKS} ({len(heldout)} chars), calib {len(calib)} chars")
    return train_docs


# ----------------------------------------------------------------------------- 2. tokenizer
def train_tokenizer(args, train_docs):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=args.vocab, min_frequency=2, show_progress=False,
                                  special_tokens=["<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(train_docs, trainer=trainer)
    bos, eos = tok.token_to_id("<s>"), tok.token_to_id("</s>")
    assert (bos, eos) == (0, 1), (bos, eos)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B:1", special_tokens=[("<s>", bos)])
    tok.save(os.path.join(args.out, "tokenizer.json"))
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
           "pad_token": None, "unk_token": None, "add_bos_token": True, "add_eos_token": False,
           "clean_up_tokenization_spaces": False, "model_max_length": args.ctx}
    with open(os.path.join(args.out, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    log(f"tokenizer: vocab {tok.get_vocab_size()}")
    return tok


def load_tokenizer(args):
    from tokenizers import Tokenizer
    return Tokenizer.from_file(os.path.join(args.out, "tokenizer.json"))


def training_stream(tok, train_docs):
    """All training books as one int32 stream: <s> book </s> <s> book </s> ..."""
    eos = tok.token_to_id("</s>")
    ids = []
    for enc in tok.encode_batch(train_docs):  # post-processor adds <s>
        ids.extend(enc.ids)
        ids.append(eos)
    return np.asarray(ids, dtype=np.int64)


# ----------------------------------------------------------------------------- 3. train
def make_config(args, vocab):
    from transformers import LlamaConfig
    return LlamaConfig(
        vocab_size=vocab, hidden_size=args.hidden, intermediate_size=args.inter,
        num_hidden_layers=args.layers, num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads, head_dim=args.hidden // args.heads,
        max_position_embeddings=args.ctx, rms_norm_eps=1e-5, rope_theta=10000.0,
        tie_word_embeddings=True, bos_token_id=0, eos_token_id=1, attention_bias=False,
        mlp_bias=False, hidden_act="silu", initializer_range=0.02)


def lr_at(step, args):
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    p = (step - args.warmup) / max(1, args.steps - args.warmup)
    return args.lr * (args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * p)))


def add_legacy_config_keys(path):
    """transformers 5 writes RoPE settings only as `rope_parameters`; add the flat `rope_theta`
    that transformers 4.x and most other readers (Endor's runtime included) look for."""
    with open(path) as f:
        cfg = json.load(f)
    cfg["rope_theta"] = cfg["rope_parameters"]["rope_theta"]
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


def export(model, args, step, tokens_seen, elapsed):
    """Writes the Hugging Face folder: config.json, generation_config.json, model.safetensors
    (weights rounded to f16). Training stays in f32 on a copy."""
    import copy
    from transformers import GenerationConfig
    half = copy.deepcopy(model).to(torch.float16)
    half.generation_config = GenerationConfig(bos_token_id=0, eos_token_id=1, pad_token_id=1)
    half.save_pretrained(args.out, safe_serialization=True)
    add_legacy_config_keys(os.path.join(args.out, "config.json"))
    with open(os.path.join(args.work, "export.json"), "w") as f:
        json.dump({"step": step, "tokens": tokens_seen, "train_seconds": elapsed}, f)


def train(args, tok, train_docs):
    from transformers import LlamaForCausalLM
    stream = torch.from_numpy(training_stream(tok, train_docs))
    log(f"train stream: {len(stream)} tokens ({sum(map(len, train_docs)) / len(stream):.2f} chars/token)")
    torch.manual_seed(args.seed)
    config = make_config(args, tok.get_vocab_size())
    model = LlamaForCausalLM(config)
    model.train()
    nparams = sum(p.numel() for p in model.parameters())
    log(f"model: {nparams} parameters; config {config.to_json_string(use_diff=True)}")
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "embed" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "embed" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.wd},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    gen = torch.Generator().manual_seed(args.seed)
    state_path = os.path.join(args.work, "state.pt")
    step, elapsed = 0, 0.0
    if args.resume and os.path.exists(state_path):
        st = torch.load(state_path, weights_only=False)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        gen.set_state(st["gen"])
        step, elapsed = st["step"], st["elapsed"]
        log(f"resumed at step {step}")
    steps = args.trial if args.trial else args.steps
    win = args.ctx + 1
    heldout_ids = eval_ids(args, tok)
    t0 = time.time() - elapsed
    tstep = time.time()
    while step < steps:
        starts = torch.randint(0, len(stream) - win, (args.batch,), generator=gen)
        x = torch.stack([stream[s:s + win] for s in starts.tolist()])
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args)
        logits = model(input_ids=x[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % args.log_every == 0 or step == steps or args.trial:
            now = time.time()
            n = args.log_every if not args.trial else 1
            tps = n * args.batch * args.ctx / (now - tstep)
            tstep = now
            log(f"step {step}/{steps} loss {loss.item():.4f} lr {lr_at(step - 1, args):.2e} "
                f"{tps:.0f} tok/s elapsed {now - t0:.0f}s")
        if not args.trial and (step % args.ckpt_every == 0 or step == steps):
            elapsed = time.time() - t0
            model.eval()
            ppl = perplexity(model, heldout_ids[: 40 * args.ctx + 1], args.ctx)
            sample_text(model, tok, args, greedy_only=True)
            model.train()
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "gen": gen.get_state(),
                        "step": step, "elapsed": elapsed}, state_path + ".tmp")
            os.replace(state_path + ".tmp", state_path)
            export(model, args, step, step * args.batch * args.ctx, elapsed)
            log(f"checkpoint step {step}: held-out ppl (first 40 windows, f32 weights) {ppl:.3f}; "
                f"exported to {args.out} after {elapsed:.0f}s")
    return nparams


# ----------------------------------------------------------------------------- 4. evaluate
def eval_ids(args, tok):
    with open(os.path.join(args.out, "heldout.txt"), encoding="utf-8", newline="") as f:
        return tok.encode(f.read()).ids  # one <s> at the start (post-processor)


@torch.no_grad()
def window_nlls(model, ids, L):
    """Per-window mean NLL: ids cut into non-overlapping windows of L tokens (tail dropped),
    no cache across windows, mean cross-entropy of logits[:-1] vs ids[1:] in each window."""
    n = len(ids) // L
    t = torch.tensor(ids[: n * L], dtype=torch.long).view(n, L)
    out = []
    for i in range(0, n, 8):
        x = t[i:i + 8]
        logits = model(input_ids=x).logits.float()
        ce = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)),
                                               x[:, 1:].reshape(-1), reduction="none")
        out.extend(ce.view(x.size(0), L - 1).double().mean(dim=1).tolist())
    return out


def perplexity(model, ids, L):
    nll = window_nlls(model, ids, L)
    return math.exp(sum(nll) / len(nll))


PROMPTS = ["In the beginning", "And the LORD said unto Moses,", "Blessed are",
           "And it came to pass, when the king"]


@torch.no_grad()
def sample_text(model, tok, args, greedy_only=False, n_new=60):
    torch.manual_seed(args.seed)
    out = []
    for p in PROMPTS if not greedy_only else PROMPTS[:2]:
        x = torch.tensor([tok.encode(p).ids])
        modes = [("greedy", dict(do_sample=False))]
        if not greedy_only:
            modes.append(("sampled T=0.8 top-k 40", dict(do_sample=True, temperature=0.8, top_k=40)))
        for name, kw in modes:
            y = model.generate(x, max_new_tokens=n_new, pad_token_id=1, eos_token_id=1, **kw)
            text = tok.decode(y[0].tolist(), skip_special_tokens=True)
            out.append((p, name, text))
            log(f"[{name}] {text!r}")
    return out


def evaluate(args, tok):
    from transformers import LlamaForCausalLM
    model = LlamaForCausalLM.from_pretrained(args.out, dtype=torch.float32)
    model.eval()
    ids = eval_ids(args, tok)
    L = model.config.max_position_embeddings
    nll = window_nlls(model, ids, L)
    ppl = math.exp(sum(nll) / len(nll))
    report = {"heldout_file": "heldout.txt", "heldout_bytes": os.path.getsize(os.path.join(args.out, "heldout.txt")),
              "tokens": len(ids), "window": L, "windows": len(nll), "mean_nll": sum(nll) / len(nll),
              "perplexity": ppl, "dtype": "float32 (from the saved f16 weights)",
              "parameters": sum(p.numel() for p in model.parameters())}
    log(f"eval: {json.dumps(report)}")
    samples = sample_text(model, tok, args)
    with open(os.path.join(args.work, "eval.json"), "w") as f:
        json.dump({"report": report, "samples": samples}, f, indent=1)
    return report


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="samples/kjv-llama", help="Hugging Face folder + texts")
    ap.add_argument("--work", default="/tmp/kjv-work", help="scratch: train stream, resumable state")
    ap.add_argument("--raw", help="a saved `bible -f Gen1:1-Rev22:21` dump instead of running bible")
    ap.add_argument("--seed", type=int, default=1611)
    ap.add_argument("--threads", type=int, default=1,
                    help="1: on a contended machine 2 OpenMP threads ran 3-4x slower per CPU-second")
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--inter", type=int, default=688)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8, help="windows of --ctx tokens per step")
    ap.add_argument("--steps", type=int, default=650)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--lr", type=float, default=4e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--ckpt-every", type=int, default=130)
    ap.add_argument("--trial", type=int, default=0, help="run N steps, print tok/s, save nothing")
    ap.add_argument("--resume", action="store_true", help="continue from --work/state.pt")
    ap.add_argument("--eval-only", action="store_true", help="evaluate the saved --out folder")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    log(f"args: {vars(args)}")
    log(f"versions: torch {torch.__version__}, python {sys.version.split()[0]}")
    if args.eval_only:
        evaluate(args, load_tokenizer(args))
        return
    train_docs = build_corpus(args)
    tok = train_tokenizer(args, train_docs)
    t0 = time.time()
    train(args, tok, train_docs)
    if not args.trial:
        log(f"training done in {time.time() - t0:.0f}s (this invocation)")
        evaluate(args, tok)


if __name__ == "__main__":
    main()
