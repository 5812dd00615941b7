#!/usr/bin/env bash
# Checkpoint save / load bandwidth of a 124M-parameter GPT-2 small (12 layers, hidden 768, 12 heads,
# vocab 50257, seq 1024) with AdamW state, through tessera-bench ckpt; prints its JSON lines.
# Usage: test/bench/ckpt_bandwidth.sh [BIN_DIR] [CHECKPOINT_DIR] [REPEATS]
# CHECKPOINT_DIR defaults to a temporary folder (removed); point it at the file system to measure.
set -euo pipefail
bin_dir=${1:-${TESSERA_BIN_DIR:-build/bin}}
dir=${2:-}
repeats=${3:-3}
export OPENBLAS_NUM_THREADS=1
args=(ckpt --layers 12 --hidden 768 --heads 12 --vocab 50257 --seq 1024 --repeats "$repeats")
if [ -n "$dir" ]; then args+=(--dir "$dir"); fi
"$bin_dir/tessera-bench" "${args[@]}"
