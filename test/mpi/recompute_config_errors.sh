#!/usr/bin/env bash
# parallel.recompute_num_layers is checked against the layers of every pipeline stage (and model
# chunk with interleaving): 4 layers over PP=2 give 2 per stage, so recompute_num_layers = 3 exits 2
# on every rank naming the key and the stage; 2 trains; with interleaving (1 layer per chunk), 2
# exits 2 naming the chunk.
# Usage: recompute_config_errors.sh MPIEXEC TESSERA_TRAIN
set -uo pipefail
mpiexec=$1
train=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
small=(--set data.mock_data=true --set data.vocab_size=10 --set model.num_layers=4 --set model.hidden_size=16
  --set model.num_attention_heads=2 --set model.seq_length=8 --set model.max_position_embeddings=8
  --set training.micro_batch_size=1 --set training.global_batch_size=2 --set training.train_iters=1
  --set training.device=cpu --set training.eval_interval=0 --set optimizer.lr_warmup_iters=0
  --set parallel.pipeline_model_parallel_size=2
  --set parallel.recompute_granularity=full --set parallel.recompute_method=block)
fail() { echo "FAIL: $*"; exit 1; }
run() {  # name args...
  local name=$1
  shift
  timeout 120 "$mpiexec" --oversubscribe --allow-run-as-root -np 2 "$train" "${small[@]}" "$@" >"$work/$name.log" 2>&1
  echo $?
}
rc=$(run too_many --set parallel.recompute_num_layers=3)
[ "$rc" -eq 2 ] || { cat "$work/too_many.log"; fail "recompute_num_layers = 3 over 2 layers per stage exited $rc, not 2"; }
grep -q "parallel.recompute_num_layers = 3 is larger than the 2 layers of pipeline stage 0 model chunk 0" \
  "$work/too_many.log" || { cat "$work/too_many.log"; fail "the message does not name the key and the stage"; }
rc=$(run fits --set parallel.recompute_num_layers=2)
[ "$rc" -eq 0 ] || { cat "$work/fits.log"; fail "recompute_num_layers = 2 over 2 layers per stage exited $rc"; }
grep -q "iteration 1/1" "$work/fits.log" || fail "recompute_num_layers = 2 did not train"
rc=$(run interleaved --set parallel.recompute_num_layers=2 --set parallel.num_layers_per_virtual_pipeline_stage=1)
[ "$rc" -eq 2 ] || { cat "$work/interleaved.log"; fail "recompute_num_layers = 2 over 1-layer chunks exited $rc"; }
grep -q "parallel.recompute_num_layers = 2 is larger than the 1 layers of pipeline stage 0 model chunk 0" \
  "$work/interleaved.log" || { cat "$work/interleaved.log"; fail "the interleaved message does not name the chunk"; }
echo "recompute config errors: exit 2 naming parallel.recompute_num_layers and the stage / chunk"
