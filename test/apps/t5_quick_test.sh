#!/usr/bin/env bash
# share/configs/t5-quick.toml end to end on the CPU (issue 16): the bundled Austen corpus
# sentence-split and WordPiece-tokenized by tessera-preprocess --split-sentences, then 20 iterations
# of the quick T5 config (span corruption with sentinels): every logged loss finite, the lm loss of
# the last iteration at least 1 below the first's; the eval rows carry eval_lm_loss.
# Usage: bert_quick_test.sh BIN_DIR SOURCE_DIR WORK_DIR
set -uo pipefail
bin=$1
src=$2
work=$3
rm -rf "$work"
mkdir -p "$work/data"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
"$bin/tessera-preprocess" --input "$src/share/data/austen/austen.jsonl" --output-prefix "$work/data/austen" \
  --json-keys text --tokenizer-type BertWordPieceLowerCase \
  --vocab-file "$src/share/tokenizers/bert-base-uncased/vocab.txt" --split-sentences --workers 2 \
  >"$work/preprocess.log" 2>&1 || { cat "$work/preprocess.log"; echo "FAIL: preprocess"; exit 1; }
"$bin/tessera-train" --config "$src/share/configs/t5-quick.toml" \
  --set "data.data_path=[\"$work/data/austen_text_sentence\"]" \
  --set "data.vocab_file=\"$src/share/tokenizers/bert-base-uncased/vocab.txt\"" \
  --set training.train_iters=20 --set training.eval_interval=20 --set training.eval_iters=1 \
  --set logging.log_interval=1 --set "logging.metrics_file=\"$work/metrics.jsonl\"" >"$work/train.log" 2>&1 ||
  { tail -30 "$work/train.log"; echo "FAIL: tessera-train exited non-zero"; exit 1; }
python3 - "$work/metrics.jsonl" <<'PY' || { echo "FAIL: the T5 quick run"; exit 1; }
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
train = [r for r in rows if "lm_loss" in r and "loss" in r]
evals = [r for r in rows if "eval_loss" in r]
assert len(train) == 20, f"{len(train)} training rows"
for r in train:
    for k in ("loss", "lm_loss", "grad_norm"):
        assert r[k] is not None and math.isfinite(r[k]), (k, r)
first, last = train[0], train[-1]
print(f"loss {first['loss']:.4f} -> {last['loss']:.4f}")
assert last["loss"] < first["loss"] - 1.0, "the loss did not fall by 1"
assert evals and "eval_lm_loss" in evals[-1], evals
print("t5 quick: ok")
PY
