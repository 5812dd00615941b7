#!/usr/bin/env bash
# Issue 23's async-save acceptance on one GPU: trains the 124M benchmark config with
# checkpoint.async_save = true, saving every SAVE_INTERVAL iterations, logs every iteration, and
# prints every step in the window of each save (the snapshot step included, charged with the
# snapshot's time) with its ratio to the median step outside any window (the first 5 iterations
# excluded), and the max ratio. Then an async and a sync run of 2 x SAVE_INTERVAL iterations in
# training.deterministic_mode: their checkpoints must hold the same values (h5diff, config_toml aside).
# Usage: async_save_step_time.sh BIN_DIR SOURCE_DIR OUT_DIR [ITERS=60] [SAVE_INTERVAL=15]
# The logs go to OUT_DIR; the checkpoints (about 1.5 GB each) to CKPT_DIR (default a folder under
# ${TMPDIR:-/tmp}, removed at the end: they must not come back with OUT). The comparison needs
# h5diff on PATH or in BIN_DIR (the GPU image has none: bundle /usr/bin/h5diff with the binaries).
# Prints one JSON line {"benchmark": "async_save_step_time", ...}; exits 1 when the max ratio > 1.10
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
rm -rf "$ckpt/timed" "$ckpt/async" "$ckpt/sync"
# The timed run: the default (fast) kernels.
"$bin/tessera-train" "${common[@]}" --set checkpoint.async_save=true --set checkpoint.save="$ckpt/timed" \
  > "$out/async.log" 2>&1 || { tail -20 "$out/async.log"; exit 1; }
# The bitwise comparison: an async and a sync run of 2 x SAVE_INTERVAL iterations in
# training.deterministic_mode, so that the two trainings are bitwise the same and any difference in
# the checkpoints is the save's (the default GPU kernels reduce with atomics, in varying order).
compare=(--config "$cfg" --set training.train_iters=$((2 * interval)) --set logging.log_interval=1
         --set training.eval_interval=0 --set checkpoint.save_interval="$interval" --set optimizer.lr_warmup_iters=1
         --set training.deterministic_mode=true)
"$bin/tessera-train" "${compare[@]}" --set checkpoint.async_save=true --set checkpoint.save="$ckpt/async" \
  > "$out/async_deterministic.log" 2>&1 || { tail -20 "$out/async_deterministic.log"; exit 1; }
"$bin/tessera-train" "${compare[@]}" --set checkpoint.async_save=false --set checkpoint.save="$ckpt/sync" \
  > "$out/sync_deterministic.log" 2>&1 || { tail -20 "$out/sync_deterministic.log"; exit 1; }
python3 - "$out/async.log" <<'PY'
import json, re, statistics, sys
# Every step in the window of each save (from the snapshot to the commit) against the median step
# outside any window. The logged step time covers the step only; the snapshot (issuing the
# device-to-host copies, on the step loop's thread, between steps) is charged to the step right
# after it, the snapshot step: the one whose optimizer update waits for those copies on the GPU.
windows, other, current, snapshot_ms = [], [], None, 0.0
for line in open(sys.argv[1]):
    s = re.search(r"started asynchronous checkpoint save at iteration (\d+) .*snapshot in ([\d.e+-]+) s", line)
    if s:
        current = {"save_iteration": int(s.group(1)), "snapshot_ms": float(s.group(2)) * 1e3, "steps": []}
        windows.append(current)
        snapshot_ms = current["snapshot_ms"]
        continue
    if "(asynchronous)" in line:
        current = None
        continue
    m = re.search(r"iteration +(\d+)/ *\d+ \|.*elapsed time per iteration \(ms\):? *([\d.]+)", line)
    if not m or int(m.group(1)) <= 5:
        continue
    ms = float(m.group(2))
    if current is not None:
        current["steps"].append([int(m.group(1)), ms + snapshot_ms])
        snapshot_ms = 0.0
    else:
        other.append(ms)
base = statistics.median(other) if other else float("nan")
max_ratio = float("nan")
for w in windows:
    for step in w["steps"]:
        step.append(round(step[1] / base, 3))
        max_ratio = step[2] if max_ratio != max_ratio else max(max_ratio, step[2])
    print("save at iteration %d (snapshot %.1f ms): [iteration, ms, ratio] %s" % (w["save_iteration"], w["snapshot_ms"], w["steps"]))
ok = bool(other) and any(w["steps"] for w in windows) and max_ratio <= 1.10
print(json.dumps({"benchmark": "async_save_step_time", "saves": len(windows),
                  "steps_during_save": sum(len(w["steps"]) for w in windows),
                  "median_ms_without_save": base, "max_ratio": max_ratio,
                  "snapshot_ms": [w["snapshot_ms"] for w in windows], "pass": ok}))
sys.exit(0 if ok else 1)
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
