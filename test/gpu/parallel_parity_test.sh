#!/usr/bin/env bash
# Parallel layouts on 2 GPUs against 1 GPU, bf16, the same global batch (16 sequences of 64 tokens,
# small GPT on the bundled Austen corpus), 20 iterations of tessera-train: DP=2, DP=2 with the
# distributed optimizer, and TP=2 with sequence parallelism. lm_loss at every iteration within 1e-2
# relative of the 1-GPU run (bf16 roundings differ where the layouts split GEMMs and reductions;
# fp32 main grads and params keep the runs together). Exit 77 (skipped) with fewer than 2 GPUs.
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
python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
def rows(name):
    return [r for r in map(json.loads, open(f"{work}/{name}.jsonl")) if "lm_loss" in r]
ref = rows("one_gpu")
assert len(ref) == 20, f"1-GPU run logged {len(ref)} iterations"
failed = False
for name in ("dp2", "dp2_distopt", "tp2_sp"):
    got = rows(name)
    assert len(got) == 20, f"{name} logged {len(got)} iterations"
    loss = [abs(g["lm_loss"] - r["lm_loss"]) / abs(r["lm_loss"]) for g, r in zip(got, ref)]
    norm = [abs(g["grad_norm"] - r["grad_norm"]) / abs(r["grad_norm"]) for g, r in zip(got, ref)]
    ok = max(loss) <= 1e-2
    failed |= not ok
    print(f"{name}: lm_loss it20 {got[-1]['lm_loss']:.5f} (1 GPU {ref[-1]['lm_loss']:.5f}); worst relative "
          f"difference lm_loss {max(loss):.2e} (<= 1e-2), grad_norm {max(norm):.2e} (reported) {'ok' if ok else 'FAIL'}")
sys.exit(1 if failed else 0)
PY
