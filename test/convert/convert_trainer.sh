#!/usr/bin/env bash
# tessera-convert with tessera-train. Usage: MPIEXEC BIN_DIR SCENARIO
#   reshard_tp:      TP=2 trains 10 iterations and saves; resuming it at TP=1 (reshard on load) and
#                    resuming `tessera-convert reshard` of it at TP=1 give the same 5 lm_loss values
#   reshard_distopt: the same for DP=2 with the distributed optimizer, resharded offline to DP=1
#   pretrained_hf:   checkpoint.pretrained_hf = the HF GPT-2 fixture gives the same losses as
#                    import-hf + checkpoint.load with finetune (no model keys repeated), and not the
#                    losses of a random initialisation
#   shared_ranks:    import-hf (the HF GPT-2 fixture, TP=2 x PP=2) and reshard (a DP=2 distributed-
#                    optimizer checkpoint to TP=2 x PP=2 x DP=2) under mpirun -np 3, ranks sharing the
#                    files, write the same files as one process, equal by h5diff
#   mixtral_ep:      import-hf of the HF Mixtral fixture (test/fixtures/hf/mixtral) at EP=2 writes
#                    mp_rank_00_000_000 / _001 (inspect shows EP=2 and the experts' files; TP=2 x EP=2
#                    under mpirun -np 3 writes the same files as one process); finetuning
#                    from it at EP=2 x DP=2 gives the same losses as from the EP=1 import and as
#                    checkpoint.pretrained_hf; that run's EP=2 checkpoint exports to Mixtral and,
#                    re-imported at EP=2, evaluates to the same loss; the EP=2 import also loads on
#                    one rank (EP=1); EP=3 exits 2
# Prints "convert_trainer SCENARIO: ok" only when every check passed.
set -u
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
MPIRUN="$1 --oversubscribe --allow-run-as-root"
BIN=$2
SCENARIO=$3
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
step() { echo "== $*"; "$@" >"$DIR/step.log" 2>&1 || { cat "$DIR/step.log"; fail "$*"; }; }
losses() { grep -o '"lm_loss":[^,}]*' "$1" | cut -d: -f2; }
same_losses() {  # FILE_A FILE_B COUNT
  local a b
  a=$(losses "$1")
  b=$(losses "$2")
  [ "$(echo "$a" | grep -c .)" -eq "$3" ] || fail "$1 has $(echo "$a" | grep -c .) lm_loss values, expected $3"
  [ "$a" = "$b" ] || fail "lm_loss differs: $1 vs $2: $(paste -d' ' <(echo "$a") <(echo "$b") | tr '\n' ';')"
  echo "same $3 lm_loss values: $(echo "$a" | tr '\n' ' ')"
}
cat >"$DIR/tiny.toml" <<TOML
[model]
num_layers = 2
hidden_size = 32
num_attention_heads = 4
seq_length = 16
max_position_embeddings = 16
[training]
micro_batch_size = 2
global_batch_size = 4
train_iters = 10
eval_interval = 0
device = "cpu"
[optimizer]
lr = 1.0e-3
min_lr = 1.0e-4
lr_warmup_iters = 2
[data]
mock_data = true
vocab_size = 96
[logging]
log_interval = 1
TOML
train() { step "$@" --config "$DIR/tiny.toml"; }

