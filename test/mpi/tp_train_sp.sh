#!/usr/bin/env bash
# tessera-train end to end on a TP=2 + sequence-parallel layout (2 ranks) against the same config at
# TP=1 (1 rank): both exit 0; the TP=2 run prints the parameter count of each (tensor, pipeline) rank
# (85312 of the 167680-parameter model on each) and its metrics_file holds iterations 1..4, each with
# a finite lm_loss and grad_norm within 1e-5 relative of the TP=1 run's. Dropout is off: its masks
# inside tensor-parallel regions depend on the TP layout (as Megatron's model-parallel RNG).
# Usage: tp_train_sp.sh MPIEXEC TESSERA_TRAIN
set -uo pipefail
mpiexec=$1
train=$2
check=$(dirname "$0")/../tools/metrics_check.py
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(--set data.mock_data=true --set data.vocab_size=1000 --set model.num_layers=2
  --set model.hidden_size=64 --set model.num_attention_heads=4 --set model.seq_length=32
  --set model.max_position_embeddings=32 --set model.hidden_dropout=0 --set model.attention_dropout=0
  --set training.micro_batch_size=2 --set training.global_batch_size=4 --set training.train_iters=4
  --set training.device=cpu --set training.eval_interval=0 --set optimizer.lr_warmup_iters=1
  --set logging.log_interval=1)
fail() { echo "FAIL: $*"; exit 1; }
"$mpiexec" --oversubscribe --allow-run-as-root -np 1 "$train" "${common[@]}" \
  --set logging.metrics_file="$work/tp1.jsonl" >"$work/tp1.log" 2>&1
rc=$?
[ $rc -eq 0 ] || { cat "$work/tp1.log"; fail "the TP=1 run exited $rc"; }
"$mpiexec" --oversubscribe --allow-run-as-root -np 2 "$train" "${common[@]}" --tp 2 \
  --set parallel.sequence_parallel=true --set logging.metrics_file="$work/tp2_sp.jsonl" >"$work/tp2_sp.log" 2>&1
rc=$?
cat "$work/tp2_sp.log"
[ $rc -eq 0 ] || fail "the TP=2 + SP run exited $rc"
for rank in 0 1; do
  grep -q "number of parameters on (tensor, pipeline) model parallel rank ($rank, 0): 85312$" "$work/tp2_sp.log" ||
    fail "no parameter count 85312 for (tensor, pipeline) rank ($rank, 0)"
done
python3 "$check" "$work/tp2_sp.jsonl" --iterations 4 --reference "$work/tp1.jsonl" \
  --tolerance lm_loss=1e-5 --tolerance grad_norm=1e-5 || fail "the metrics of the TP=2 + SP or the TP=1 run"
echo "tp2 + sequence parallel: trained 4 iterations, equal to TP=1"
