#!/usr/bin/env python3
"""endor-serve against the `openai` Python client (PyPI), in a virtual environment this test makes:
models.list, chat completions (plain and streamed), completions, 16 concurrent requests whose
greedy texts equal endor-infer's, the client's error classes for 400 and 401, and SIGTERM -> exit 0.
Runs on the sample model (samples/kjv-llama) packed with a chat template added.
Exit 77 (ctest: skipped) with the reason when the openai package cannot be installed.

Usage: test_openai_client.py --serve BIN --pack BIN --infer BIN --sample DIR --venv DIR
"""
import argparse
import concurrent.futures
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

TEMPLATE = ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}"
            "{{ 'Question: ' + m['content'] | trim + '\\nAnswer:' }}{% elif m['role'] == 'assistant' %}"
            "{{ ' ' + m['content'] | trim + eos_token }}{% else %}{{ raise_exception('no ' + m['role'] + ' role') }}"
            "{% endif %}{% endfor %}")
PROMPTS = ["In the beginning", "And God said", "The LORD is my shepherd", "Blessed are the", "Thou shalt",
           "And Moses went up unto", "For God so loved", "Hear, O Israel", "And he said unto them", "Let there be",
           "Behold, I stand at the door", "And the children of Israel", "Praise ye the LORD",
           "Now these are the generations", "And it came to pass", "Unto thee, O LORD"]
failures = []


def check(ok, what):
    print(("ok: " if ok else "FAIL: ") + what, flush=True)
    if not ok:
        failures.append(what)


def ensure_venv(venv):
    """The venv's python with openai importable, or None with the reason printed."""
    py = os.path.join(venv, "bin", "python")
    if os.path.exists(py) and subprocess.run([py, "-c", "import openai"], capture_output=True).returncode == 0:
        return py
    try:
        subprocess.run([sys.executable, "-m", "venv", venv], check=True, capture_output=True, timeout=300)
        subprocess.run([py, "-m", "pip", "install", "-q", "openai"], check=True, capture_output=True, timeout=600)
    except (subprocess.SubprocessError, OSError) as e:
        err = getattr(e, "stderr", b"") or b""
        print(f"test_serve_openai: skipped: cannot install the openai package into {venv} ({e}; "
              f"{err.decode(errors='replace').strip()[-300:]})")
        return None
    return py


def inner(a):
    import openai  # noqa: PLC0415 - only inside the venv

    tmp = tempfile.mkdtemp(prefix="endor-serve-openai-")
    try:
        src = os.path.join(tmp, "src")
        os.mkdir(src)
        for f in ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json"):
            shutil.copy(os.path.join(a.sample, f), src)
        with open(os.path.join(a.sample, "tokenizer_config.json")) as f:
            cfg = json.load(f)
        cfg["chat_template"] = TEMPLATE
        with open(os.path.join(src, "tokenizer_config.json"), "w") as f:
            json.dump(cfg, f)
        model = os.path.join(tmp, "kjv.endor")
        env = dict(os.environ, OMP_NUM_THREADS="1")
        subprocess.run([a.pack, "prune", "--sparsity", "0.5", src, "-o", model], check=True, capture_output=True, env=env)

        err_path = os.path.join(tmp, "serve.err")
        with open(err_path, "w") as err:
            server = subprocess.Popen([a.serve, model, "--port", "0", "--threads", "1", "--parallel", "16",
                                       "--api-key", "sesame"], stderr=err, env=env)
        port = None
        for _ in range(3000):
            log = open(err_path).read()
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", log)
            if m and "endor-serve: ready" in log:
                port = int(m.group(1))
                break
            if server.poll() is not None:
                break
            time.sleep(0.02)
        if port is None:
            print("FAIL: endor-serve did not start:\n" + open(err_path).read())
            server.kill()
            return 1
        try:
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="sesame", max_retries=0)
            models = client.models.list()
            check([m.id for m in models.data] == ["kjv"], f"models.list: {[m.id for m in models.data]}")

            q = [{"role": "user", "content": "Who made the heaven?"}]
            chat = client.chat.completions.create(model="kjv", messages=q, max_tokens=24, temperature=0)
            content = chat.choices[0].message.content
            check(isinstance(content, str) and len(content) > 0, f"chat: {content!r}")
            check(chat.choices[0].message.role == "assistant", "chat: role assistant")
            check(chat.usage.completion_tokens >= 1 and chat.usage.prompt_tokens > 0, f"chat usage: {chat.usage}")
            infer_chat = subprocess.run([a.infer, model, "--chat", "-p", q[0]["content"], "-n", "24", "--temperature", "0"],
                                        capture_output=True, text=True, env=env)
            check(infer_chat.stdout == content + "\n", f"chat equals endor-infer --chat: {infer_chat.stdout!r}")

            stream = client.chat.completions.create(model="kjv", messages=q, max_tokens=24, temperature=0, stream=True)
            parts, finish = [], None
            for chunk in stream:
                for c in chunk.choices:
                    if c.delta and c.delta.content:
                        parts.append(c.delta.content)
                    if c.finish_reason:
                        finish = c.finish_reason
            check("".join(parts) == content, f"streamed chat equals the plain one: {''.join(parts)!r}")
            check(finish in ("stop", "length"), f"stream finish_reason: {finish}")

            comp = client.completions.create(model="kjv", prompt="In the beginning", max_tokens=20, temperature=0)
            check(comp.choices[0].finish_reason == "length" and comp.usage.completion_tokens == 20,
                  f"completion: {comp.choices[0].finish_reason}, {comp.usage}")

            def infer_text(p):
                r = subprocess.run([a.infer, model, "-p", p, "-n", "32", "--temperature", "0"], capture_output=True,
                                   text=True, env=env)
                return r.stdout

            def served(p):
                c = client.completions.create(model="kjv", prompt=p, max_tokens=32, temperature=0)
                return c.choices[0].text

            expected = [infer_text(p) for p in PROMPTS]
            with concurrent.futures.ThreadPoolExecutor(16) as pool:
                got = list(pool.map(served, PROMPTS))
            for p, e, g in zip(PROMPTS, expected, got):
                printed = p + g if (p + g).endswith("\n") else p + g + "\n"
                check(printed == e, f"16 concurrent: {p!r} -> {g!r} equals endor-infer")

            try:
                client.chat.completions.create(model="kjv", messages=q, n=2)
                check(False, "n=2 refused")
            except openai.BadRequestError as e:
                check(e.status_code == 400 and "'n'" in str(e), f"n=2: BadRequestError {e}")
            try:
                openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="wrong", max_retries=0).models.list()
                check(False, "wrong key refused")
            except openai.AuthenticationError as e:
                check(e.status_code == 401, "wrong key: AuthenticationError")
        finally:
            server.send_signal(signal.SIGTERM)
            try:
                rc = server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                rc = None
            check(rc == 0, f"SIGTERM: exit status {rc}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser()
    for k in ("--serve", "--pack", "--infer", "--sample", "--venv"):
        ap.add_argument(k, required=True)
    ap.add_argument("--inner", action="store_true")
    a = ap.parse_args()
    if a.inner:
        return inner(a)
    py = ensure_venv(a.venv)
    if py is None:
        return 77
    return subprocess.run([py, os.path.abspath(__file__), "--inner"] + sys.argv[1:]).returncode


if __name__ == "__main__":
    sys.exit(main())
