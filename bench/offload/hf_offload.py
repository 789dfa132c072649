#!/usr/bin/env python3
"""Baseline (a) of bench/offload/run.sh: Hugging Face Accelerate offloading on the same checkpoint and
GPU budget as Endor. from_pretrained(device_map="auto", max_memory={0: GPU, "cpu": CPU}) places what
fits on the GPU and offloads the rest to host RAM (hooks copy each offloaded layer's weights to the GPU
in every forward) or, with --offload-folder and a small CPU budget, to disk (read back every forward).

Greedy decode over a fixed prompt of token ids: one prefill, then --steps single-token steps with the
KV cache, each timed alone (torch.cuda.synchronize around it); the first step is a warm-up and is
dropped, the per-token latency reported is the median of the rest. Disk case: before each step the
offloaded files are dropped from the page cache (posix_fadvise DONTNEED; no root needed), so every
step reads them from the disk as Endor's O_DIRECT reads do; without that, 128 GB of RAM would serve
them from the page cache.

Prints one JSON line: {"latency_ms": median, "steps_ms": [...], "moved_bytes": bytes moved per token
(parameters off the compute device: host RAM and disk on the GPU, disk on the CPU), "moved_cpu_bytes",
"moved_disk_bytes", "layers": {"gpu": n, "cpu": n, "disk": n} decoder layers per place, ...}.
Usage: hf_offload.py CKPT --gpu-mem 3GiB [--cpu-mem 120GiB] [--offload-folder DIR] [--prompt-ids "1 2 3"]
       [--steps 6] [--device cuda|cpu]
"""
import argparse
import collections
import glob
import json
import os
import statistics
import sys
import time

import torch
from transformers import AutoModelForCausalLM


def drop_page_cache(paths):
    for p in paths:
        try:
            fd = os.open(p, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ckpt")
    ap.add_argument("--gpu-mem", default="3GiB")
    ap.add_argument("--cpu-mem", default=None, help="host RAM for offloaded weights (default: all)")
    ap.add_argument("--offload-folder", default=None)
    ap.add_argument("--prompt-ids", default="1 100 200 300 400 500 600 700")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    a = ap.parse_args()

    t0 = time.time()
    cuda = a.device == "cuda"
    max_memory = {0: a.gpu_mem} if cuda else {}
    max_memory["cpu"] = a.cpu_mem or "1000GiB"
    kwargs = dict(dtype=torch.float16 if cuda else torch.float32, device_map="auto", max_memory=max_memory)
    if a.offload_folder:
        os.makedirs(a.offload_folder, exist_ok=True)
        kwargs["offload_folder"] = a.offload_folder
    model = AutoModelForCausalLM.from_pretrained(a.ckpt, **kwargs)
    model.eval()
    load_s = time.time() - t0

    # Where each parameter lives, and so what moves per token: on the GPU device every parameter
    # off the GPU (host RAM or disk) is copied in each forward; on the CPU device the disk ones.
    dmap = getattr(model, "hf_device_map", None) or {"": "cuda:0" if cuda else "cpu"}
    elem = 2 if cuda else 4
    where_bytes = collections.Counter()
    for name, p in model.named_parameters():
        best = None
        for prefix, dev in dmap.items():
            if prefix == "" or name == prefix or name.startswith(prefix + "."):
                if best is None or len(prefix) > len(best[0]):
                    best = (prefix, dev)
        dev = str(best[1]) if best else "cpu"
        kind = "disk" if dev == "disk" else ("cpu" if dev == "cpu" else "gpu")
        where_bytes[kind] += p.numel() * elem
    layer_kinds = collections.Counter(
        "disk" if str(d) == "disk" else "cpu" if str(d) == "cpu" else "gpu" for k, d in dmap.items() if ".layers." in k)
    moved = where_bytes["disk"] + (where_bytes["cpu"] if cuda else 0)

    files = []
    if a.offload_folder:
        files = glob.glob(os.path.join(a.offload_folder, "**", "*"), recursive=True)
        files += glob.glob(os.path.join(a.ckpt, "*.safetensors"))
    dev = torch.device("cuda:0" if cuda else "cpu")
    ids = torch.tensor([[int(x) for x in a.prompt_ids.split()]], device=dev)

    def sync():
        if cuda:
            torch.cuda.synchronize()

    steps_ms = []
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
        pkv = out.past_key_values
        nxt = out.logits[:, -1:].argmax(-1)
        for _ in range(a.steps):
            if files:
                drop_page_cache(files)
            sync()
            t = time.perf_counter()
            out = model(input_ids=nxt, past_key_values=pkv, use_cache=True)
            sync()
            steps_ms.append((time.perf_counter() - t) * 1e3)
            pkv = out.past_key_values
            nxt = out.logits[:, -1:].argmax(-1)
    timed = steps_ms[1:] if len(steps_ms) > 1 else steps_ms
    print(json.dumps({
        "latency_ms": statistics.median(timed), "steps_ms": steps_ms, "moved_bytes": moved,
        "moved_cpu_bytes": where_bytes["cpu"] if cuda else 0, "moved_disk_bytes": where_bytes["disk"],
        "bytes_by_place": dict(where_bytes), "layers": dict(layer_kinds), "load_s": round(load_s, 1),
        "gpu_mem": a.gpu_mem, "cpu_mem": a.cpu_mem, "disk": bool(a.offload_folder), "device": a.device,
        "torch": torch.__version__, "gpu": torch.cuda.get_device_name(0) if cuda else "",
    }), flush=True)


if __name__ == "__main__":
    sys.exit(main())
