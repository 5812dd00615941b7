#!/usr/bin/env bash
# Issue 23's async-save acceptance on one GPU: trains the 124M benchmark config with
# checkpoint.async_save = true, saving every SAVE_INTERVAL iterations, logs every iteration, and
# compares the step time of the iterations that run while a background save is in flight with the
# others (median; the first 5 iterations excluded). Then repeats the run with synchronous saves and
# checks the checkpoints hold the same values (h5diff, config_toml aside).
# Usage: async_save_step_time.sh BIN_DIR SOURCE_DIR OUT_DIR [ITERS=60] [SAVE_INTERVAL=15]
# The logs go to OUT_DIR; the checkpoints (about 1.5 GB each) to CKPT_DIR (default a folder under
# ${TMPDIR:-/tmp}, removed at the end: they must not come back with OUT). The comparison needs
# h5diff on PATH or in BIN_DIR (the GPU image has none: bundle /usr/bin/h5diff with the binaries).
# Prints one JSON line {"benchmark": "async_save_step_time", ...}; exits 1 when the ratio > 1.10
# or the checkpoints differ.
set -uo pipefail
bin=$1 src=$2 out=$3 iters=${4:-60} interval=${5:-15}
ckpt=${CKPT_DIR:-${TMPDIR:-/tmp}/tessera_async_save_$$}
mkdir -p "$out" "$ckpt"
trap 'rm -rf "$ckpt"' EXIT
h5diff=$(command -v h5diff || echo "$bin/h5diff")
[ -x "$h5diff" ] || { echo "no h5diff on PATH or in $bin: cannot compare the checkpoints"; exit 1; }
cfg="$src/share/configs/bench/gpt2-124m.toml"
common=(--config "$cfg" --set training.train_iters="$iters" --set logging.log_interval=1
        --set training.eval_interval=0 --set checkpoint.save_interval="$interval" --set optimizer.lr_warmup_iters=1)
rm -rf "$ckpt/async" "$ckpt/sync"
"$bin/tessera-train" "${common[@]}" --set checkpoint.async_save=true --set checkpoint.save="$ckpt/async" \
  > "$out/async.log" 2>&1 || { tail -20 "$out/async.log"; exit 1; }
"$bin/tessera-train" "${common[@]}" --set checkpoint.async_save=false --set checkpoint.save="$ckpt/sync" \
  > "$out/sync.log" 2>&1 || { tail -20 "$out/sync.log"; exit 1; }
python3 - "$out/async.log" <<'PY'
import json, re, statistics, sys
# The logged step time covers the step only; the snapshot (device-to-host copy, on the step loop's
# thread, between steps) is charged to the first step of each save window.
in_flight, during, other, snapshot_ms = False, [], [], 0.0
for line in open(sys.argv[1]):
    s = re.match(r"started asynchronous checkpoint save .*snapshot in ([\d.e+-]+) s", line)
    if s: in_flight, snapshot_ms = True, float(s.group(1)) * 1e3
    elif "(asynchronous)" in line: in_flight = False
    m = re.match(r"iteration (\d+)/\d+ \|.*elapsed time per iteration \(ms\) ([\d.]+)", line)
    if m and int(m.group(1)) > 5:
        (during if in_flight else other).append(float(m.group(2)) + (snapshot_ms if in_flight else 0.0))
        snapshot_ms = 0.0
ratio = statistics.median(during) / statistics.median(other) if during and other else float("nan")
print(json.dumps({"benchmark": "async_save_step_time", "steps_during_save": len(during),
                  "median_ms_during_save": statistics.median(during) if during else None,
                  "median_ms_otherwise": statistics.median(other) if other else None, "ratio": ratio,
                  "pass": ratio <= 1.10}))
sys.exit(0 if ratio <= 1.10 else 1)
PY
status=$?
compared=0
for folder in "$ckpt"/sync/iter_*; do
  for file in "$folder"/*.h5; do
    other="$ckpt/async/$(basename "$folder")/$(basename "$file")"
    if ! "$h5diff" -q --exclude-path /config_toml "$file" "$other"; then echo "DIFFER: $file $other"; status=1; fi
    compared=$((compared + 1))
  done
done
echo "compared $compared checkpoint files (sync vs async) with h5diff"
[ "$compared" -gt 0 ] || { echo "no checkpoint files to compare"; status=1; }
grep -E "asynchronous|saved checkpoint" "$out/async.log" | head -20
exit $status