case "$SCENARIO" in
  reshard_tp | reshard_distopt)
    if [ "$SCENARIO" = reshard_tp ]; then
      SAVE_LAYOUT=(--set parallel.tensor_model_parallel_size=2)
      RESUME=(--set parallel.tensor_model_parallel_size=1)
      OFFLINE=(--tensor-model-parallel-size 1)
    else
      SAVE_LAYOUT=(--set parallel.use_distributed_optimizer=true)
      RESUME=(--set parallel.use_distributed_optimizer=true)
      OFFLINE=(--data-parallel-size 1)
    fi
    train $MPIRUN -np 2 "$BIN/tessera-train" "${SAVE_LAYOUT[@]}" --set checkpoint.save="$DIR/ckpt" \
      --set logging.metrics_file="$DIR/first.jsonl"
    train "$BIN/tessera-train" "${RESUME[@]}" --set training.train_iters=15 --set checkpoint.load="$DIR/ckpt" \
      --set logging.metrics_file="$DIR/on_load.jsonl"
    step "$BIN/tessera-convert" reshard --input "$DIR/ckpt" --output "$DIR/offline" "${OFFLINE[@]}"
    step "$BIN/tessera-convert" inspect "$DIR/offline"
    grep -q "TP=1 PP=1 DP=1" "$DIR/step.log" || fail "inspect does not show the TP=1 x PP=1 x DP=1 layout"
    train "$BIN/tessera-train" "${RESUME[@]}" --set training.train_iters=15 --set checkpoint.load="$DIR/offline" \
      --set logging.metrics_file="$DIR/offline.jsonl"
    grep -q '"iteration":11' "$DIR/offline.jsonl" || fail "the offline-resharded run did not resume at iteration 11"
    same_losses "$DIR/on_load.jsonl" "$DIR/offline.jsonl" 5
    if [ "$SCENARIO" = reshard_distopt ]; then
      # Re-split offline over DP=2 (distrib_optim files written by the converter), resumed at DP=2.
      step "$BIN/tessera-convert" reshard --input "$DIR/offline" --output "$DIR/offline_dp2" --data-parallel-size 2 \
        --use-distributed-optimizer
      [ -f "$DIR/offline_dp2/iter_0000010/distrib_optim_00_000_001.h5" ] || fail "no distributed-optimizer file for DP rank 1"
      train $MPIRUN -np 2 "$BIN/tessera-train" "${RESUME[@]}" --set training.train_iters=15 \
        --set checkpoint.load="$DIR/ckpt" --set logging.metrics_file="$DIR/on_load_dp2.jsonl"
      train $MPIRUN -np 2 "$BIN/tessera-train" "${RESUME[@]}" --set training.train_iters=15 \
        --set checkpoint.load="$DIR/offline_dp2" --set logging.metrics_file="$DIR/offline_dp2.jsonl"
      same_losses "$DIR/on_load_dp2.jsonl" "$DIR/offline_dp2.jsonl" 5
    fi
    ;;
  pretrained_hf)
    HF=${TESSERA_SHARED_DIR:-/work/shared}/fixtures/hf/gpt2/hf
    if [ ! -f "$HF/model.safetensors" ]; then
      [ -n "${TESSERA_SHARED_DIR:-}${CI:-}" ] && fail "HF fixture missing: $HF"
      echo "convert_trainer $SCENARIO: ok (skipped: no fixture at $HF)"
      exit 0
    fi
    field() { grep -o "\"$1\": *[0-9]*" "$HF/config.json" | grep -o '[0-9]*$'; }
    LAYERS=$(field n_layer) HIDDEN=$(field n_embd) HEADS=$(field n_head) POSITIONS=$(field n_positions)
    VOCAB=$(field vocab_size)
    TP=1
    [ $((HEADS % 2)) -eq 0 ] && TP=2
    # No model keys in the config: they come from the HF config.json / the stored config.
    cat >"$DIR/bare.toml" <<TOML
