#!/usr/bin/env python3
"""The "Against llama.cpp" table from bench/peers/run.sh's results.jsonl.

Per (model, runtime, config): median tok/s over the rounds and its range. Ratios pair each Endor
format with a llama.cpp format and are the median of the per-round ratios (both measured in the
same round). "of floor" = tok/s / (median read probe of the run / bytes read per token); llama.cpp's
bytes per token are taken as its file size (the tied SmolLM2 embedding is read whole as the head;
for an untied model this overstates its bytes by the embedding table, ~6 % on the 1 B shape).
A last line checks issue 15's targets (TARGETS) on the run's median ratios.
Usage: table.py RESULTS.jsonl N THREADS BUSY LLAMA_COMMIT
"""
import json
import statistics
import sys

PAIRS = [("F16", "dense"), ("F16", "f16_50"), ("Q8_0", "int8_50"), ("Q4_0", "int4_50"), ("Q4_0", "int4_50_qhead"),
         ("Q4_0", "int4_50_qhead_bitmap"), ("Q4_0", "int4_qhead"), ("Q4_0", "int4_24_qhead")]
ENDOR_NAME = {"dense": "dense f16", "f16_50": "f16 @ 50 %", "int8_50": "int8 @ 50 %, f16 head",
              "int4_50": "int4 @ 50 %, f16 head (--quant-head none)",
              "int4_50_qhead": "int4 @ 50 % + int8 head (endor-pack's default since 2026-11-29)",
              "int4_50_qhead_bitmap": "int4 @ 50 % + int8 head, bitmap kernel (ENDOR_INT4_DENSE=off)",
              "dense_disk": "dense f16, every block from disk", "int4_50_disk": "int4 @ 50 %, f16 head, every block from disk",
              "int4_50_qhead_disk": "int4 @ 50 % + int8 head, every block from disk",
              "int4_qhead": "int4 dense + int8 head", "int4_24_qhead": "int4 2:4 + int8 head"}
# Issue 15's "done when": (Endor config, ratio to reach, the one model it applies to or None for all).
TARGETS = [("int4_50", 1.2, None), ("f16_50", 1.4, "1b"), ("dense", 1.0, None)]
# Issue 40's: int4 @ 50 % + int8 head >= 1.2x Q4_0 (above) and >= 1.0x Endor's own dense int4 (ENDOR_PAIRS).
TARGETS_40 = [("int4_50_qhead", 1.2, "smollm2")]
# Endor against Endor, per-round ratios: (numerator config, denominator config, target or None).
ENDOR_PAIRS = [("int4_50_qhead", "int4_qhead", 1.0), ("int4_50_qhead", "int4_50_qhead_bitmap", None),
               ("int4_50_qhead_disk", "dense_disk", 4.0), ("int4_50_disk", "dense_disk", None)]


