#!/usr/bin/env python3
"""Short factual questions through a model's chat template: which ones each .endor file answers right.

Usage: scripts/questions.py [--infer BUILD/runtime/endor-infer] [--questions bench/questions/questions.tsv]
                            [--out DIR] DENSE.endor [OTHER.endor ...]
Each file answers every question of the set as its own one-turn chat, greedily (endor-infer --chat
--prompts --jsonl -n 48 --temperature 0, in throughput mode); an answer is right when the question's
regex (case-insensitive) matches its first 200 characters. The first file is the reference: the
report counts, for every file, the questions it answers right and how many of the reference's right
answers it keeps. Answers go to DIR/<file name>.jsonl (default: no copies). Python standard library only.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile


def load_questions(path):
    qs = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            if "\t" not in line:
                sys.exit(f"{path}:{n}: expected QUESTION<TAB>REGEX")
            q, r = line.split("\t", 1)
            qs.append((q, re.compile(r, re.IGNORECASE)))
    return qs


def answers(infer, model, questions):
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as f:
        f.write("\n".join(q for q, _ in questions) + "\n")
        prompts = f.name
    try:
        p = subprocess.run([infer, model, "--chat", "--prompts", prompts, "--jsonl", "-n", "48", "--temperature", "0",
                            "--batch", "8"], capture_output=True, text=True)
    finally:
        os.unlink(prompts)
    if p.returncode != 0:
        sys.exit(f"{model}: endor-infer failed: {p.stderr.strip().splitlines()[-1] if p.stderr.strip() else p.returncode}")
    out = [json.loads(l) for l in p.stdout.splitlines() if l.strip()]
    if len(out) != len(questions):
        sys.exit(f"{model}: {len(out)} answers for {len(questions)} questions")
    return [o["text"] for o in out]


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--infer", default=os.path.join(root, "build", "runtime", "endor-infer"))
    ap.add_argument("--questions", default=os.path.join(root, "bench", "questions", "questions.tsv"))
    ap.add_argument("--out")
    ap.add_argument("models", nargs="+")
    a = ap.parse_args()
    questions = load_questions(a.questions)
    ref_right = None
    print("| file | right | of the reference's right answers, kept |")
    print("|---|---:|---:|")
    for model in a.models:
        texts = answers(a.infer, model, questions)
        right = [bool(rx.search(t[:200])) for (_, rx), t in zip(questions, texts)]
        if a.out:
            os.makedirs(a.out, exist_ok=True)
            with open(os.path.join(a.out, os.path.basename(model) + ".jsonl"), "w", encoding="utf-8") as f:
                for (q, _), t, ok in zip(questions, texts, right):
                    f.write(json.dumps({"question": q, "answer": t, "right": ok}, ensure_ascii=False) + "\n")
        if ref_right is None:
            ref_right = right
        kept = sum(1 for r, o in zip(ref_right, right) if r and o)
        n_ref = sum(ref_right)
        pct = 100.0 * kept / n_ref if n_ref else 0.0
        print(f"| {os.path.basename(model)} | {sum(right)}/{len(questions)} | {kept}/{n_ref} ({pct:.0f} %) |", flush=True)


if __name__ == "__main__":
    main()
