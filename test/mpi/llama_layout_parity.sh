#!/usr/bin/env bash
# Layout parity of the Llama-style decoders (issue 15, acceptance 3): a Llama-style config (RoPE,
# RMSNorm, SwiGLU, GQA with 2 of 4 query groups, untied output layer, no linear biases) and an ALiBi
# config (6 heads, a non-power-of-two count, so a TP rank's slopes are not a prefix of TP=1's;
# LayerNorm, GeLU, tied output layer, biases) trained by tessera-train on the CPU in fp32 for 20
# iterations: TP=2 with sequence parallelism, PP=2, TP=2 x PP=2 and DP=2 each reproduce the
# single-rank lm_loss (and grad_norm) within 1e-5 relative, every iteration.
# Usage: llama_layout_parity.sh MPIEXEC TESSERA_TRAIN [llama|alibi ...]
set -uo pipefail
mpiexec=$1
train=$2
shift 2
configs=("${@:-llama alibi}")
check=$(dirname "$0")/../tools/metrics_check.py
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; status=1; }
status=0
common=(--set data.mock_data=true --set data.vocab_size=1000 --set model.num_layers=4 --set model.seq_length=32
  --set model.max_position_embeddings=32 --set model.hidden_dropout=0 --set model.attention_dropout=0
  --set training.micro_batch_size=2 --set training.global_batch_size=8 --set training.train_iters=20
  --set training.device=cpu --set training.precision=\"fp32\" --set training.eval_interval=0
  --set optimizer.lr=1e-3 --set optimizer.lr_warmup_iters=2 --set logging.log_interval=1)
llama=(--set model.hidden_size=64 --set model.num_attention_heads=4 --set model.num_query_groups=2
  --set model.ffn_hidden_size=96 --set model.position_embedding_type=\"rope\" --set model.rotary_base=500.0
  --set model.normalization=\"rmsnorm\" --set model.activation=\"swiglu\"
  --set model.untie_embeddings_and_output_weights=true --set model.add_bias_linear=false)
alibi=(--set model.hidden_size=48 --set model.num_attention_heads=6 --set model.ffn_hidden_size=96
  --set model.position_embedding_type=\"alibi\")
layouts=("tp2_sp 2 --tp 2 --set parallel.sequence_parallel=true"
  "pp2 2 --pp 2"
  "tp2_pp2 4 --tp 2 --pp 2"
  "dp2 2")
for name in ${configs[*]}; do
  unset -n model 2>/dev/null
  declare -n model=$name
  "$mpiexec" --oversubscribe --allow-run-as-root -np 1 "$train" "${common[@]}" "${model[@]}" \
    --set logging.metrics_file=\"$work/$name-ref.jsonl\" >"$work/$name-ref.log" 2>&1 ||
    { cat "$work/$name-ref.log"; fail "$name: the single-rank run exited $?"; continue; }
  python3 "$check" "$work/$name-ref.jsonl" --iterations 20 --decreasing || fail "$name: the single-rank run"
  for layout in "${layouts[@]}"; do
    read -r lname np extra <<<"$layout"
    # shellcheck disable=SC2086
    "$mpiexec" --oversubscribe --allow-run-as-root -np "$np" "$train" "${common[@]}" "${model[@]}" $extra \
      --set logging.metrics_file=\"$work/$name-$lname.jsonl\" >"$work/$name-$lname.log" 2>&1 ||
      { tail -20 "$work/$name-$lname.log"; fail "$name $lname: exited non-zero"; continue; }
    if python3 "$check" "$work/$name-$lname.jsonl" --iterations 20 --reference "$work/$name-ref.jsonl" \
      --tolerance lm_loss=1e-5 --tolerance grad_norm=1e-5; then
      echo "$name $lname: 20 iterations equal to the single-rank run (lm_loss, grad_norm within 1e-5)"
    else
      fail "$name $lname: lm_loss / grad_norm differ from the single-rank run"
    fi
  done
  python3 - "$work/$name-ref.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"lm_loss"' in l]
print(f"  single-rank lm_loss: iteration 1 {rows[0]['lm_loss']:.6f}, iteration 20 {rows[-1]['lm_loss']:.6f}")
PY
done
[ $status -eq 0 ] && echo "llama layout parity: ok"
exit $status
