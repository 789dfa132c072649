#!/usr/bin/env python3
"""The tables of bench/moe/run.sh from its logs (OUT_DIR): in RAM, from disk, batch.

  table.py OUT_DIR   -> markdown on stdout

Every figure is the median over the rounds of the same configuration (with the rounds' spread).
From disk: bytes read from disk per token = the experts' reads (expert-summary disk_bytes) + the
blocks' (offload-summary moved_disk_bytes); floor = those bytes / the disk rate of probe.txt
(bench_offload_probe, O_DIRECT sequential reads); plan = --plan's predicted ms per token; "plan at the run's
read rate" = the same with the expert reads timed at the rate the run's expert reader achieved (expert-summary
read_gbps) instead of --plan's probe a few seconds earlier.
"""
import glob
import os
import re
import statistics
import sys


def kv(text, key):
    m = re.search(rf"^{key}: (.*)$", text, re.M)
    if not m:
        return {}
    out = {}
    for item in m.group(1).split():
        if "=" in item:
            k, v = item.split("=", 1)
            try:
                out[k] = float(v)
            except ValueError:
                out[k] = v
    return out


def endor_decode(text):
    m = re.search(r"^decode: (\d+) tokens in ([\d.]+) ms \(([\d.]+) tokens/s\)", text, re.M)
    return float(m.group(3)) if m else None


def llama_ts(text):
    lines = [l for l in text.splitlines() if l.startswith('"') or l.startswith("build_commit")]
    if len(lines) < 2:
        return None
    head = [h.strip('"') for h in lines[0].split(",")]
    row = [c.strip('"') for c in re.findall(r'"[^"]*"|[^,]+', lines[-1])]
    return float(row[head.index("avg_ts")]) if "avg_ts" in head and len(row) == len(head) else None


def load_of(text):
    m = re.search(r"load ([\d.]+ [\d.]+ [\d.]+)", text)
    return m.group(1) if m else "?"


def med(vals):
    vals = [v for v in vals if v is not None]
    if not vals:
        return None, ""
    spread = f"{min(vals):.2f}-{max(vals):.2f}" if len(vals) > 1 else ""
    return statistics.median(vals), spread


def runs(out, pattern):
    return [open(p, errors="replace").read() for p in sorted(glob.glob(os.path.join(out, pattern)))]


def ram_table(out):
    rows = ["| in RAM | decode tok/s (median) | rounds | plan tok/s | measured/plan | load (1/5/15 min) |",
            "|---|---:|---|---:|---:|---|"]
    figures = {}
    for v in ["int4k", "int4-50", "f16-50"]:
        texts = runs(out, f"ram-{v}-r*.log")
        m, s = med([endor_decode(t) for t in texts])
        figures[v] = m
        plan = med([kv(t, "plan-summary").get("predicted_ms_per_token") for t in texts])[0]
        if m is not None:
            ptps = 1000 / plan if plan else 0
            rows.append(f"| Endor {v} | {m:.2f} | {s} | {ptps:.2f} | {m / ptps if ptps else 0:.2f} | {load_of(texts[0])} |")
    for q in ["Q4_K_M", "Q4_0", "F16"]:
        texts = runs(out, f"ram-llama-{q}-r*.log")
        m, s = med([llama_ts(t) for t in texts])
        figures[q] = m
        if m is not None:
            rows.append(f"| llama.cpp {q} | {m:.2f} | {s} | | | {load_of(texts[0])} |")
    if figures.get("int4k") and figures.get("Q4_K_M"):
        rows.append(f"\nint4k / llama.cpp Q4_K_M: {figures['int4k'] / figures['Q4_K_M']:.2f}x")
    return rows


def disk_gbps(out):
    p = os.path.join(out, "probe.txt")
    if not os.path.exists(p):
        return None
    m = re.search(r"disk_gbps=([\d.]+)", open(p).read())
    return float(m.group(1)) if m else None


def plan_at_run_rate(t):
    """--plan's ms a token with the expert reads timed at the rate the run achieved (expert-summary read_gbps)
    instead of --plan's probe: what is left is the model's error, not the disk's minute-to-minute rate."""
    ps, es = kv(t, "plan-summary"), kv(t, "expert-summary")
    pred, byts = ps.get("predicted_ms_per_token"), ps.get("predicted_disk_bytes_per_token", 0)
    probe, run = ps.get("expert_disk_gbps"), es.get("read_gbps")
    if pred is None or not probe or not run:
        return pred
    return pred + byts / 1e6 * (1 / run - 1 / probe)


