#!/usr/bin/env bash
# Layout parity of the mixture-of-experts GPT (issue 19, acceptance 1): a tiny MoE GPT (8 experts,
# top-2, load-balancing and z-losses, a dense layer between two MoE layers) trained by tessera-train
# on the CPU in fp32 for 20 iterations, dropless: EP=2 x DP=2 (4 ranks), EP=2 (2 ranks), EP=4
# (4 ranks), TP=2 x EP=2 (also with sequence parallelism), PP=2 x EP=2, DP=2 with the distributed optimizer, EP=2 with it, and EP=2
# with selective and with full recomputation (one run of all 3 layers) each
# reproduce the single-rank lm_loss, moe_aux_loss, moe_z_loss and grad_norm within 1e-5 relative,
# every iteration.
# Usage: moe_layout_parity.sh MPIEXEC TESSERA_TRAIN [layout ...]
set -uo pipefail
mpiexec=$1
train=$2
shift 2
check=$(dirname "$0")/../tools/metrics_check.py
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; status=1; }
status=0
common=(--set data.mock_data=true --set data.vocab_size=500 --set model.num_layers=3 --set model.hidden_size=32
  --set model.num_attention_heads=4 --set model.ffn_hidden_size=64 --set model.seq_length=16
  --set model.max_position_embeddings=16 --set model.hidden_dropout=0 --set model.attention_dropout=0
  --set model.num_experts=8 --set model.moe_router_topk=2 --set model.moe_ffn_hidden_size=48
  --set model.moe_layer_freq=2 --set model.moe_aux_loss_coeff=0.01 --set model.moe_z_loss_coeff=0.001
  --set training.micro_batch_size=2 --set training.global_batch_size=16 --set training.train_iters=20
  --set training.device=cpu --set training.precision=\"fp32\" --set training.eval_interval=0
  --set optimizer.lr=2e-3 --set optimizer.lr_warmup_iters=2 --set logging.log_interval=1)
all_layouts=("ep2_dp2 4 --set parallel.expert_model_parallel_size=2"
  "ep2 2 --set parallel.expert_model_parallel_size=2"
  "ep4 4 --set parallel.expert_model_parallel_size=4"
  "tp2_ep2 4 --tp 2 --set parallel.expert_model_parallel_size=2"
  "tp2_sp_ep2 4 --tp 2 --set parallel.sequence_parallel=true --set parallel.expert_model_parallel_size=2"
  "pp2_ep2 4 --pp 2 --set parallel.pipeline_layer_split=\"2,1\" --set parallel.expert_model_parallel_size=2"
  "dp2_distopt 2 --set parallel.use_distributed_optimizer=true"
  "ep2_dp2_distopt 4 --set parallel.expert_model_parallel_size=2 --set parallel.use_distributed_optimizer=true"
  "ep2_dp2_selective 4 --set parallel.expert_model_parallel_size=2 --set parallel.recompute_granularity=\"selective\""
  "ep2_dp2_full 4 --set parallel.expert_model_parallel_size=2 --set parallel.recompute_granularity=\"full\" --set parallel.recompute_num_layers=3")
layouts=()
if [ $# -gt 0 ]; then
  for want in "$@"; do for l in "${all_layouts[@]}"; do [ "${l%% *}" = "$want" ] && layouts+=("$l"); done; done
else
  layouts=("${all_layouts[@]}")
fi
"$mpiexec" --oversubscribe --allow-run-as-root -np 1 "$train" "${common[@]}" \
  --set logging.metrics_file=\"$work/ref.jsonl\" >"$work/ref.log" 2>&1 ||
  { cat "$work/ref.log"; fail "the single-rank run exited non-zero"; exit 1; }
python3 "$check" "$work/ref.jsonl" --iterations 20 --decreasing || fail "the single-rank run"
for layout in "${layouts[@]}"; do
  read -r lname np extra <<<"$layout"
  # shellcheck disable=SC2086
  "$mpiexec" --oversubscribe --allow-run-as-root -np "$np" "$train" "${common[@]}" $extra \
    --set logging.metrics_file=\"$work/$lname.jsonl\" >"$work/$lname.log" 2>&1 ||
    { tail -20 "$work/$lname.log"; fail "$lname: exited non-zero"; continue; }
  if python3 "$check" "$work/$lname.jsonl" --iterations 20 --reference "$work/ref.jsonl" \
    --tolerance lm_loss=1e-5 --tolerance moe_aux_loss=1e-5 --tolerance moe_z_loss=1e-5 --tolerance grad_norm=1e-5; then
    echo "$lname: 20 iterations equal to the single-rank run (lm_loss, moe_aux_loss, moe_z_loss, grad_norm within 1e-5)"
  else
    fail "$lname: differs from the single-rank run"
  fi
done
python3 - "$work/ref.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"lm_loss"' in l]
print(f"  single-rank: lm_loss {rows[0]['lm_loss']:.6f} -> {rows[-1]['lm_loss']:.6f}, "
      f"moe_aux_loss {rows[0]['moe_aux_loss']:.6f} -> {rows[-1]['moe_aux_loss']:.6f}")
PY
# With token dropping (capacity factor 1.0, padded to capacity, a shared expert, sigmoid routing):
# capacity is per micro-batch, so EP=2 x DP=2 drops the same slots as one rank.
dropping=(--set model.moe_expert_capacity_factor=1.0 --set model.moe_pad_expert_input_to_capacity=true
  --set model.moe_shared_expert_intermediate_size=32 --set model.moe_router_score_function=\"sigmoid\")
if [ $# -eq 0 ]; then
  "$mpiexec" --oversubscribe --allow-run-as-root -np 1 "$train" "${common[@]}" "${dropping[@]}" \
    --set logging.metrics_file=\"$work/drop-ref.jsonl\" >"$work/drop-ref.log" 2>&1 || fail "dropping: the single-rank run"
  "$mpiexec" --oversubscribe --allow-run-as-root -np 4 "$train" "${common[@]}" "${dropping[@]}" \
    --set parallel.expert_model_parallel_size=2 --set logging.metrics_file=\"$work/drop-ep2.jsonl\" \
    >"$work/drop-ep2.log" 2>&1 || { tail -20 "$work/drop-ep2.log"; fail "dropping ep2_dp2: exited non-zero"; }
  python3 "$check" "$work/drop-ep2.jsonl" --iterations 20 --reference "$work/drop-ref.jsonl" \
    --tolerance lm_loss=1e-5 --tolerance moe_aux_loss=1e-5 --tolerance grad_norm=1e-5 >"$work/drop.check" 2>&1 ||
    { cat "$work/drop.check"; fail "dropping ep2_dp2 differs from the single-rank run"; }
  python3 - "$work/drop-ref.jsonl" "$work/drop-ep2.jsonl" <<'PY' || fail "dropping: dropped slots differ or none dropped"
import json, sys
def dropped(path):
    return [r["moe_dropped_slots"] for r in map(json.loads, open(path)) if "lm_loss" in r]
ref, ep2 = dropped(sys.argv[1]), dropped(sys.argv[2])
assert ref == ep2, (ref[:2], ep2[:2])
total = sum(sum(d.values()) for d in ref)
assert total > 0, "no slot was dropped"
print(f"dropping ep2_dp2: 20 iterations equal to the single-rank run, the same {total:.0f} slots dropped")
PY
fi
[ $status -eq 0 ] && echo "moe layout parity: ok"
exit $status