def main():
    path, n, threads, busy, commit = sys.argv[1:6]
    rows = [json.loads(line) for line in open(path) if line.strip()]
    probes = [float(r["gbps"]) for r in rows if r["kind"] == "probe" and float(r["gbps"]) > 0]
    loads = [float(r["load"]) for r in rows if r["kind"] == "probe"]
    runs = [r for r in rows if r["kind"] == "run"]
    probe = statistics.median(probes) if probes else 0.0
    by = {}
    for r in runs:
        by.setdefault((r["model"], r["runtime"], r["config"]), {})[int(r["round"])] = r
    print(f"decode of {n} tokens, {threads} threads, {'one core busy' if busy == '1' else 'no other load started'}; "
          f"llama.cpp {commit}; read probe median {probe:.2f} GB/s (range {min(probes, default=0):.2f}-"
          f"{max(probes, default=0):.2f}); load average at round starts {min(loads, default=0):.2f}-{max(loads, default=0):.2f}")
    print()
    print("| model | llama.cpp | tok/s (range) | of floor | Endor | tok/s (range) | of floor | Endor / llama.cpp (per-round median, range) |")
    print("|---|---|---:|---:|---|---:|---:|---:|")
    models = sorted({k[0] for k in by}, key=lambda m: (m != "smollm2", m))
    ratio_of = {}  # (model, Endor config) -> median per-round ratio
    for m in models:
        for lq, ec in PAIRS:
            L, E = by.get((m, "llama", lq)), by.get((m, "endor", ec))
            if not L or not E:
                continue
            def stats(d):
                v = [float(x["tps"]) for x in d.values() if float(x["tps"]) > 0] or [0.0]  # 0: no figure
                med = statistics.median(v)
                floor = probe * 1e9 / float(next(iter(d.values()))["read_bytes"]) if probe else 0
                return med, min(v), max(v), (med / floor if floor else 0)
            lm, llo, lhi, lf = stats(L)
            em, elo, ehi, ef = stats(E)
            ratios = [float(E[r]["tps"]) / float(L[r]["tps"]) for r in E
                      if r in L and float(L[r]["tps"]) > 0 and float(E[r]["tps"]) > 0]
            rm = statistics.median(ratios) if ratios else 0
            ratio_of[(m, ec)] = rm
            print(f"| {m} | {lq} | {lm:.1f} ({llo:.1f}-{lhi:.1f}) | {lf:.2f} | {ENDOR_NAME.get(ec, ec)} | "
                  f"{em:.1f} ({elo:.1f}-{ehi:.1f}) | {ef:.2f} | **{rm:.2f}x** ({min(ratios, default=0):.2f}-{max(ratios, default=0):.2f}) |")
    # Issue 15's targets, checked on this run's medians (the same thresholds apply with one core busy).
    checks = []
    for ec, target, only in TARGETS:
        for m in models:
            if (only is None or m == only) and (m, ec) in ratio_of:
                r = ratio_of[(m, ec)]
                checks.append(f"{m} {ENDOR_NAME[ec]} {r:.2f}x (>= {target:.1f}x: {'met' if r >= target else 'not met'})")
    if checks:
        print()
        print("Targets (issue 15): " + "; ".join(checks))
    lines, checks = [], []
    for m in models:
        for ec, target, only in TARGETS_40:
            if (only is None or m == only) and (m, ec) in ratio_of:
                r = ratio_of[(m, ec)]
                checks.append(f"{m} {ENDOR_NAME[ec]} {r:.2f}x Q4_0 (>= {target:.1f}x: {'met' if r >= target else 'not met'})")
        for num, den, target in ENDOR_PAIRS:
            A, B = by.get((m, "endor", num)), by.get((m, "endor", den))
            if not A or not B:
                continue
            ratios = [float(A[r]["tps"]) / float(B[r]["tps"]) for r in A
                      if r in B and float(A[r]["tps"]) > 0 and float(B[r]["tps"]) > 0]
            if not ratios:
                continue
            rm = statistics.median(ratios)
            lines.append(f"| {m} | {ENDOR_NAME.get(num, num)} | {ENDOR_NAME.get(den, den)} | **{rm:.2f}x** "
                         f"({min(ratios):.2f}-{max(ratios):.2f}) |")
            if target is not None:
                checks.append(f"{m} {ENDOR_NAME.get(num, num)} {rm:.2f}x {ENDOR_NAME.get(den, den)} "
                              f"(>= {target:.1f}x: {'met' if rm >= target else 'not met'})")
    if lines:
        print()
        print("| model | Endor | against Endor | per-round median (range) |")
        print("|---|---|---|---:|")
        print("\n".join(lines))
    if checks:
        print()
        print("Targets (issue 40): " + "; ".join(checks))
    # A run that printed no figure (tok/s 0) is left out of the medians above and named here.
    missing = [f"{r['model']} {r['runtime']} {r['config']} round {r['round']}" for r in runs if float(r["tps"]) <= 0]
    if missing:
        print()
        print(f"**Error: {len(missing)} run(s) printed no figure** (left out of the medians): " + "; ".join(missing))


if __name__ == "__main__":
    main()
