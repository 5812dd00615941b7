#!/usr/bin/env bash
# Issue 23, acceptance 3 (CPU part), one rank of two: kill -9 of rank 1 while an asynchronous
# checkpoint save is in flight (its writer has written the files, nothing is committed, training
# has gone on) ends the whole job (no rank left waiting), leaves the tracker on the previous
# checkpoint, and a new 2-rank run resumes from it with the killed run's losses.
# Usage: async_save_kill_rank.sh MPIEXEC TESSERA_TRAIN
set -u
mpiexec=$1 train=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
dir=$(mktemp -d)
ckpt=$dir/ckpt
args="--set model.num_layers=1 --set model.hidden_size=32 --set model.num_attention_heads=2 --set model.seq_length=16
      --set model.max_position_embeddings=32 --set training.micro_batch_size=2 --set training.global_batch_size=4
      --set training.train_iters=8 --set training.eval_interval=0 --set logging.log_interval=1
      --set data.mock_data=true --set data.vocab_size=100 --set optimizer.lr_warmup_iters=1
      --set checkpoint.save=$ckpt --set checkpoint.save_interval=2 --set checkpoint.async_save=true"
fail=0
check() { if ! eval "$1"; then echo "FAIL: $2"; fail=1; fi; }
loss() { grep -E "iteration $2/8 \|" "$1" | grep -oE "\| lm loss [^ |]+" | head -1; }

# Each rank writes its pid, so rank 1 can be killed; every writer stays busy 1.5 s after its files.
TESSERA_TEST_PAUSE_IN_ASYNC_WRITE_MS=1500 "$mpiexec" --oversubscribe -np 2 \
  bash -c 'echo $$ > '"$dir"'/pid.$OMPI_COMM_WORLD_RANK; exec "$0" "$@"' "$train" $args > "$dir/killed.log" 2>&1 &
launcher=$!
caught=0
for _ in $(seq 6000); do  # up to 120 s: iteration 2 committed, iteration 4's writers busy, iteration 5 trained
  if [ "$(cat "$ckpt/latest_checkpointed_iteration.txt" 2>/dev/null)" = 2 ] &&
     ls -d "$ckpt"/iter_0000004.tmp-*/common.h5 >/dev/null 2>&1 &&
     grep -q "started asynchronous checkpoint save at iteration 4" "$dir/killed.log" &&
     [ -n "$(loss "$dir/killed.log" 5)" ]; then
    caught=1; break
  fi
  sleep 0.02
done
check '[ "$caught" = 1 ]' "never caught iteration 4's save in flight"
kill -KILL "$(cat "$dir/pid.1")"
start=$(date +%s)
# The watchdog holds no pipe of ctest (its orphaned sleep would keep ctest waiting 60 s).
( sleep 60; kill -KILL $launcher 2>/dev/null ) >/dev/null 2>&1 & watchdog=$!
wait $launcher
rc=$?
elapsed=$(( $(date +%s) - start ))
kill $watchdog 2>/dev/null
kill -KILL "$(cat "$dir/pid.0")" 2>/dev/null  # only if the job left it running (reported below)
echo "job ended with exit $rc ${elapsed} s after rank 1 was killed"
check '[ "$rc" -ne 0 ] && [ "$elapsed" -lt 45 ]' "the job did not end by itself (exit $rc after ${elapsed} s)"
check '[ "$(cat "$ckpt/latest_checkpointed_iteration.txt")" = 2 ]' "tracker is not 2"
check '[ ! -e "$ckpt/iter_0000004" ]' "the interrupted save became visible"
check '! grep -q "saved checkpoint at iteration 4" "$dir/killed.log"' "iteration 4 reported saved"

# A new run resumes from iteration 2 and repeats the killed run's losses of iterations 3..5.
"$mpiexec" --oversubscribe -np 2 "$train" $args --set checkpoint.load="$ckpt" > "$dir/resumed.log" 2>&1
rc=$?
check '[ "$rc" -eq 0 ]' "the resumed run failed (exit $rc): $(tail -5 "$dir/resumed.log")"
check 'grep -q "resuming from iteration 2" "$dir/resumed.log"' "the resumed run did not load iteration 2"
for it in 3 4 5; do
  a=$(loss "$dir/killed.log" $it) b=$(loss "$dir/resumed.log" $it)
  echo "iteration $it: killed run $a, resumed run $b"
  check '[ -n "$a" ] && [ "$a" = "$b" ]' "iteration $it: losses differ ('$a' vs '$b')"
done
check '[ "$(cat "$ckpt/latest_checkpointed_iteration.txt")" = 8 ]' "the resumed run did not save iteration 8"
check '! ls -d "$ckpt"/iter_0000004.tmp-* >/dev/null 2>&1' "the killed save's temporary folder is still there"
[ "$fail" = 0 ] || { echo "--- killed run"; tail -20 "$dir/killed.log"; }
rm -rf "$dir"
exit $fail