[training]
micro_batch_size = 2
global_batch_size = 4
train_iters = 3
eval_interval = 0
device = "cpu"
[optimizer]
lr = 1.0e-3
min_lr = 1.0e-4
lr_warmup_iters = 2
[data]
mock_data = true
vocab_size = $VOCAB
[logging]
log_interval = 1
TOML
    bare() { step "$@" --config "$DIR/bare.toml" --set model.seq_length=16; }
    bare "$BIN/tessera-train" --set checkpoint.pretrained_hf="$HF" --set checkpoint.save="$DIR/one" \
      --set logging.metrics_file="$DIR/one_step.jsonl"
    grep -q "pretrained_hf" "$DIR/step.log" || fail "no import logged"
    [ -f "$DIR/one/pretrained_hf/latest_checkpointed_iteration.txt" ] || fail "no imported checkpoint"
    step "$BIN/tessera-convert" import-hf --input "$HF" --output "$DIR/imported" --tensor-model-parallel-size $TP
    bare "$BIN/tessera-train" --set checkpoint.load="$DIR/imported" --set checkpoint.finetune=true \
      --set logging.metrics_file="$DIR/two_step.jsonl"
    same_losses "$DIR/one_step.jsonl" "$DIR/two_step.jsonl" 3
    bare "$BIN/tessera-train" --set model.num_layers=$LAYERS --set model.hidden_size=$HIDDEN \
      --set model.num_attention_heads=$HEADS --set model.max_position_embeddings=$POSITIONS \
      --set logging.metrics_file="$DIR/random.jsonl"
    [ "$(losses "$DIR/random.jsonl")" != "$(losses "$DIR/one_step.jsonl")" ] || fail "pretrained run equals random init"
    ;;
  shared_ranks)
    HF=${TESSERA_SHARED_DIR:-/work/shared}/fixtures/hf/gpt2/hf
    [ -f "$HF/model.safetensors" ] || fail "HF fixture missing: $HF"
    same_files() {  # DIR_A DIR_B: the same file names, every file equal by h5diff
      local a=$1 b=$2 f n=0
      [ "$(cd "$a" && ls)" = "$(cd "$b" && ls)" ] || fail "different files: $(ls "$a") vs $(ls "$b")"
      for f in "$a"/*.h5; do
        h5diff -r "$f" "$b/$(basename "$f")" >"$DIR/diff.log" 2>&1 || { head -20 "$DIR/diff.log"; fail "$f differs"; }
        n=$((n + 1))
      done
      echo "same $n files: $a vs $b"
    }
    step "$BIN/tessera-convert" import-hf --input "$HF" --output "$DIR/one" --tensor-model-parallel-size 2 \
      --pipeline-model-parallel-size 2
    step $MPIRUN -np 3 "$BIN/tessera-convert" import-hf --input "$HF" --output "$DIR/three" \
      --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2
    same_files "$DIR/one/iter_0000000" "$DIR/three/iter_0000000"
    train $MPIRUN -np 2 "$BIN/tessera-train" --set parallel.use_distributed_optimizer=true \
      --set checkpoint.save="$DIR/ckpt" --set logging.metrics_file="$DIR/first.jsonl"
    LAYOUT=(--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --data-parallel-size 2
            --use-distributed-optimizer)
    step "$BIN/tessera-convert" reshard --input "$DIR/ckpt" --output "$DIR/re_one" "${LAYOUT[@]}"
    step $MPIRUN -np 3 "$BIN/tessera-convert" reshard --input "$DIR/ckpt" --output "$DIR/re_three" "${LAYOUT[@]}"
    [ "$(ls "$DIR/re_three/iter_0000010" | grep -c distrib_optim)" -eq 8 ] || fail "expected 8 distrib_optim files"
    same_files "$DIR/re_one/iter_0000010" "$DIR/re_three/iter_0000010"
    [ -z "$(ls -d "$DIR"/three/*.tmp-* "$DIR"/re_three/*.tmp-* 2>/dev/null)" ] || fail "a temporary folder is left"
    ;;
  mixtral_ep)
    HF=${TESSERA_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}/test/fixtures/hf/mixtral/hf
    [ -f "$HF/model.safetensors" ] || fail "HF Mixtral fixture missing: $HF"
    cat >"$DIR/bare.toml" <<TOML
[training]
micro_batch_size = 2
global_batch_size = 4
train_iters = 3
eval_interval = 0
device = "cpu"
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
    bare() { step "$@" --config "$DIR/bare.toml" --set model.seq_length=16; }
    step "$BIN/tessera-convert" import-hf --input "$HF" --output "$DIR/ep2" --expert-model-parallel-size 2
    for f in mp_rank_00_000_000.h5 mp_rank_00_000_001.h5; do
      [ -f "$DIR/ep2/iter_0000000/$f" ] || fail "no $f in the EP=2 import: $(ls "$DIR/ep2/iter_0000000")"
    done
    step "$BIN/tessera-convert" inspect "$DIR/ep2"
    grep -q "EP=2" "$DIR/step.log" || fail "inspect does not show EP=2"
    grep "decoder.layers.1.mlp.experts.3.linear_fc2.weight" "$DIR/step.log" | grep -q "mp_rank_00_000_001.h5" ||
      fail "inspect does not list expert 3 in EP rank 1's file"
    step "$BIN/tessera-convert" import-hf --input "$HF" --output "$DIR/ep1"
    # Three ranks sharing the TP=2 x EP=2 import write the same files as one process.
    step "$BIN/tessera-convert" import-hf --input "$HF" --output "$DIR/tp2ep2_one" --tensor-model-parallel-size 2 \
      --expert-model-parallel-size 2
    step $MPIRUN -np 3 "$BIN/tessera-convert" import-hf --input "$HF" --output "$DIR/tp2ep2_three" \
      --tensor-model-parallel-size 2 --expert-model-parallel-size 2
    [ "$(cd "$DIR/tp2ep2_one/iter_0000000" && ls)" = "$(cd "$DIR/tp2ep2_three/iter_0000000" && ls)" ] ||
      fail "different files: $(ls "$DIR/tp2ep2_one/iter_0000000") vs $(ls "$DIR/tp2ep2_three/iter_0000000")"
    [ "$(ls "$DIR/tp2ep2_one/iter_0000000" | grep -c '^mp_rank_0[01]_000_00[01].h5$')" -eq 4 ] ||
      fail "expected mp_rank_{00,01}_000_{000,001}.h5: $(ls "$DIR/tp2ep2_one/iter_0000000")"
    for f in "$DIR"/tp2ep2_one/iter_0000000/*.h5; do
      h5diff -r "$f" "$DIR/tp2ep2_three/iter_0000000/$(basename "$f")" >"$DIR/diff.log" 2>&1 ||
        { head -20 "$DIR/diff.log"; fail "$(basename "$f") differs between one and three ranks"; }
    done
    "$BIN/tessera-convert" import-hf --input "$HF" --output "$DIR/ep3" --expert-model-parallel-size 3 >"$DIR/ep3.log" 2>&1
    rc=$?
    [ $rc -eq 2 ] || { cat "$DIR/ep3.log"; fail "EP=3 (4 experts) exited $rc, expected 2"; }
    grep -q "expert_model_parallel_size" "$DIR/ep3.log" || fail "the EP=3 error does not name the key"
    # No model keys: model.num_experts (which EP=2 needs) comes from the checkpoint / config.json.
    EP2=(--set parallel.expert_model_parallel_size=2)
    bare $MPIRUN -np 2 "$BIN/tessera-train" "${EP2[@]}" --set checkpoint.load="$DIR/ep2" --set checkpoint.finetune=true \
      --set logging.metrics_file="$DIR/from_ep2.jsonl"
    bare $MPIRUN -np 2 "$BIN/tessera-train" "${EP2[@]}" --set checkpoint.load="$DIR/ep1" --set checkpoint.finetune=true \
      --set logging.metrics_file="$DIR/from_ep1.jsonl"
    same_losses "$DIR/from_ep2.jsonl" "$DIR/from_ep1.jsonl" 3
    bare $MPIRUN -np 2 "$BIN/tessera-train" "${EP2[@]}" --set checkpoint.pretrained_hf="$HF" \
      --set checkpoint.save="$DIR/one" --set logging.metrics_file="$DIR/one_step.jsonl"
    same_losses "$DIR/from_ep2.jsonl" "$DIR/one_step.jsonl" 3
    # The trainer's own EP=2 checkpoint (iteration 3) exports to Mixtral; re-imported at EP=2 it
    # evaluates to the same loss as the trainer's checkpoint.
    step "$BIN/tessera-convert" export-hf --input "$DIR/one" --output "$DIR/one_hf"
    grep -q '"model_type": "mixtral"' "$DIR/one_hf/config.json" || fail "the export is not a mixtral"
    step "$BIN/tessera-convert" import-hf --input "$DIR/one_hf" --output "$DIR/reimported" --expert-model-parallel-size 2
    evaluate() {  # CHECKPOINT LOG
      step $MPIRUN -np 2 "$BIN/tessera-train" "${EP2[@]}" --config "$DIR/bare.toml" --set model.seq_length=16 \
        --set checkpoint.load="$1" --set checkpoint.finetune=true --eval-only --set training.eval_iters=2
      grep -i "loss" "$DIR/step.log" | grep -iv "^moe_\|^loss =\|^eod_\|^\[" >"$2" || true
      [ -s "$2" ] || { cat "$DIR/step.log"; fail "no loss in the --eval-only output of $1"; }
    }
    evaluate "$DIR/one" "$DIR/eval_trained.txt"
    evaluate "$DIR/reimported" "$DIR/eval_reimported.txt"
    cmp -s "$DIR/eval_trained.txt" "$DIR/eval_reimported.txt" ||
      fail "eval loss differs: $(cat "$DIR/eval_trained.txt") vs $(cat "$DIR/eval_reimported.txt")"
    echo "same eval loss: $(head -1 "$DIR/eval_trained.txt")"
    bare "$BIN/tessera-train" --set checkpoint.load="$DIR/ep2" --set checkpoint.finetune=true \
      --set logging.metrics_file="$DIR/single.jsonl"
    [ "$(losses "$DIR/single.jsonl" | grep -c .)" -eq 3 ] || fail "the EP=2 import did not train on one rank"
    ;;
  *) fail "unknown scenario $SCENARIO" ;;
esac
echo "convert_trainer $SCENARIO: ok"
