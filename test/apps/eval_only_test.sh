#!/usr/bin/env bash
# Eval-only mode and the test split: a 4-iteration run evaluates the validation split at iteration
# 4 (its first evaluation) and the test split at the end, and saves; then
#   tessera-train --eval-only (1 rank) reproduces both numbers exactly (same weights, same samples),
#   and on TP=2 x PP=2 within 1e-5 (another layout loading the same checkpoint);
#   --eval-only without a checkpoint exits 2 naming checkpoint.load;
#   --logits-file: the top-5 logits per token of every evaluated sample, in sample order, equal on
#   one rank, on TP=2 x PP=2 and on DP=2 (gathered over DP) within 1e-4.
# Usage: eval_only_test.sh BIN_DIR MPIEXEC WORK_DIR
set -euo pipefail
bin=$1 mpiexec=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
common=(--set data.mock_data=true --set data.vocab_size=64 --set model.num_layers=4 --set model.hidden_size=32
        --set model.num_attention_heads=4 --set model.seq_length=32 --set model.max_position_embeddings=32
        --set training.micro_batch_size=2 --set training.global_batch_size=8 --set training.eval_iters=3
        --set training.precision=fp32 --set training.device=cpu --set logging.log_interval=1
        --set optimizer.lr_warmup_iters=1)
"$bin/tessera-train" "${common[@]}" --set training.train_iters=4 --set training.eval_interval=4 \
    --set checkpoint.save="$work/ckpt" --set logging.metrics_file="$work/train.jsonl" > "$work/train.log"
"$bin/tessera-train" "${common[@]}" --eval-only --set checkpoint.load="$work/ckpt" \
    --set logging.metrics_file="$work/eval_valid.jsonl" --logits-file "$work/logits_1.jsonl" --logits-top-k 5 \
    > "$work/eval_valid.log"
"$mpiexec" --oversubscribe --allow-run-as-root -np 2 "$bin/tessera-train" "${common[@]}" --eval-only \
    --set checkpoint.load="$work/ckpt" --logits-file "$work/logits_dp2.jsonl" --logits-top-k 5 > "$work/eval_dp2.log"
"$bin/tessera-train" "${common[@]}" --eval-only --eval-split test --set checkpoint.load="$work/ckpt" \
    --set logging.metrics_file="$work/eval_test.jsonl" > "$work/eval_test.log"
"$mpiexec" --oversubscribe --allow-run-as-root -np 4 "$bin/tessera-train" "${common[@]}" --eval-only \
    --set checkpoint.load="$work/ckpt" --set parallel.tensor_model_parallel_size=2 \
    --set parallel.pipeline_model_parallel_size=2 --set logging.metrics_file="$work/eval_tp2_pp2.jsonl" \
    --logits-file "$work/logits_tp2_pp2.jsonl" --logits-top-k 5 > "$work/eval_tp2_pp2.log"
set +e
"$bin/tessera-train" "${common[@]}" --eval-only > "$work/no_ckpt.log" 2>&1
rc=$?
set -e
[[ $rc == 2 ]] && grep -q "eval-only needs a checkpoint to evaluate: checkpoint.load" "$work/no_ckpt.log" \
  || { echo "FAIL: --eval-only without a checkpoint exited $rc:"; cat "$work/no_ckpt.log"; exit 1; }

python3 - "$work" <<'PY'
import json, sys, os
work = sys.argv[1]
def rows(name):
    return [json.loads(l) for l in open(os.path.join(work, name)) if l.strip()]
train = rows("train.jsonl")
valid = [r for r in train if "eval_loss" in r]
test = [r for r in train if "test_loss" in r]
assert len(valid) == 1 and valid[0]["iteration"] == 4, f"expected one evaluation at 4, got {valid}"
assert len(test) == 1 and test[0]["iteration"] == 4, f"expected the test split at the end, got {test}"
failures = []
def check(name, field, want, rel):
    got = rows(name)
    if len(got) != 1 or got[0].get("iteration") != 4 or field not in got[0]:
        failures.append(f"{name}: expected one row with iteration 4 and {field}, got {got}")
        return
    diff = abs(got[0][field] - want) / abs(want)
    print(f"{name}: {field} {got[0][field]:.9g} vs training's {want:.9g} (relative {diff:.2e}, bound {rel})")
    if diff > rel:
        failures.append(f"{name}: {field} differs by {diff:.2e} > {rel}")
check("eval_valid.jsonl", "eval_loss", valid[0]["eval_loss"], 0.0)
check("eval_test.jsonl", "test_loss", test[0]["test_loss"], 0.0)
check("eval_tp2_pp2.jsonl", "eval_loss", valid[0]["eval_loss"], 1e-5)
one = rows("logits_1.jsonl")
if [r["sample"] for r in one] != list(range(24)):
    failures.append(f"logits_1.jsonl: samples {[r['sample'] for r in one]}, expected 0..23 (3 batches of 8)")
for other in ("logits_tp2_pp2.jsonl", "logits_dp2.jsonl"):
    got = rows(other)
    if len(got) != len(one):
        failures.append(f"{other}: {len(got)} rows, expected {len(one)}")
        continue
    worst = 0.0
    for a, b in zip(one, got):
        if a["sample"] != b["sample"] or a["input_ids"] != b["input_ids"]:
            failures.append(f"{other}: sample {b['sample']} is not sample {a['sample']} or its inputs differ")
            break
        for ids_a, ids_b, la, lb in zip(a["top_ids"], b["top_ids"], a["top_logits"], b["top_logits"]):
            if len(ids_b) != 5 or any(abs(x - y) > 1e-4 for x, y in zip(la, lb)):
                failures.append(f"{other}: sample {a['sample']}: logits {lb} vs {la}")
                break
            # ids may only differ where two logits tie within the tolerance
            for i, (x, y) in enumerate(zip(ids_a, ids_b)):
                if x != y and not any(abs(la[i] - la[j]) <= 1e-4 for j in range(5) if j != i):
                    failures.append(f"{other}: sample {a['sample']}: top ids {ids_b} vs {ids_a}")
            worst = max(worst, max(abs(x - y) for x, y in zip(la, lb)))
    print(f"{other}: {len(got)} samples' top-5 logits match one rank's (largest difference {worst:.2e})")
if failures:
    sys.exit("FAIL: " + "; ".join(failures))
PY
grep -q "^validation loss at iteration 4 | lm loss value" "$work/eval_valid.log" || { echo "FAIL: no validation line"; exit 1; }
echo "eval-only OK"