def disk_table(out):
    gbps = disk_gbps(out)
    rows = [f"disk rate (probe): {gbps} GB/s\n",
            "| from disk | tok/s | MB read/token | hit rate | prefetched (used) reads/token | expert reads GB/s | floor ms | "
            "ms/token | x floor | plan ms | measured/plan | plan at the run's read rate | measured/that | load |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    figures = {}
    for v in ["int4-50", "dense"]:
        for c in ["cache", "cache-pf", "nocache"]:
            texts = runs(out, f"disk-{v}-{c}-r*.log")
            if not texts:
                continue
            tps, s = med([endor_decode(t) for t in texts])
            byts = med([kv(t, "expert-summary").get("disk_bytes", 0) + kv(t, "offload-summary").get("moved_disk_bytes", 0)
                        for t in texts])[0]
            hit = med([kv(t, "expert-summary").get("hit_rate") for t in texts])[0]
            pf = med([kv(t, "expert-summary").get("prefetch_reads") for t in texts])[0]
            pfu = med([kv(t, "expert-summary").get("prefetch_used") for t in texts])[0]
            rate = med([kv(t, "expert-summary").get("read_gbps") for t in texts])[0]
            # per round: measured / plan at that round's read rate, then the median
            fair = med([(1000 / endor_decode(t)) / plan_at_run_rate(t) for t in texts
                        if endor_decode(t) and plan_at_run_rate(t)])[0]
            fair_ms = med([plan_at_run_rate(t) for t in texts])[0]
            plan = med([kv(t, "plan-summary").get("predicted_ms_per_token") for t in texts])[0]
            ms = 1000 / tps if tps else None
            floor = byts / (gbps * 1e6) if gbps and byts is not None else None
            figures[(v, c)] = tps
            label = {"cache": "cache on", "cache-pf": "cache on, --expert-prefetch on", "nocache": "cache off"}[c]
            pf_text = f"{pf:.1f} ({pfu:.1f})" if pf else "0"
            rate_text = f"{rate:.2f}" if rate else "?"
            rows.append(f"| {v}, {label} | {tps:.2f} ({s}) | {byts / 1e6:.1f} | {100 * (hit or 0):.1f} % | {pf_text} | "
                        f"{rate_text} | {floor:.1f} | {ms:.1f} | {ms / floor:.2f} | {plan:.1f} | {ms / plan:.2f} | "
                        f"{fair_ms:.1f} | {fair:.2f} | {load_of(texts[0])} |")
    a, b = figures.get(("int4-50", "cache")), figures.get(("dense", "cache"))
    if a and b:
        rows.append(f"\nint4-50 / dense f16 (cache on, same budget): {a / b:.2f}x")
    return rows


def batch_table(out):
    rows = ["| from disk | decode-only ms/step | ms/token | tok/s | generated tok/s (prefill incl.) | expert reads GB/s | "
            "plan ms/token | measured/plan | plan at the run's read rate | load |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    per = {}
    sizes = sorted({int(m.group(1)) for f in os.listdir(out) for m in [re.match(r"batch-(\d+)-r\d+\.log$", f)] if m})
    for n in sizes:
        texts = runs(out, f"batch-{n}-r*.log")
        if not texts:
            continue
        steps, gen, plan, rate, fair = [], [], [], [], []
        for t in texts:
            m = re.search(r"decode-only steps, ([\d.]+) ms each", t)
            g = re.search(r"tokens in [\d.]+ ms \(([\d.]+) tokens/s, prefill included\)", t)
            steps.append(float(m.group(1)) if m else None)
            gen.append(float(g.group(1)) if g else None)
            plan.append(kv(t, "plan-summary").get("predicted_ms_per_token"))
            rate.append(kv(t, "expert-summary").get("read_gbps"))
            fair.append(plan_at_run_rate(t))
        step, s = med(steps)
        p = med(plan)[0]
        r = med(rate)[0]
        ms = step / n
        per[n] = 1000 / ms
        rows.append(f"| --batch {n} | {step:.1f} ({s}) | {ms:.1f} | {1000 / ms:.2f} | {med(gen)[0]:.2f} | "
                    f"{r if r else 0:.2f} | {p:.1f} | {ms / p if p else 0:.2f} | {med(fair)[0]:.1f} | {load_of(texts[0])} |")
    if 1 in per:
        rows.append("\n" + "; ".join(f"--batch {n} / --batch 1 (decode tok/s): {per[n] / per[1]:.2f}x" for n in sorted(per) if n > 1))
    return rows


def main():
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        sys.exit("usage: table.py OUT_DIR")
    out = sys.argv[1]
    env = os.path.join(out, "env.txt")
    if os.path.exists(env):
        print("```\n" + open(env).read().strip() + "\n```\n")
    for part in (ram_table, disk_table, batch_table):
        print("\n".join(part(out)) + "\n")


if __name__ == "__main__":
    main()
