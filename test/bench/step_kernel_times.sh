#!/usr/bin/env bash
# Where one training step's GPU time goes: ncu kernel durations of a short tessera-bench train run
# (3 iterations), the last step's kernels grouped by what they do (test/bench/step_kernel_times.py).
# Clocks and caches as in a normal run (no clock locking, no cache flush between kernels).
# Usage: test/bench/step_kernel_times.sh BIN_DIR SOURCE_DIR OUT_DIR CONFIG [--set KEY=VALUE ...]
#   CONFIG: a file under share/configs/bench (e.g. gpt2-124m.toml). Needs ncu on PATH (GPU machine).
set -uo pipefail
bin=${1:?usage: step_kernel_times.sh BIN_DIR SOURCE_DIR OUT_DIR CONFIG [--set ...]}
src=${2:?}; out=${3:?}; config=${4:?}; shift 4
mkdir -p "$out"
name=$(basename "$config" .toml)
ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv --page raw --print-units base \
    "$bin/tessera-bench" train --config "$src/share/configs/bench/$config" --label profile \
    --set training.train_iters=3 --set logging.log_interval=1 "$@" \
    >"$out/ncu_$name.csv" 2>"$out/ncu_$name.log" || { echo "ncu run failed: $(tail -3 "$out/ncu_$name.log")"; exit 1; }
python3 "$src/test/bench/step_kernel_times.py" "$out/ncu_$name.csv" | tee "$out/step_kernels_$name.txt"
