#!/usr/bin/env bash
# The out-of-tree plugin (examples/custom_loss) builds against an installed Tessera
# (cmake --install + find_package(Tessera)) and trains with its own loss:
#   - its --help lists the plugin's config key loss.truncate_at;
#   - with truncate_at far above every token loss it reproduces the built-in lm loss per iteration;
#   - with truncate_at = 4.2 (near ln 64, the untrained loss) on TP=2 some tokens are truncated and
#     some not (0 < truncated_fraction < 1) and the first step's loss is below the lm loss.
# Usage: custom_loss_plugin_test.sh BUILD_DIR SOURCE_DIR WORK_DIR MPIEXEC
set -euo pipefail
build=$1 src=$2 work=$3 mpiexec=$4
rm -rf "$work" && mkdir -p "$work"
cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
launcher=()
command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$src/examples/custom_loss" -B "$work/example" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$work/prefix" "${launcher[@]}" > "$work/configure.log"
cmake --build "$work/example" -j2 > "$work/build.log"
plugin=$work/example/truncated-lm-train

"$plugin" --help > "$work/help.txt"
grep -q "truncate_at = 1e+01 .*(truncated_lm)" "$work/help.txt" || { echo "FAIL: --help does not list loss.truncate_at"; exit 1; }

common=(--set data.mock_data=true --set data.vocab_size=64 --set model.num_layers=2 --set model.hidden_size=32
        --set model.num_attention_heads=4 --set model.seq_length=32 --set model.max_position_embeddings=32
        --set training.micro_batch_size=2 --set training.global_batch_size=4 --set training.train_iters=4
        --set training.eval_interval=0 --set logging.log_interval=1 --set training.precision=fp32
        --set training.device=cpu --set optimizer.lr_warmup_iters=1)
"$plugin" "${common[@]}" --set logging.metrics_file="$work/lm.jsonl" > "$work/lm.log"
"$plugin" "${common[@]}" --set training.loss=truncated_lm --set loss.truncate_at=1e9 \
          --set logging.metrics_file="$work/untruncated.jsonl" > "$work/untruncated.log"
python3 "$src/test/tools/metrics_check.py" "$work/untruncated.jsonl" --iterations 4 \
        --reference "$work/lm.jsonl" --tolerance lm_loss=1e-6 --tolerance grad_norm=1e-5

"$mpiexec" --oversubscribe --allow-run-as-root -np 2 "$plugin" "${common[@]}" --set training.loss=truncated_lm \
          --set loss.truncate_at=4.2 --set parallel.tensor_model_parallel_size=2 \
          --set logging.metrics_file="$work/truncated.jsonl" > "$work/truncated.log"
python3 "$src/test/tools/metrics_check.py" "$work/truncated.jsonl" --iterations 4
python3 - "$work/truncated.jsonl" "$work/lm.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
lm = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
bad = [r for r in rows if not (r["lm_loss"] <= 4.2 and 0 < r["truncated_fraction"] < 1)]
if bad or len(rows) != 4 or not rows[0]["lm_loss"] < lm[0]["lm_loss"]:
    sys.exit(f"FAIL: truncated rows {bad or rows} (lm: {lm[0]})")
print("plugin loss truncated on TP=2:", [round(r["lm_loss"], 4) for r in rows],
      "truncated fractions", [round(r["truncated_fraction"], 3) for r in rows])
PY
echo "custom loss plugin OK"
