#!/usr/bin/env bash
# Issue 23, acceptance 3 (kill -9 part) on one GPU with the 124M checkpoint: trains the 124M
# benchmark config with checkpoint.async_save = true and save_interval = 10, every writer held busy
# PAUSE_MS after writing its files (TESSERA_TEST_PAUSE_IN_ASYNC_WRITE_MS, so that a save is surely in
# flight), and sends SIGKILL once iteration 10 is committed, the save of iteration 20 has started and
# iteration 21 has been trained. Then the tracker must still name iteration 10, no iter_0000020 may
# exist, and a new run must load iteration 10 and train on (exit 0, "resuming from iteration 10").
# Usage: async_save_kill_check.sh BIN_DIR SOURCE_DIR OUT_DIR [PAUSE_MS=4000]
# The checkpoints go to CKPT_DIR (default a folder under ${TMPDIR:-/tmp}, removed at the end).
# Prints one JSON line {"check": "async_save_kill", ...}; exits 1 on any failure.
set -uo pipefail
bin=$1 src=$2 out=$3 pause=${4:-4000}
ckpt=${CKPT_DIR:-${TMPDIR:-/tmp}/tessera_async_kill_$$}
mkdir -p "$out"
rm -rf "$ckpt"
trap 'rm -rf "$ckpt"' EXIT
cfg="$src/share/configs/bench/gpt2-124m.toml"
common=(--config "$cfg" --set logging.log_interval=1 --set training.eval_interval=0 --set optimizer.lr_warmup_iters=1)
TESSERA_TEST_PAUSE_IN_ASYNC_WRITE_MS=$pause "$bin/tessera-train" "${common[@]}" --set training.train_iters=60 \
  --set checkpoint.save_interval=10 --set checkpoint.async_save=true --set checkpoint.save="$ckpt" \
  > "$out/killed.log" 2>&1 &
pid=$!
caught=0
for _ in $(seq 1 1200); do  # 120 s
  if [ "$(cat "$ckpt/latest_checkpointed_iteration.txt" 2>/dev/null)" = 10 ] &&
     grep -q "started asynchronous checkpoint save at iteration 20" "$out/killed.log" &&
     grep -qE "iteration +21/" "$out/killed.log"; then
    caught=1
    break
  fi
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
kill -9 "$pid" 2>/dev/null
wait "$pid"
rc=$?
status=0
fail() { echo "FAIL: $*"; status=1; }
[ "$caught" = 1 ] || fail "the save of iteration 20 was never caught in flight (see $out/killed.log)"
[ "$rc" = 137 ] || fail "the training ended with $rc, not by SIGKILL (137)"
grep -q "saved checkpoint at iteration 20" "$out/killed.log" && fail "the save of iteration 20 completed before the kill"
tracker=$(cat "$ckpt/latest_checkpointed_iteration.txt" 2>/dev/null)
[ "$tracker" = 10 ] || fail "the tracker names '$tracker', not 10"
[ -e "$ckpt/iter_0000020" ] && fail "iter_0000020 exists after the kill"
ls "$ckpt" > "$out/after_kill_listing.txt" 2>&1
"$bin/tessera-train" "${common[@]}" --set training.train_iters=12 --set checkpoint.load="$ckpt" \
  > "$out/resumed.log" 2>&1
resumed_rc=$?
[ "$resumed_rc" = 0 ] || fail "the run loading the previous checkpoint exited $resumed_rc"
grep -q "resuming from iteration 10" "$out/resumed.log" || fail "the new run did not resume from iteration 10"
grep -qE "iteration +12/" "$out/resumed.log" || fail "the new run did not train iteration 12"
echo "{\"check\": \"async_save_kill\", \"killed_exit\": $rc, \"tracker_after_kill\": \"$tracker\", \"resumed_exit\": $resumed_rc, \"pass\": $([ $status = 0 ] && echo true || echo false)}"
exit $status
