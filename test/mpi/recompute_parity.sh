#!/usr/bin/env bash
# Activation recomputation changes memory, not numbers: 20 iterations of tessera-train on the CPU
# (fp32, hidden and attention dropout 0.1) with parallel.recompute_granularity = full (uniform and
# block) and selective give bitwise the same lm_loss and grad_norm sequence (the metrics_file's
# shortest round-trip doubles, compared as text) as the run without recomputation of the same layout
# on the same machine. The layouts are behaviour_baseline.sh's small GPT (the same --set list). The
# reference is run here, not read from test/mpi/behaviour_baseline/*.txt: those sequences were
# recorded on one CPU, and OpenBLAS picks its fp32 kernels by CPU (a Sapphire Rapids runner differs
# from them in the last bits of every iteration, with and without recomputation alike).
# Usage: recompute_parity.sh CASE [BIN_DIR]
#   CASE: single | tp2 | pp2_1f1b | pp2_interleaved | dp2_distopt | tp2_sp_pp2_interleaved (4 ranks)
set -euo pipefail
CASE=${1:?usage: recompute_parity.sh single|tp2|pp2_1f1b|pp2_interleaved|dp2_distopt [BIN_DIR]}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${2:-${TESSERA_BIN_DIR:-$SRC/build/bin}}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
MPIRUN="mpirun --oversubscribe --allow-run-as-root"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# behaviour_baseline.sh's SMALL and COMMON (dropout 0.1 is the default of both dropouts).
SMALL=(--set data.mock_data=true --set data.vocab_size=100 --set model.num_layers=4 --set model.hidden_size=64
       --set model.num_attention_heads=4 --set model.seq_length=32 --set model.max_position_embeddings=32
       --set training.micro_batch_size=2 --set training.global_batch_size=8 --set training.device=cpu
       --set training.eval_interval=0 --set optimizer.lr=1e-3 --set optimizer.lr_warmup_iters=2
       --set optimizer.clip_grad=0.5 --set training.seed=4321)
COMMON=(--set training.train_iters=20 --set logging.log_interval=1)

run() {  # name np args...: WORK/name.txt = "iteration lm_loss grad_norm" per iteration
  local name=$1 np=$2
  shift 2
  local metrics="$WORK/$name.jsonl"
  if ! $MPIRUN -np "$np" "$BIN/tessera-train" "${SMALL[@]}" "$@" "${COMMON[@]}" \
      --set logging.metrics_file="$metrics" >"$WORK/$name.log" 2>&1; then
    tail -20 "$WORK/$name.log"
    echo "FAIL: $name did not train"
    exit 1
  fi
  grep '"lm_loss"' "$metrics" | sed -E 's/.*"grad_norm":([^,}]*).*"iteration":([^,}]*).*"lm_loss":([^,}]*).*/\2 \3 \1/' \
    >"$WORK/$name.txt"
  [ "$(wc -l <"$WORK/$name.txt")" -eq 20 ] || { echo "FAIL: $name logged $(wc -l <"$WORK/$name.txt") iterations"; exit 1; }
}

full_uniform() { echo --set parallel.recompute_granularity=full --set parallel.recompute_method=uniform \
  --set parallel.recompute_num_layers="$1"; }
full_block() { echo --set parallel.recompute_granularity=full --set parallel.recompute_method=block \
  --set parallel.recompute_num_layers="$1"; }
selective=(--set parallel.recompute_granularity=selective)

case "$CASE" in
  single)
    layout=(); np=1
    variants=("full_uniform_2:$(full_uniform 2)" "full_block_1:$(full_block 1)" "full_uniform_4:$(full_uniform 4)") ;;
  tp2) layout=(--set parallel.tensor_model_parallel_size=2); np=2
    variants=("full_uniform_1:$(full_uniform 1)") ;;
  pp2_1f1b) layout=(--set parallel.pipeline_model_parallel_size=2); np=2
    variants=("full_block_1:$(full_block 1)" "full_uniform_2:$(full_uniform 2)") ;;
  pp2_interleaved) layout=(--set parallel.pipeline_model_parallel_size=2 --set parallel.num_layers_per_virtual_pipeline_stage=1)
    np=2; variants=("full_uniform_1:$(full_uniform 1)") ;;
  dp2_distopt) layout=(--set parallel.use_distributed_optimizer=true); np=2
    variants=("full_uniform_2:$(full_uniform 2)") ;;
  tp2_sp_pp2_interleaved)  # the issue's layout, with interleaving
    layout=(--set parallel.tensor_model_parallel_size=2 --set parallel.sequence_parallel=true
            --set parallel.pipeline_model_parallel_size=2 --set parallel.num_layers_per_virtual_pipeline_stage=1)
    np=4
    variants=("full_uniform_1:$(full_uniform 1)") ;;
  *) echo "unknown case '$CASE'"; exit 2 ;;
esac
run none "$np" "${layout[@]}"
reference="$WORK/none.txt"

status=0
check() {  # name
  if diff "$reference" "$WORK/$1.txt" >"$WORK/$1.diff"; then
    echo "BITWISE EQUAL $CASE $1: 20 iterations of lm_loss and grad_norm (last: $(tail -1 "$WORK/$1.txt"))"
  else
    echo "DIFFERENT $CASE $1 (without recomputation < > with; iteration lm_loss grad_norm):"
    cat "$WORK/$1.diff"
    status=1
  fi
}
for v in "${variants[@]}"; do
  name=${v%%:*}
  # shellcheck disable=SC2206
  sets=(${v#*:})
  run "$name" "$np" "${layout[@]}" "${sets[@]}"
  grep -q "recompute_granularity = \"full\"" "$WORK/$name.log" || { echo "FAIL: $name did not run with full recomputation"; exit 1; }
  check "$name"
done
run selective "$np" "${layout[@]}" "${selective[@]}"
check selective
[ $status -eq 0 ] && echo "recompute parity $CASE: every variant bitwise equal to the run without recomputation"
exit $status
