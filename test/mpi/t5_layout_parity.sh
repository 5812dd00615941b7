#!/usr/bin/env bash
# Layout parity of T5 (issue 16): a small T5 (relative position buckets, RMS LayerNorm, encoder
# self-attention with the padding mask, causal decoder self-attention, cross-attention, ReLU
# feed-forward, tied output with d_model^-0.5 scaling) trained by tessera-train on the T5 mock data
# on the CPU in fp32 for 20 iterations: TP=2 with sequence parallelism and DP=2 with the distributed
# optimizer each reproduce the single-rank losses (loss, lm_loss) and grad_norm within 1e-5
# relative, every iteration; the single-rank losses fall. PP=2 is refused with exit code 2 naming
# pipeline_model_parallel_split_rank (Megatron's encoder/decoder split is not supported).
# Usage: t5_layout_parity.sh MPIEXEC TESSERA_TRAIN [layout ...]
set -uo pipefail
mpiexec=$1
train=$2
shift 2
check=$(dirname "$0")/../tools/metrics_check.py
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; status=1; }
status=0
common=(--set model.architecture=\"t5\" --set data.mock_data=true --set data.vocab_size=500
  --set model.num_layers=2 --set model.num_decoder_layers=2 --set model.hidden_size=64
  --set model.num_attention_heads=4 --set model.kv_channels=16 --set model.ffn_hidden_size=128
  --set model.seq_length=32 --set model.decoder_seq_length=16 --set model.max_position_embeddings=32
  --set model.relative_attention_num_buckets=16 --set model.relative_attention_max_distance=32
  --set model.hidden_dropout=0 --set model.attention_dropout=0
  --set training.micro_batch_size=2 --set training.global_batch_size=8 --set training.train_iters=20
  --set training.device=cpu --set training.precision=\"fp32\" --set training.eval_interval=0
  --set optimizer.lr=1e-3 --set optimizer.lr_warmup_iters=2 --set logging.log_interval=1)
all=("tp2_sp 2 --tp 2 --set parallel.sequence_parallel=true"
  "tp2 2 --tp 2"
  "dp2_distopt 2 --set parallel.use_distributed_optimizer=true")
wanted=("$@")
"$mpiexec" --oversubscribe --allow-run-as-root -np 1 "$train" "${common[@]}" \
  --set logging.metrics_file=\"$work/ref.jsonl\" >"$work/ref.log" 2>&1 ||
  { tail -30 "$work/ref.log"; fail "the single-rank run exited non-zero"; exit 1; }
python3 "$check" "$work/ref.jsonl" --iterations 20 --decreasing || fail "the single-rank run"
python3 - "$work/ref.jsonl" <<'PY' || fail "the single-rank run lacks lm_loss / loss, or they do not fall"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"lm_loss"' in l]
assert len(rows) == 20, len(rows)
for r in rows:
    assert abs(r["loss"] - r["lm_loss"]) < 1e-9 * max(1.0, r["loss"]), r
print(f"  single-rank: loss {rows[0]['loss']:.6f} -> {rows[-1]['loss']:.6f}")
assert rows[-1]["loss"] < rows[0]["loss"]
PY
for layout in "${all[@]}"; do
  read -r name np extra <<<"$layout"
  if [ ${#wanted[@]} -gt 0 ] && [[ ! " ${wanted[*]} " == *" $name "* ]]; then continue; fi
  # shellcheck disable=SC2086
  "$mpiexec" --oversubscribe --allow-run-as-root -np "$np" "$train" "${common[@]}" $extra \
    --set logging.metrics_file=\"$work/$name.jsonl\" >"$work/$name.log" 2>&1 ||
    { tail -20 "$work/$name.log"; fail "$name: exited non-zero"; continue; }
  if python3 "$check" "$work/$name.jsonl" --iterations 20 --reference "$work/ref.jsonl" --tolerance loss=1e-5 \
    --tolerance lm_loss=1e-5 --tolerance grad_norm=1e-5; then
    echo "$name: 20 iterations equal to the single-rank run (loss, lm_loss, grad_norm within 1e-5)"
  else
    fail "$name: losses / grad_norm differ from the single-rank run"
  fi
done
# PP=2: refused with exit code 2, naming the missing encoder/decoder split.
"$mpiexec" --oversubscribe --allow-run-as-root -np 2 "$train" "${common[@]}" --pp 2 \
  --set logging.metrics_file=\"\" >"$work/pp2.log" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q "pipeline_model_parallel_split_rank" "$work/pp2.log"; then
  echo "pp2: refused with exit code 2 naming pipeline_model_parallel_split_rank"
else
  tail -5 "$work/pp2.log"
  fail "pp2: expected exit code 2 naming pipeline_model_parallel_split_rank, got $rc"
fi
[ $status -eq 0 ] && echo "t5 layout parity: ok"
exit $status
