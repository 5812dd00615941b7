#!/usr/bin/env bash
# The GPU checks of T5 (issue 16), one run on the GPU machine:
#   1. gpu_t5_ops_parity_test: CUDA biased attention (self / cross, causal, padding, dropout, bias
#      gradient), the relative position bias, ReLU and GeGLU against the CPU reference (f32, bf16);
#   2. a bf16 training run of a T5-base-shaped model (12 + 12 layers, d_model 768, 12 heads, d_kv 64,
#      d_ff 3072, vocabulary 32128, encoder 512 / decoder 128 tokens) on the T5 mock data: the loss
#      must fall; the tokens/s of the last logged iterations are printed (the note's figure).
# Usage: t5_gpu_check.sh BIN_DIR [OUT_DIR] [ITERATIONS]
# Exit 0 when every step passed, 1 otherwise, 77 without a GPU. Results: OUT/summary.txt.
set -uo pipefail
bin=$(cd "$1" && pwd)
out=${2:-$(mktemp -d)}
iters=${3:-40}
mkdir -p "$out"
if ! nvidia-smi -L >/dev/null 2>&1; then echo "SKIP: no GPU"; exit 77; fi
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
train_t5_base() {
  local work=$out/train_t5_base
  mkdir -p "$work"
  timeout 200 "$bin/tessera-train" --set model.architecture=\"t5\" --set data.mock_data=true \
    --set data.vocab_size=32128 --set model.num_layers=12 --set model.num_decoder_layers=12 \
    --set model.hidden_size=768 --set model.num_attention_heads=12 --set model.kv_channels=64 \
    --set model.ffn_hidden_size=3072 --set model.seq_length=512 --set model.decoder_seq_length=128 \
    --set model.max_position_embeddings=512 --set model.hidden_dropout=0.1 --set model.attention_dropout=0.1 \
    --set training.micro_batch_size=16 --set training.global_batch_size=32 \
    --set training.train_iters="$iters" --set training.device=cuda --set training.precision=\"bf16\" \
    --set training.eval_interval=0 --set optimizer.lr=1e-4 --set optimizer.lr_warmup_iters=5 \
    --set logging.log_interval=5 --set "logging.metrics_file=\"$work/metrics.jsonl\"" || return 1
  python3 - "$work/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"lm_loss"' in l and '"tokens_per_second"' in l]
first, last = rows[0], rows[-1]
tail = rows[len(rows) // 2:]
tps = sum(r["tokens_per_second"] for r in tail) / len(tail)
# The trainer counts global_batch x model.seq_length (encoder tokens) per second.
print(f"t5-base bf16: loss {first['loss']:.4f} -> {last['loss']:.4f}; encoder tokens/s {tps:.0f} (mean of the last "
      f"{len(tail)} logs); encoder + decoder tokens/s {tps * (512 + 128) / 512:.0f}")
sys.exit(0 if last["loss"] < first["loss"] else 1)
PY
}
step t5_ops_parity "$bin/gpu_t5_ops_parity_test"
step train_t5_base_bf16 train_t5_base
[ $status -eq 0 ] && echo "t5 gpu check: ok"
exit $status
