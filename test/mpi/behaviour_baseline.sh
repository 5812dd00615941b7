#!/usr/bin/env bash
# Behaviour baseline: 20 iterations of tessera-train on the CPU for the quickstart config and for
# TP=2, PP=2 (1F1B), PP=2 (interleaved) and DP=2 with the distributed optimizer; the lm_loss and
# grad_norm of every iteration (the metrics_file JSON lines, shortest round-trip doubles) are
# compared as text with the sequences recorded before the architecture refactor (issue 14), so
# "equal" means bitwise equal in fp32. The recorded sequences hold on the CPU they were recorded on:
# OpenBLAS chooses its fp32 kernels by CPU, and on another (e.g. Sapphire Rapids) the last bits differ.
# Usage: behaviour_baseline.sh compare|record [BIN_DIR] [REFERENCE_DIR]
#   compare: runs every case and diffs it against REFERENCE_DIR/<case>.txt (exit 1 on any difference)
#   record:  writes REFERENCE_DIR/<case>.txt
set -euo pipefail
MODE=${1:?usage: behaviour_baseline.sh compare|record [BIN_DIR] [REFERENCE_DIR]}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${2:-${TESSERA_BIN_DIR:-$SRC/build/bin}}
REF=${3:-$SRC/test/mpi/behaviour_baseline}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
MPIRUN="mpirun --oversubscribe --allow-run-as-root"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cd "$SRC"

# The quickstart corpus, preprocessed once per work folder (as quickstart.sh does).
mkdir -p "$WORK/data"
DATA="$WORK/data/austen"
"$BIN/tessera-preprocess" --input share/data/austen/austen.jsonl --output-prefix "$DATA" --json-keys text \
  --tokenizer-type GPT2BPETokenizer --vocab-file share/tokenizers/gpt2/vocab.json \
  --merge-file share/tokenizers/gpt2/merges.txt --append-eod --workers 2 >"$WORK/preprocess.log" 2>&1 ||
  { cat "$WORK/preprocess.log"; exit 1; }

# A small GPT on mock data with dropout on (the same layout draws the same masks).
SMALL=(--set data.mock_data=true --set data.vocab_size=100 --set model.num_layers=4 --set model.hidden_size=64
       --set model.num_attention_heads=4 --set model.seq_length=32 --set model.max_position_embeddings=32
       --set training.micro_batch_size=2 --set training.global_batch_size=8 --set training.device=cpu
       --set training.eval_interval=0 --set optimizer.lr=1e-3 --set optimizer.lr_warmup_iters=2
       --set optimizer.clip_grad=0.5 --set training.seed=4321)
COMMON=(--set training.train_iters=20 --set logging.log_interval=1)

run_case() {  # name np args...
  local name=$1 np=$2
  shift 2
  local metrics="$WORK/$name.jsonl"
  if ! $MPIRUN -np "$np" "$BIN/tessera-train" "$@" "${COMMON[@]}" --set logging.metrics_file="$metrics" \
      >"$WORK/$name.log" 2>&1; then
    tail -20 "$WORK/$name.log"
    echo "FAIL: $name did not train"
    return 1
  fi
  grep '"lm_loss"' "$metrics" | sed -E 's/.*"grad_norm":([^,}]*).*"iteration":([^,}]*).*"lm_loss":([^,}]*).*/\2 \3 \1/' \
    >"$WORK/$name.txt"
  [ "$(wc -l <"$WORK/$name.txt")" -eq 20 ] || { echo "FAIL: $name logged $(wc -l <"$WORK/$name.txt") iterations"; return 1; }
}

run_case quickstart 1 --config share/configs/quickstart.toml --set "data.data_path=[\"${DATA}_text_document\"]"
run_case tp2 2 "${SMALL[@]}" --set parallel.tensor_model_parallel_size=2
run_case pp2_1f1b 2 "${SMALL[@]}" --set parallel.pipeline_model_parallel_size=2
run_case pp2_interleaved 2 "${SMALL[@]}" --set parallel.pipeline_model_parallel_size=2 \
  --set parallel.num_layers_per_virtual_pipeline_stage=1
run_case dp2_distopt 2 "${SMALL[@]}" --set parallel.use_distributed_optimizer=true

status=0
for name in quickstart tp2 pp2_1f1b pp2_interleaved dp2_distopt; do
  if [ "$MODE" = record ]; then
    mkdir -p "$REF"
    cp "$WORK/$name.txt" "$REF/$name.txt"
    echo "recorded $name: $(head -1 "$REF/$name.txt") ... $(tail -1 "$REF/$name.txt")"
  elif diff "$REF/$name.txt" "$WORK/$name.txt" >"$WORK/$name.diff"; then
    echo "BITWISE EQUAL $name (20 iterations of lm_loss and grad_norm; last: $(tail -1 "$WORK/$name.txt"))"
  else
    echo "DIFFERENT $name (reference < > this build; iteration lm_loss grad_norm):"
    cat "$WORK/$name.diff"
    status=1
  fi
done
[ "$MODE" = record ] || { [ $status -eq 0 ] && echo "behaviour baseline: all 5 cases bitwise equal"; }
exit $status
