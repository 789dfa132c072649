#!/usr/bin/env bash
# Installs the Debian packages Endor builds against. Idempotent; safe to re-run.
# Usage: scripts/setup.sh   (uses sudo when not root)
set -euo pipefail
# time: GNU time for scripts/accuracy.sh (peak RSS). libboost-context-dev: fiber switches of the CPU
# emulation of CUDA (tests/cuemu). libcpp-httplib-dev: endor-serve's HTTP layer. ocl-icd-opencl-dev: dnnl-config.cmake (Debian libdnnl-dev) requires find_package(OpenCL).
pkgs=(cmake g++ make pkg-config libzstd-dev zstd libxxhash-dev nlohmann-json3-dev libcxxopts-dev
      doctest-dev libdnnl-dev ocl-icd-opencl-dev liblapacke-dev libopenblas-dev libomp-dev clang libclang-rt-dev time
      libboost-context-dev libcpp-httplib-dev)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "setup: dependencies present"
