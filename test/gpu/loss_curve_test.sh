#!/usr/bin/env bash
# 200 iterations of a small GPT on the bundled Austen corpus (GPT-2 BPE), trained by tessera-train on
# the CPU in fp32 and on the GPU in fp32 and bf16 with the same config and seed: the GPU runs must
# follow the CPU loss curve, every iteration within 1% (bf16) and 1e-3 relative (fp32). Exit 77
# (skipped) without a visible GPU. Usage: loss_curve_test.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "no GPU visible: skipped"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$bin/tessera-preprocess" --input "$src/share/data/austen/austen.jsonl" --output-prefix "$work/austen" \
  --json-keys text --tokenizer-type GPT2BPETokenizer --vocab-file "$src/share/tokenizers/gpt2/vocab.json" \
  --merge-file "$src/share/tokenizers/gpt2/merges.txt" --append-eod --workers 4 >/dev/null
common=(--config "$src/share/configs/quickstart.toml"
  --set "data.data_path=[\"$work/austen_text_document\"]"
  --set model.num_layers=2 --set model.seq_length=64 --set model.max_position_embeddings=64
  --set training.train_iters=200 --set training.eval_interval=0 --set optimizer.lr_decay_iters=200
  --set optimizer.lr=6.0e-4 --set optimizer.min_lr=6.0e-5 --set optimizer.lr_warmup_iters=20
  --set logging.log_interval=1)
run() {  # name device precision
  "$bin/tessera-train" "${common[@]}" --set training.device="$2" --set training.precision="$3" \
    --set logging.metrics_file="$work/$1.jsonl" >"$work/$1.log" 2>&1 || { cat "$work/$1.log"; exit 1; }
  grep "training finished" "$work/$1.log"
}
run cpu cpu fp32
run gpu_fp32 cuda fp32
run gpu_bf16 cuda bf16
python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
def curve(name):
    return [r["lm_loss"] for r in map(json.loads, open(f"{work}/{name}.jsonl")) if "lm_loss" in r]
cpu = curve("cpu")
assert len(cpu) == 200, f"CPU run logged {len(cpu)} iterations"
failed = False
for name, tol in (("gpu_fp32", 1e-2), ("gpu_bf16", 1e-2)):
    gpu = curve(name)
    assert len(gpu) == 200, f"{name} logged {len(gpu)} iterations"
    rel = [abs(g - c) / abs(c) for g, c in zip(gpu, cpu)]
    worst = max(range(200), key=lambda i: rel[i])
    ok = rel[worst] <= tol
    failed |= not ok
    print(f"{name}: loss it1 {gpu[0]:.4f} (cpu {cpu[0]:.4f}) it200 {gpu[-1]:.4f} (cpu {cpu[-1]:.4f}); "
          f"worst relative difference {rel[worst]:.2e} at iteration {worst + 1} (<= {tol:.0e}) {'ok' if ok else 'FAIL'}")
sys.exit(1 if failed else 0)
PY
