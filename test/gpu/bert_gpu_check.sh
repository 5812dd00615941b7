#!/usr/bin/env bash
# The GPU checks of BERT (issue 16), one run on the GPU machine:
#   1. a bf16 training run of a BERT-base-shaped model (12 layers, hidden 768, 12 heads, seq 512,
#      vocab 30522) on the BERT mock data, 60 iterations: total, lm and sop losses must fall; the
#      tokens/s of the last logged iterations are printed (the note's figure);
#   2. the same with TP=2 + SP when the machine has 2 GPUs (losses must fall).
# The exact GeLU / tanh kernels and the non-causal fused attention with the padding mask run here.
# Usage: bert_gpu_check.sh BIN_DIR [SOURCE_DIR] [OUT_DIR]   (also run by gpu_check.sh ... bert)
# Exit 0 when every step passed, 1 otherwise, 77 without a GPU. Results: OUT/summary.txt.
set -uo pipefail
bin=$(cd "$1" && pwd)
src=${2:-$(cd "$(dirname "$0")/../.." && pwd)}
out=${3:-$(mktemp -d)}
mkdir -p "$out"
if ! nvidia-smi -L >/dev/null 2>&1; then echo "SKIP: no GPU"; exit 77; fi
gpus=$(nvidia-smi -L | grep -c '^GPU')
status=0
step() {  # name command...
  local name=$1
  shift
  local start=$SECONDS
  "$@" >"$out/step.txt" 2>&1
  local rc=$?
  echo "== $name: exit $rc, $((SECONDS - start)) s" | tee -a "$out/summary.txt"
  tail -n 30 "$out/step.txt" | tee -a "$out/summary.txt"
  { echo "== $name"; cat "$out/step.txt"; } >>"$out/log.txt"
  rm -f "$out/step.txt"
  [ $rc -eq 0 ] || status=1
}
train_falls() {  # name ranks overrides...
  local name=$1 ranks=$2
  shift 2
  local work=$out/train_$name
  mkdir -p "$work"
  local launch=()
  [ "$ranks" -gt 1 ] && launch=(mpirun --allow-run-as-root --oversubscribe -np "$ranks")
  "${launch[@]}" "$bin/tessera-train" --set model.architecture=\"bert\" --set data.mock_data=true \
    --set data.vocab_size=30522 --set model.num_layers=12 --set model.hidden_size=768 \
    --set model.num_attention_heads=12 --set model.ffn_hidden_size=3072 --set model.seq_length=512 \
    --set model.max_position_embeddings=512 --set training.micro_batch_size=16 --set training.global_batch_size=32 \
    --set training.train_iters=60 --set training.device=cuda --set training.precision=\"bf16\" \
    --set training.eval_interval=0 --set optimizer.lr=1e-4 --set optimizer.lr_warmup_iters=5 \
    --set logging.log_interval=10 --set "logging.metrics_file=\"$work/metrics.jsonl\"" "$@" || return 1
  python3 - "$work/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"sop_loss"' in l]
first, last = rows[0], rows[-1]
print(f"loss {first['loss']:.4f} -> {last['loss']:.4f}; lm_loss {first['lm_loss']:.4f} -> {last['lm_loss']:.4f}; "
      f"sop_loss {first['sop_loss']:.4f} -> {last['sop_loss']:.4f}; tokens/s {last['tokens_per_second']:.0f}")
sys.exit(0 if last["loss"] < first["loss"] - 0.5 and last["lm_loss"] < first["lm_loss"] else 1)
PY
}
step train_bert_base_bf16 train_falls base 1
if [ "$gpus" -ge 2 ]; then
  step train_bert_base_bf16_tp2_sp train_falls tp2_sp 2 --set parallel.tensor_model_parallel_size=2 \
    --set parallel.sequence_parallel=true
fi
[ $status -eq 0 ] && echo "bert gpu check: ok"
exit $status
