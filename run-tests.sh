#!/usr/bin/env bash
# The test suite: installs what is missing, builds, and runs every CTest label that runs here
# (unit, mpi, slurm: a local one-node Slurm cluster; gpu tests skip without a GPU).
set -euo pipefail
cd "$(dirname "$0")"
scripts/install-deps.sh
scripts/install-slurm-deps.sh
scripts/build.sh
if [ "$(id -u)" -eq 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export TESSERA_SOURCE_DIR="$PWD" TESSERA_BIN_DIR="$PWD/build/bin"
# With ../shared, the reference tests must find their files there (a missing one fails); without it
# they skip, naming the file, unless CI=true (.ci/run) makes that a failure too.
if [ -d ../shared ]; then export TESSERA_SHARED_DIR="$(cd ../shared && pwd)"; fi
export OPENBLAS_NUM_THREADS=1 OMPI_MCA_rmaps_base_oversubscribe=1
ctest --test-dir build --output-on-failure -j "$(nproc)" "$@"
