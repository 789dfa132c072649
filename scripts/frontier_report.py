#!/usr/bin/env python3
"""The size-perplexity frontier as Markdown and SVG, from scripts/frontier.sh's TSV (Endor) and
scripts/llama_quants.sh's TSV (llama.cpp). Python standard library only.

Usage: scripts/frontier_report.py ENDOR.tsv LLAMA.tsv OUT_DIR [EXACT.tsv]
Writes OUT_DIR/<model>.svg and prints the Markdown: per model, every file by size with its
perplexity (Endor's evaluator) and ratio to the dense model, then for each llama.cpp file the best
Endor file no larger than it, and whether its perplexity is no higher. With EXACT.tsv
(scripts/frontier_exact.sh: the same files with f32 activations), an "exact" column and the same
comparison in that arithmetic.
"""
import csv
import os
import sys


def read_tsv(path):
    rows = []
    with open(path, encoding="utf-8") as f:
        lines = [l for l in f if not l.startswith("#")]
    for r in csv.DictReader(lines, delimiter="\t"):
        rows.append(r)
    return rows


def num(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def svg(model, points, dense_ppl, path):
    """points: (label, engine, bytes, ppl). x: file MB, y: perplexity / dense."""
    W, H, L, R, T, B = 760, 440, 70, 20, 30, 50
    pts = [(l, e, b / 1e6, p / dense_ppl) for l, e, b, p in points if p is not None]
    if not pts:
        return
    xs = [p[2] for p in pts]
    ys = [p[3] for p in pts]
    x0, x1 = 0.0, max(xs) * 1.05
    y0, y1 = min(1.0, min(ys)) - 0.01, max(ys) + 0.02
    sx = lambda x: L + (x - x0) / (x1 - x0) * (W - L - R)
    sy = lambda y: H - B - (y - y0) / (y1 - y0) * (H - T - B)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W/2}" y="18" text-anchor="middle" font-size="13">{model}: perplexity / dense against file size</text>',
           f'<line x1="{L}" y1="{H-B}" x2="{W-R}" y2="{H-B}" stroke="black"/>',
           f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H-B}" stroke="black"/>',
           f'<text x="{(L+W-R)/2}" y="{H-12}" text-anchor="middle">file MB</text>',
           f'<text x="16" y="{(T+H-B)/2}" text-anchor="middle" transform="rotate(-90 16 {(T+H-B)/2})">perplexity / dense</text>']
    for i in range(6):
        xv = x0 + (x1 - x0) * i / 5
        yv = y0 + (y1 - y0) * i / 5
        out.append(f'<text x="{sx(xv):.1f}" y="{H-B+16}" text-anchor="middle">{xv:.1f}</text>')
        out.append(f'<text x="{L-6}" y="{sy(yv)+4:.1f}" text-anchor="end">{yv:.3f}</text>')
        out.append(f'<line x1="{L}" y1="{sy(yv):.1f}" x2="{W-R}" y2="{sy(yv):.1f}" stroke="#eee"/>')
    for label, engine, x, y in pts:
        color = "#c0392b" if engine == "endor" else "#2c3e50"
        if engine == "endor":
            out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="4" fill="{color}"/>')
        else:
            out.append(f'<rect x="{sx(x)-4:.1f}" y="{sy(y)-4:.1f}" width="8" height="8" fill="{color}"/>')
        out.append(f'<text x="{sx(x)+6:.1f}" y="{sy(y)-5:.1f}" fill="{color}" font-size="9">{label}</text>')
    out.append(f'<circle cx="{W-170}" cy="{T+8}" r="4" fill="#c0392b"/><text x="{W-160}" y="{T+12}">Endor</text>')
    out.append(f'<rect x="{W-104}" y="{T+4}" width="8" height="8" fill="#2c3e50"/><text x="{W-90}" y="{T+12}">llama.cpp</text>')
    out.append("</svg>")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")


def best_no_larger(e, l, key, caption):
    """For each llama.cpp file, the Endor file of lowest perplexity (key) no larger than it."""
    print(f"\n{caption}\n")
    print("| llama.cpp | bytes | perplexity | best Endor file no larger | bytes | perplexity | no higher? |")
    print("|---|---:|---:|---|---:|---:|---|")
    for t in sorted(l, key=lambda t: t[2]):
        label, b, p = t[0], t[2], key(t)
        if label == "F16" or p is None:
            continue
        cands = [c for c in e if c[2] <= b and key(c) is not None]
        if not cands:
            print(f"| {label} | {b:,} | {p:.3f} | none measured | | | |")
            continue
        best = min(cands, key=key)
        ok = "yes" if key(best) <= p else f"no (+{100 * (key(best) / p - 1):.2f} %)"
        print(f"| {label} | {b:,} | {p:.3f} | {best[0]} | {best[2]:,} | {key(best):.3f} | {ok} |")


def main():
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    endor = read_tsv(sys.argv[1])
    llama = read_tsv(sys.argv[2])
    out_dir = sys.argv[3]
    exact = {}
    if len(sys.argv) == 5:
        for r in read_tsv(sys.argv[4]):
            exact[(r["model"], r["engine"], r["config"])] = num(r["ppl_exact"])
    os.makedirs(out_dir, exist_ok=True)
    for model in sorted({r["model"] for r in endor} | {r["model"] for r in llama}):
        e = [(r["config"], "endor", int(r["file_bytes"]), num(r["ppl"]), r["decoder_bpw"]) for r in endor
             if r["model"] == model]
        l = [(r["type"], "llama.cpp", int(r["file_bytes"]), num(r["endor_ppl"]), r.get("llama_ppl", "")) for r in llama
             if r["model"] == model]
        dense = next((p for c, _, _, p, _ in e if c == "dense"), None) or next((p for c, _, _, p, _ in l if c == "F16"), None)
        if not dense:
            continue
        ex = lambda t: exact.get((model, t[1], t[0]))
        dense_ex = next((ex(t) for t in e if t[0] == "dense"), None) or next((ex(t) for t in l if t[0] == "F16"), None)
        print(f"\n### {model}\n")
        head = "| engine | file | bytes | decoder bits/weight | perplexity | vs dense |"
        rule = "|---|---|---:|---:|---:|---:|"
        if exact:
            head += " exact | vs dense |"
            rule += "---:|---:|"
        print(head + " llama-perplexity |")
        print(rule + "---:|")
        for t in sorted(e + l, key=lambda t: t[2]):
            label, engine, b, p, extra = t
            ppl = f"{p:.3f}" if p is not None else "not measured"
            ratio = f"{p / dense:.3f}x" if p is not None else ""
            bpw = extra if engine == "endor" else ""
            lp = extra if engine == "llama.cpp" else ""
            cols = f"| {engine} | {label} | {b:,} | {bpw} | {ppl} | {ratio} |"
            if exact:
                x = ex(t)
                cols += f" {x:.3f} | {x / dense_ex:.3f}x |" if x is not None and dense_ex else " | |"
            print(f"{cols} {lp} |")
        best_no_larger(e, l, lambda t: t[3],
                       "For each llama.cpp file, the Endor file of lowest perplexity that is no larger (default path):")
        if exact:
            best_no_larger(e, l, ex, "The same in one arithmetic (`--exact`: f32 activations for every file):")
        svg(model, [(c, en, b, p) for c, en, b, p, _ in e + l], dense, os.path.join(out_dir, f"{model}.svg"))


if __name__ == "__main__":
    main()
