#!/usr/bin/env bash
# The GPU checks of the mixture-of-experts layer (issue 19, acceptance 3), one run on the GPU machine:
#   1. gpu_moe_ops_parity_test: CUDA router / counts / permutation / combine (+ backwards) vs the CPU;
#   2. tiny MoE GPTs, 20 iterations, GPU fp32 against CPU fp32: lm_loss, moe_aux_loss and moe_z_loss
#      within 1e-4 relative at every iteration, in three router setups (softmax top-2 + aux + z loss;
#      sigmoid top-2, capacity 1.0 padded, shared expert, SwiGLU, every other layer MoE; pre-softmax
#      top-1 with token dropping); the first one also in bf16 (lm_loss within 5e-2) and twice in fp32
#      (bitwise the same metrics with training.deterministic_mode);
#   3. compute-sanitizer memcheck over 3 iterations of the tiny bf16 model (when the tool is there);
#   3b. the first two tiny setups again with the experts as grouped GEMMs (TESSERA_MOE_GROUPED_GEMM=1);
#   4. share/configs/bench/moe-8x-top2.toml (8 experts, top-2, 12 x 768, expert FFN 3072, seq 1024,
#      micro-batch 8, bf16): tokens/s, MFU by active parameters, peak memory; then again with
#      TESSERA_MOE_TIMING=1 for the MoE sub-step times (routing, permutation, experts); both again
#      with the grouped-GEMM experts.
# Usage: moe_gpu_check.sh BIN_DIR SOURCE_DIR OUT_DIR
# Exit 0 when every step passed, 1 otherwise, 77 without a GPU. Results: OUT/summary.txt, OUT/bench.jsonl.
set -uo pipefail
bin=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
out=$3
mkdir -p "$out"
out=$(cd "$out" && pwd)
if ! nvidia-smi -L >/dev/null 2>&1; then echo "SKIP: no GPU"; exit 77; fi
status=0
step() {  # name command...
  local name=$1
  shift
  local start=$SECONDS
  "$@" >"$out/step.txt" 2>&1
  local rc=$?
  echo "== $name: exit $rc, $((SECONDS - start)) s" | tee -a "$out/summary.txt"
  tail -n 25 "$out/step.txt" | tee -a "$out/summary.txt"
  grep '^{"benchmark"' "$out/step.txt" >>"$out/bench.jsonl" || true
  mv "$out/step.txt" "$out/$name.txt"
  [ $rc -eq 0 ] || status=1
}
check=$src/test/tools/metrics_check.py
tiny=$out/tiny-moe.toml
cat >"$tiny" <<'TOML'
[model]
num_layers = 2
hidden_size = 64
num_attention_heads = 4
seq_length = 64
max_position_embeddings = 64
hidden_dropout = 0.0
attention_dropout = 0.0
num_experts = 4
moe_router_topk = 2
moe_aux_loss_coeff = 1.0e-2
moe_z_loss_coeff = 1.0e-3
[training]
micro_batch_size = 4
global_batch_size = 8
train_iters = 20
eval_interval = 0
seed = 1234
[optimizer]
lr = 1.0e-3
min_lr = 1.0e-4
lr_warmup_iters = 2
[data]
mock_data = true
vocab_size = 256
[logging]
log_interval = 1
TOML
train() {  # name device precision overrides...
  local name=$1 device=$2 precision=$3
  shift 3
  "$bin/tessera-train" --config "$tiny" --set training.device=\"$device\" --set training.precision=\"$precision\" \
    --set "logging.metrics_file=\"$out/$name.jsonl\"" "$@" >"$out/$name.log" 2>&1 ||
    { tail -n 30 "$out/$name.log"; return 1; }
  grep -m1 "training finished\|iteration *20" "$out/$name.log" || true
}
loss_parity() {  # name overrides...
  local name=$1
  shift
  train "${name}_cpu" cpu fp32 "$@" || return 1
  train "${name}_gpu_fp32" cuda fp32 "$@" || return 1
  python3 "$check" "$out/${name}_gpu_fp32.jsonl" --iterations 20 --reference "$out/${name}_cpu.jsonl" \
    --tolerance lm_loss=1e-4 --tolerance moe_aux_loss=1e-4 --tolerance moe_z_loss=1e-4
}
setup_b=(--set model.num_layers=4 --set model.moe_layer_freq=2 --set model.moe_router_score_function=\"sigmoid\"
  --set model.moe_expert_capacity_factor=1.0 --set model.moe_pad_expert_input_to_capacity=true
  --set model.moe_shared_expert_intermediate_size=96 --set model.activation=\"swiglu\")
setup_c=(--set model.num_experts=8 --set model.moe_router_topk=1 --set model.moe_router_pre_softmax=true
  --set model.moe_expert_capacity_factor=1.25)

step moe_ops_parity "$bin/gpu_moe_ops_parity_test"
step loss_parity_softmax_top2 loss_parity a
# the benchmark early: the figures matter most if the run is cut short
cfg=$src/share/configs/bench/moe-8x-top2.toml
step bench_moe_8x_top2 "$bin/tessera-bench" train --config "$cfg"
step bench_moe_8x_top2_timing env TESSERA_MOE_TIMING=1 "$bin/tessera-bench" train --config "$cfg" \
  --set training.train_iters=12 --set optimizer.lr_decay_iters=12 --label moe-8x-top2-timed
grep '\[moe timing\]' "$out/bench_moe_8x_top2_timing.txt" | tee -a "$out/summary.txt"
step loss_parity_sigmoid_capacity_shared loss_parity b "${setup_b[@]}"
step loss_parity_presoftmax_top1_dropping loss_parity c "${setup_c[@]}"
bf16_and_determinism() {
  train a_gpu_bf16 cuda bf16 || return 1
  python3 "$check" "$out/a_gpu_bf16.jsonl" --iterations 20 --reference "$out/a_cpu.jsonl" --tolerance lm_loss=5e-2 ||
    return 1
  # training.deterministic_mode: the dense ops' reductions too (the MoE kernels have no float atomics)
  train a_gpu_fp32_det1 cuda fp32 --set training.deterministic_mode=true || return 1
  train a_gpu_fp32_det2 cuda fp32 --set training.deterministic_mode=true || return 1
  python3 - "$out/a_gpu_fp32_det1.jsonl" "$out/a_gpu_fp32_det2.jsonl" <<'PY'
import json, sys
def rows(p):
    return [{k: r.get(k) for k in ("iteration", "lm_loss", "grad_norm", "moe_aux_loss", "moe_z_loss")}
            for r in map(json.loads, open(p)) if "lm_loss" in r]
a, b = rows(sys.argv[1]), rows(sys.argv[2])
print(f"two GPU fp32 runs: {len(a)} rows, identical: {a == b}")
sys.exit(0 if a == b and len(a) == 20 else 1)
PY
}
step bf16_and_determinism bf16_and_determinism
# The experts as grouped GEMMs (TESSERA_MOE_GROUPED_GEMM=1) against the same CPU runs.
grouped_parity() {  # name overrides...
  local name=$1
  shift
  TESSERA_MOE_GROUPED_GEMM=1 train "${name}_gpu_fp32_grouped" cuda fp32 "$@" || return 1
  python3 "$check" "$out/${name}_gpu_fp32_grouped.jsonl" --iterations 20 --reference "$out/${name}_cpu.jsonl" \
    --tolerance lm_loss=1e-4 --tolerance moe_aux_loss=1e-4 --tolerance moe_z_loss=1e-4
}
step grouped_gemm_loss_parity_softmax_top2 grouped_parity a
step grouped_gemm_loss_parity_sigmoid_capacity_shared grouped_parity b "${setup_b[@]}"
step bench_moe_8x_top2_grouped env TESSERA_MOE_GROUPED_GEMM=1 "$bin/tessera-bench" train --config "$cfg" \
  --label moe-8x-top2-grouped-gemm
step bench_moe_8x_top2_grouped_timing env TESSERA_MOE_GROUPED_GEMM=1 TESSERA_MOE_TIMING=1 "$bin/tessera-bench" train \
  --config "$cfg" --set training.train_iters=12 --set optimizer.lr_decay_iters=12 --label moe-8x-top2-grouped-timed
grep '\[moe timing\]\|\[moe\] cublas' "$out/bench_moe_8x_top2_grouped_timing.txt" | tee -a "$out/summary.txt"
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [ -n "$sanitizer" ]; then
  step memcheck_tiny_bf16 timeout 60 "$sanitizer" --tool memcheck --report-api-errors no --error-exitcode 3 "$bin/tessera-train" \
    --config "$tiny" --set training.device=\"cuda\" --set training.precision=\"bf16\" --set training.train_iters=3 \
    "${setup_b[@]}"
fi
echo "moe gpu check: $([ $status -eq 0 ] && echo PASSED || echo FAILED) (results in $out)" | tee -a "$out/summary.txt"
exit $status
