#!/usr/bin/env bash
# Configures and builds Tessera into build/ (CUDA backend when a CUDA Toolkit is found, unless
# TESSERA_CUDA=OFF is set in the environment).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_CUDA="${TESSERA_CUDA:-AUTO}" >/dev/null
cmake --build build -j "$(nproc)"
