#!/usr/bin/env bash
# Parallel layouts on 2 GPUs against 1 GPU, bf16, the same global batch (16 sequences of 64 tokens,
# small GPT on the bundled Austen corpus), 20 iterations of tessera-train: DP=2, DP=2 with the
# distributed optimizer, and TP=2 with sequence parallelism. At every iteration lm_loss within 1e-2
# and grad_norm within 1e-2 relative of the 1-GPU run (parallel_parity_compare.sh states why; a CPU
# test checks that rule on CPU-made metrics files). Exit 77 (skipped) with fewer than 2 GPUs.
# Usage: parallel_parity_test.sh BIN_DIR SOURCE_DIR [MPIEXEC]
set -euo pipefail
bin=$1
src=$2
mpiexec=${3:-mpirun}
source "$(dirname "$0")/austen_run.sh"
require_gpus 2
prepare_austen "$bin" "$src"
common=("${austen_config[@]}"
  --set training.micro_batch_size=8 --set training.global_batch_size=16 --set training.train_iters=20
  --set training.eval_interval=0 --set optimizer.lr_decay_iters=20 --set optimizer.lr_warmup_iters=2
  --set training.device=cuda --set training.precision=bf16 --set logging.log_interval=1)
run() {  # name ranks extra-args...
  local name=$1 ranks=$2
  shift 2
  local launch=("$bin/tessera-train")
  [ "$ranks" -gt 1 ] && launch=("$mpiexec" --allow-run-as-root --oversubscribe -np "$ranks" "$bin/tessera-train")
  "${launch[@]}" "${common[@]}" --set logging.metrics_file="$work/$name.jsonl" "$@" >"$work/$name.log" 2>&1 ||
    { cat "$work/$name.log"; exit 1; }
}
run one_gpu 1
run dp2 2
run dp2_distopt 2 --set parallel.use_distributed_optimizer=true
run tp2_sp 2 --set parallel.tensor_model_parallel_size=2 --set parallel.sequence_parallel=true
for name in one_gpu dp2 dp2_distopt tp2_sp; do grep "training finished" "$work/$name.log"; done
"$(dirname "$0")/parallel_parity_compare.sh" "$work"
