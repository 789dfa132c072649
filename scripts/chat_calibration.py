#!/usr/bin/env python3
"""Calibration data in the form a chat model is used: its own answers to a set of prompts, rendered
by its chat template, as token ids for `endor-pack prune --calib-ids`.

Usage: scripts/chat_calibration.py [--infer BUILD/runtime/endor-infer] [--prompts FILE] [-n 320]
                                   [--temperature 0.7] [--top-p 0.9] [--seed 0] DENSE.endor OUT.ids
Each line of the prompts file (default bench/questions/calib-prompts.txt: 64 requests for stories,
explanations, advice and code, none of them a question of bench/questions/questions.tsv) is asked as a
one-turn chat of the dense model (endor-infer --chat --prompts --jsonl, sampled, in throughput mode);
OUT gets one line per conversation: the rendered prompt's ids then the answer's (with its
end-of-turn token when the answer ended). Python standard library only.

Why: pruning keeps what the calibration exercises. SmolLM2-135M pruned by SparseGPT at 40 % with int4k
keeps 12 of the dense model's 20 right answers calibrated on these conversations, 9 calibrated on
license text (bench/ACCURACY.md, "Questions the model answers").
"""
import argparse
import json
import os
import subprocess
import sys


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--infer", default=os.path.join(root, "build", "runtime", "endor-infer"))
    ap.add_argument("--prompts", default=os.path.join(root, "bench", "questions", "calib-prompts.txt"))
    ap.add_argument("-n", type=int, default=320, help="tokens per answer at most")
    ap.add_argument("--temperature", default="0.7")
    ap.add_argument("--top-p", default="0.9")
    ap.add_argument("--seed", default="0")
    ap.add_argument("model")
    ap.add_argument("out")
    a = ap.parse_args()
    if os.path.exists(a.out):
        sys.exit(f"{a.out}: already exists")
    with open(a.prompts, encoding="utf-8") as f:
        n_prompts = sum(1 for line in f if line.strip())
    p = subprocess.run([a.infer, a.model, "--chat", "--prompts", a.prompts, "--jsonl", "-n", str(a.n),
                        "--temperature", a.temperature, "--top-p", a.top_p, "--seed", a.seed, "--batch", "16"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        err = p.stderr.strip().splitlines()
        sys.exit(f"{a.model}: endor-infer failed: {err[-1] if err else p.returncode}")
    rows = [json.loads(line) for line in p.stdout.splitlines() if line.strip()]
    if len(rows) != n_prompts or any("prompt_ids" not in r for r in rows):
        sys.exit(f"{a.model}: expected {n_prompts} answers with prompt_ids from {a.infer}, got {len(rows)}")
    tmp = a.out + ".part"
    with open(tmp, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(" ".join(str(i) for i in r["prompt_ids"] + r["ids"]) + "\n")
    os.rename(tmp, a.out)
    tokens = sum(len(r["prompt_ids"]) + len(r["ids"]) for r in rows)
    print(f"wrote {a.out}: {len(rows)} conversations, {tokens} tokens")


if __name__ == "__main__":
    main()
