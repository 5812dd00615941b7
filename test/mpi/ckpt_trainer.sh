#!/usr/bin/env bash
# Trainer-level checkpoint scenarios for ckpt_trainer_test (see its header). Usage: MPIEXEC EXE SCENARIO
#   reshard_tp: TP=1 straight 20 (reference); TP=2 x PP=2 trains 1..10 and saves; TP=1 x PP=1 and TP=4
#               resume 11..20; every loss within 1e-5 of the reference
#   reshard_dp: the same with the distributed optimizer saved at DP=2, resumed at DP=4 and DP=1
#   exact_fp32 / exact_bf16: TP=2 x PP=2 x DP=2, distributed optimizer, 20 == 10 + 10 bitwise
#   exact_bf16_pp2_dp2: the same in bf16 at PP=2 x DP=2 (without TP)
#   errors: PP=2 on 2 ranks; a corrupt (one rank's tensor), truncated or missing shard file, and
#           another hidden size: the job fails (no hang) and both ranks print the file's name
set -u
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
MPIRUN="$1 --oversubscribe --allow-run-as-root"
EXE=$2
SCENARIO=$3
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
step() { echo "== $*"; "$@" || fail "$*"; }

TP2PP2="parallel.tensor_model_parallel_size=2 parallel.pipeline_model_parallel_size=2"
DISTOPT="parallel.use_distributed_optimizer=true"
# Dropout masks inside tensor-parallel regions depend on the TP layout (as Megatron's model-parallel
# RNG): runs compared across TP sizes train without dropout. Same-layout resumes keep dropout on.
NODROP="model.hidden_dropout=0 model.attention_dropout=0"
case "$SCENARIO" in
  reshard_tp)
    step $MPIRUN -np 1 $EXE run 20 "$DIR/reference" $NODROP
    step $MPIRUN -np 4 $EXE run 10 "$DIR/saved" $NODROP $TP2PP2 checkpoint.save="$DIR/ckpt"
    step $MPIRUN -np 1 $EXE compare "$DIR/saved" "$DIR/reference" 1e-5
    step $MPIRUN -np 1 $EXE run 20 "$DIR/tp1" $NODROP checkpoint.load="$DIR/ckpt"
    step $MPIRUN -np 1 $EXE compare "$DIR/tp1" "$DIR/reference" 1e-5
    step $MPIRUN -np 4 $EXE run 20 "$DIR/tp4" $NODROP checkpoint.load="$DIR/ckpt" parallel.tensor_model_parallel_size=4
    step $MPIRUN -np 1 $EXE compare "$DIR/tp4" "$DIR/reference" 1e-5
    ;;
  reshard_dp)
    step $MPIRUN -np 1 $EXE run 20 "$DIR/reference" $NODROP
    step $MPIRUN -np 2 $EXE run 10 "$DIR/saved" $NODROP $DISTOPT checkpoint.save="$DIR/ckpt"
    step $MPIRUN -np 1 $EXE compare "$DIR/saved" "$DIR/reference" 1e-5
    step $MPIRUN -np 4 $EXE run 20 "$DIR/dp4" $NODROP $DISTOPT checkpoint.load="$DIR/ckpt"
    step $MPIRUN -np 1 $EXE compare "$DIR/dp4" "$DIR/reference" 1e-5
    step $MPIRUN -np 1 $EXE run 20 "$DIR/dp1" $NODROP $DISTOPT checkpoint.load="$DIR/ckpt"
    step $MPIRUN -np 1 $EXE compare "$DIR/dp1" "$DIR/reference" 1e-5
    step $MPIRUN -np 1 $EXE run 20 "$DIR/dp1_adamw" $NODROP checkpoint.load="$DIR/ckpt"
    step $MPIRUN -np 1 $EXE compare "$DIR/dp1_adamw" "$DIR/reference" 1e-5
    ;;
  exact_fp32)
    step $MPIRUN -np 8 $EXE exact "$DIR/ckpt" $TP2PP2 $DISTOPT
    ;;
  exact_bf16)
    step $MPIRUN -np 8 $EXE exact "$DIR/ckpt" $TP2PP2 $DISTOPT training.precision=bf16
    ;;
  exact_bf16_pp2_dp2)
    step $MPIRUN -np 4 $EXE exact "$DIR/ckpt" parallel.pipeline_model_parallel_size=2 $DISTOPT training.precision=bf16
    ;;
  errors)
    PP2="parallel.pipeline_model_parallel_size=2"
    step $MPIRUN -np 2 $EXE run 2 /dev/null $PP2 checkpoint.save="$DIR/good"
    for damage in corrupt truncated missing; do cp -r "$DIR/good" "$DIR/$damage"; done
    STAGE1=iter_0000002/mp_rank_00_001.h5
    # The model values load from optimizer/main_param (fp32 main params): damage a tensor that is read.
    step $EXE corrupt "$DIR/corrupt/$STAGE1" optimizer/exp_avg/decoder.layers.1.mlp.linear_fc1.weight
    truncate -s $(( $(stat -c %s "$DIR/truncated/$STAGE1") / 2 )) "$DIR/truncated/$STAGE1"
    rm "$DIR/missing/$STAGE1"
    # expect_failure NAME PATTERN args...: the run fails within 60 s and one rank prints PATTERN, once.
    expect_failure() {
      local name=$1 pattern=$2
      shift 2
      local output rc
      output=$(timeout 60 $MPIRUN -np 2 $EXE run 4 /dev/null $PP2 "$@" 2>&1)
      rc=$?
      echo "-- $name (exit code $rc):"
      grep "error:" <<< "$output" | cut -c1-400
      [ "$rc" -ne 0 ] || fail "$name: the run succeeded"
      [ "$rc" -ne 124 ] || fail "$name: the run hung (killed after 60 s)"
      # INTERFACE.md: the message printed once, by the rank that failed (the others exit quietly).
      local count
      count=$(grep "^\[rank [01]\] error:" <<< "$output" | grep -c -- "$pattern")
      [ "$count" -eq 1 ] || fail "$name: an error naming $pattern printed $count times (want 1)"
    }
    expect_failure corrupt "$DIR/corrupt/$STAGE1" checkpoint.load="$DIR/corrupt"
    expect_failure truncated "$DIR/truncated/$STAGE1" checkpoint.load="$DIR/truncated"
    expect_failure missing "$DIR/missing/$STAGE1" checkpoint.load="$DIR/missing"
    expect_failure hidden_size "$DIR/good/iter_0000002/common.h5.*hidden_size = 32" checkpoint.load="$DIR/good" \
      model.hidden_size=64
    ;;
  *) fail "unknown scenario $SCENARIO" ;;
esac
echo "checkpoint trainer scenario $SCENARIO: ok"
