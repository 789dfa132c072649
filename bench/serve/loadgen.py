#!/usr/bin/env python3
"""Load generator for OpenAI-compatible servers (endor-serve, llama-server): streamed greedy
completions from `concurrency` clients at once, each sending its next request as the last one
ends, for a bounded number of requests and a time limit. Loopback only.

Prints one JSON line per concurrency level:
  generated tokens/s over the level's wall time (first request sent -> last answer done),
  TTFT (request sent -> first text chunk) p50/p99, inter-token latency (gaps between text chunks)
  p50/p99, requests done / failed.

Usage: loadgen.py --port P --concurrency 1,4,8,16 [--requests-per-client 2] [--max-tokens 64]
                  [--time-limit 300] [--label NAME] [--api-key KEY]
Tokens are counted from the usage of the final chunk (stream_options.include_usage); "ignore_eos"
(an extension both endor-serve and llama-server take) makes every request generate max_tokens.
"""
import argparse
import http.client
import json
import threading
import time

PROMPTS = [
    "The history of the Roman Empire begins",
    "Here is a short story about a lighthouse keeper who",
    "The three most important ideas in thermodynamics are",
    "Once upon a time, in a small village by the sea,",
    "To make bread at home, first",
    "The main differences between cats and dogs are",
    "In the year 2050, cities will",
    "A good way to learn a new language is",
    "The recipe for a simple tomato soup:",
    "Photosynthesis is the process by which",
    "The best advice I ever received was",
    "Mountains are formed when",
    "The old library at the end of the street",
    "Water boils at a lower temperature at high altitude because",
    "My favourite season of the year is",
    "The first computers were",
]


def percentile(xs, p):
    if not xs:
        return None
    s = sorted(xs)
    k = max(0, min(len(s) - 1, int(round(p / 100 * (len(s) - 1)))))
    return s[k]


def one_request(port, prompt, max_tokens, api_key, timeout):
    """One streamed completion -> (ttft_s, [gaps_s], n_tokens) or raises."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}, "ignore_eos": True}
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = "Bearer " + api_key
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", json.dumps(body), headers)
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:200]!r}")
    ttft, last, gaps, n_chunks, usage = None, None, [], 0, None
    while True:
        line = resp.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data: "):
            continue
        data = line[6:]
        if data == b"[DONE]":
            break
        chunk = json.loads(data)
        if chunk.get("usage"):
            usage = chunk["usage"]
        text = "".join(c.get("text") or "" for c in chunk.get("choices", []))
        if not text:
            continue
        now = time.perf_counter()
        if ttft is None:
            ttft = now - t0
        else:
            gaps.append(now - last)
        last = now
        n_chunks += 1
    conn.close()
    n = usage["completion_tokens"] if usage and "completion_tokens" in usage else n_chunks
    if ttft is None:
        raise RuntimeError("no text streamed")
    return ttft, gaps, n


def run_level(port, concurrency, per_client, max_tokens, api_key, time_limit):
    ttfts, gaps, tokens, errors = [], [], [0], []
    lock = threading.Lock()
    deadline = time.perf_counter() + time_limit

    def client(c):
        for r in range(per_client):
            if time.perf_counter() > deadline:
                return
            prompt = PROMPTS[(c * per_client + r) % len(PROMPTS)]
            try:
                t, g, n = one_request(port, prompt, max_tokens, api_key, timeout=time_limit)
            except Exception as e:  # noqa: BLE001 - reported, not hidden
                with lock:
                    errors.append(str(e))
                continue
            with lock:
                ttfts.append(t)
                gaps.extend(g)
                tokens[0] += n

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    ms = lambda x: None if x is None else round(x * 1e3, 2)
    return {"concurrency": concurrency, "requests": len(ttfts), "failed": len(errors),
            "errors": errors[:3], "generated_tokens": tokens[0], "wall_s": round(wall, 3),
            "tokens_per_s": round(tokens[0] / wall, 3) if wall > 0 else 0,
            "ttft_p50_ms": ms(percentile(ttfts, 50)), "ttft_p99_ms": ms(percentile(ttfts, 99)),
            "itl_p50_ms": ms(percentile(gaps, 50)), "itl_p99_ms": ms(percentile(gaps, 99))}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--concurrency", default="1,4,8,16")
    ap.add_argument("--requests-per-client", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--time-limit", type=float, default=300, help="seconds per level; no request starts after")
    ap.add_argument("--label", default="")
    ap.add_argument("--api-key", default="")
    a = ap.parse_args()
    for c in (int(x) for x in a.concurrency.split(",")):
        r = run_level(a.port, c, a.requests_per_client, a.max_tokens, a.api_key, a.time_limit)
        r["label"] = a.label
        print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
