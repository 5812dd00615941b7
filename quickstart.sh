#!/usr/bin/env bash
# Quickstart: installs what is missing, builds, and trains the bundled default GPT on the CPU
# (share/configs/quickstart.toml). Extra arguments go to tessera-train (e.g. --train-iters 20).
set -euo pipefail
cd "$(dirname "$0")"
scripts/install-deps.sh
scripts/build.sh
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
mkdir -p runs/quickstart
exec build/bin/tessera-train --config share/configs/quickstart.toml "$@"
