#!/usr/bin/env python3
"""Markdown table of bench/serve/run.sh's results.jsonl: per server and concurrency, the median over
rounds of aggregate generated tokens/s, TTFT and inter-token latency p50/p99; the speed-up over
concurrency 1 (per round, then the median); and endor-serve's tokens/s over llama-server's at the same
concurrency, per round (the two ran back to back), then the median.

Usage: table.py results.jsonl
"""
import collections
import json
import statistics
import sys


def main():
    rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    by = collections.defaultdict(dict)  # (label, c) -> round -> row
    for r in rows:
        by[(r["label"], r["concurrency"])][r["round"]] = r
    labels = list(dict.fromkeys(r["label"] for r in rows))
    levels = sorted({r["concurrency"] for r in rows})
    med = lambda xs: statistics.median(xs) if xs else None
    fmt = lambda x, d=1: "—" if x is None else f"{x:.{d}f}"
    print("| server | concurrency | generated tok/s | × concurrency 1 | TTFT p50 / p99 ms | inter-token p50 / p99 ms "
          "| endor / llama tok/s | requests (failed) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for label in labels:
        for c in levels:
            rs = by.get((label, c), {})
            if not rs:
                continue
            tps = med([r["tokens_per_s"] for r in rs.values()])
            base = by.get((label, 1), {})
            speedup = med([rs[k]["tokens_per_s"] / base[k]["tokens_per_s"] for k in rs if k in base and base[k]["tokens_per_s"]])
            vs = None
            if label.startswith("endor-smollm2"):
                peer = {k: v for (l, cc), d in by.items() if l.startswith("llama-smollm2") and cc == c for k, v in d.items()}
                vs = med([rs[k]["tokens_per_s"] / peer[k]["tokens_per_s"] for k in rs if k in peer and peer[k]["tokens_per_s"]])
            ttft = f"{fmt(med([r['ttft_p50_ms'] for r in rs.values() if r['ttft_p50_ms'] is not None]), 0)} / " \
                   f"{fmt(med([r['ttft_p99_ms'] for r in rs.values() if r['ttft_p99_ms'] is not None]), 0)}"
            itl = f"{fmt(med([r['itl_p50_ms'] for r in rs.values() if r['itl_p50_ms'] is not None]), 1)} / " \
                  f"{fmt(med([r['itl_p99_ms'] for r in rs.values() if r['itl_p99_ms'] is not None]), 1)}"
            n = sum(r["requests"] for r in rs.values())
            f = sum(r["failed"] for r in rs.values())
            print(f"| {label} | {c} | {fmt(tps)} | {fmt(speedup, 2)}× | {ttft} | {itl} | "
                  f"{'—' if vs is None else fmt(vs, 2) + '×'} | {n} ({f}) |")
    print(f"\nMedians over {len({r['round'] for r in rows})} rounds; ratios taken per round (same round, back to back), "
          "then the median.")


if __name__ == "__main__":
    main()
