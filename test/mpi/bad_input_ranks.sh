#!/usr/bin/env bash
# Issue 23, the multi-rank items. Usage: bad_input_ranks.sh MPIEXEC TESSERA_TRAIN CASE
#   configs: ranks started with different configs (hidden_size: heap corruption before; train_iters:
#            a hang; seq_length: trained with exit 0) end with exit 2, the message naming the rank
#            and the key, printed once.
#   stopped: a rank stopped with SIGSTOP ends the job through parallel.distributed_timeout_minutes
#            with a message naming the operation, instead of the others spinning forever.
set -u
mpiexec=$1 train=$2 case=$3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
tiny="--set model.num_layers=1 --set model.hidden_size=32 --set model.num_attention_heads=2 --set model.seq_length=16
      --set model.max_position_embeddings=32 --set training.micro_batch_size=2 --set training.global_batch_size=4 --set training.train_iters=3
      --set data.mock_data=true --set data.vocab_size=100 --set optimizer.lr_warmup_iters=1"
fail=0
check() { if ! eval "$1"; then echo "FAIL: $2"; fail=1; fi; }

if [ "$case" = configs ]; then
  for differ in "model.hidden_size=64" "training.train_iters=5" "model.seq_length=32"; do
    key=${differ%%=*}
    output=$(timeout 60 "$mpiexec" --oversubscribe -np 1 "$train" $tiny : -np 1 "$train" $tiny --set "$differ" 2>&1)
    rc=$?
    echo "--- $differ: exit $rc"; echo "$output" | grep -i "error" | head -5
    count=$(grep -c "differs from rank 0" <<< "$output")
    check '[ "$rc" -eq 2 ]' "$differ: exit code $rc (want 2)"
    check '[ "$count" -eq 1 ]' "$differ: message printed $count times (want 1)"
    check 'grep -q "rank 1.*$key" <<< "$output"' "$differ: message does not name rank 1 and $key"
    check '! grep -q "iteration 1/" <<< "$output"' "$differ: trained"
  done
elif [ "$case" = stopped ]; then
  dir=$(mktemp -d)
  # Each rank writes its pid, so rank 1 can be stopped once training runs.
  "$mpiexec" --oversubscribe -np 2 bash -c 'echo $$ > '"$dir"'/pid.$OMPI_COMM_WORLD_RANK; exec "$0" "$@"' \
    "$train" $tiny --set training.train_iters=100000 --set training.micro_batch_size=2 --set training.eval_interval=0 --set logging.log_interval=1 \
    --set parallel.distributed_timeout_minutes=0.05 > "$dir/out" 2>&1 &
  launcher=$!
  for _ in $(seq 100); do grep -q "iteration 2/" "$dir/out" 2>/dev/null && break; sleep 0.2; done
  kill -STOP "$(cat "$dir/pid.1")"
  start=$(date +%s)
  # The watchdog holds no pipe of ctest (its orphaned sleep would keep ctest waiting 60 s).
  ( sleep 60; kill -KILL $launcher 2>/dev/null ) >/dev/null 2>&1 & watchdog=$!
  wait $launcher
  rc=$?
  elapsed=$(( $(date +%s) - start ))
  kill $watchdog 2>/dev/null
  kill -KILL "$(cat "$dir/pid.1")" 2>/dev/null
  grep -i "error" "$dir/out" | head -3
  echo "exit $rc after ${elapsed} s"
  check '[ "$rc" -ne 0 ] && [ "$rc" -ne 137 ]' "exit code $rc (want an error, not the watchdog)"
  check '[ "$elapsed" -lt 45 ]' "took ${elapsed} s"
  check 'grep -q "did not complete within 3 s" "$dir/out"' "no message naming the stuck operation"
  rm -rf "$dir"
else
  echo "unknown case $case"; exit 2
fi
exit $fail
