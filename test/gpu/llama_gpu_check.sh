#!/usr/bin/env bash
# The GPU checks of the Llama-style decoders (issue 15), one run on the GPU machine:
#   1. gpu_llama_ops_parity_test: CUDA SwiGLU, RoPE (partial / interleaved / per-row positions) vs CPU;
#   2. gpu_flash_attention_parity_test: the fused flash kernel over its grid, plain, with ALiBi and on
#      RoPE'd inputs (bf16 / f16 vs the CPU f32 reference);
#   3. a short bf16 training run of a small Llama-style config and an ALiBi one (loss must fall);
#   4. benchmarks: share/configs/bench/llama-1b.toml (tokens/s, MFU, peak memory), gpt2-124m.toml
#      and gpt2-124m-alibi.toml; the ALiBi run must reach >= 90% of the learned-position tokens/s.
# Usage: llama_gpu_check.sh BIN_DIR [SOURCE_DIR] [OUT_DIR]   (also run by gpu_check.sh ... llama)
# Exit 0 when every step passed, 1 otherwise, 77 without a GPU. Results: OUT/summary.txt, OUT/bench.jsonl.
set -uo pipefail
bin=$(cd "$1" && pwd)
src=${2:-$(cd "$(dirname "$0")/../.." && pwd)}
out=${3:-$(mktemp -d)}
mkdir -p "$out"
if ! nvidia-smi -L >/dev/null 2>&1; then echo "SKIP: no GPU"; exit 77; fi
status=0
step() {  # name command...
  local name=$1
  shift
  local start=$SECONDS
  "$@" >"$out/step.txt" 2>&1
  local rc=$?
  echo "== $name: exit $rc, $((SECONDS - start)) s" | tee -a "$out/summary.txt"
  tail -n 40 "$out/step.txt" | tee -a "$out/summary.txt"
  { echo "== $name"; cat "$out/step.txt"; } >>"$out/log.txt"
  grep '^{"benchmark"' "$out/step.txt" >>"$out/bench.jsonl" || true
  cp "$out/step.txt" "$out/$name.txt"
  rm -f "$out/step.txt"
  [ $rc -eq 0 ] || status=1
}
cfg=$src/share/configs/bench
step llama_ops_parity "$bin/gpu_llama_ops_parity_test"
step flash_attention_parity "$bin/gpu_flash_attention_parity_test" "$out/flash_cases.txt"

# Short training runs: the first and last logged lm loss must fall (bf16, fused kernels).
train_falls() {  # name overrides...
  local name=$1
  shift
  local work=$out/train_$name
  mkdir -p "$work"
  "$bin/tessera-train" --config "$cfg/gpt2-124m.toml" --set training.train_iters=60 --set logging.log_interval=10 \
    --set model.num_layers=4 --set training.micro_batch_size=8 --set training.global_batch_size=8 \
    --set optimizer.lr_warmup_iters=5 --set optimizer.lr_decay_iters=60 --set model.seq_length=512 \
    --set data.vocab_size=512 --set "logging.metrics_file=\"$work/metrics.jsonl\"" "$@" || return 1
  python3 - "$work/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"lm_loss"' in l]
first, last = rows[0]["lm_loss"], rows[-1]["lm_loss"]
print(f"lm_loss {first:.4f} -> {last:.4f}")
sys.exit(0 if last < first - 0.5 else 1)
PY
}
step train_llama_style train_falls llama --set model.position_embedding_type=\"rope\" \
  --set model.normalization=\"rmsnorm\" --set model.activation=\"swiglu\" --set model.num_query_groups=4 \
  --set model.untie_embeddings_and_output_weights=true --set model.add_bias_linear=false
step train_alibi train_falls alibi --set model.position_embedding_type=\"alibi\"

step bench_llama_1b "$bin/tessera-bench" train --config "$cfg/llama-1b.toml"
step bench_124m "$bin/tessera-bench" train --config "$cfg/gpt2-124m.toml"
step bench_124m_alibi "$bin/tessera-bench" train --config "$cfg/gpt2-124m-alibi.toml"
python3 - "$out/bench.jsonl" <<'PY' | tee -a "$out/summary.txt" || status=1
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def tps(name):
    hits = [r for r in rows if r.get("label") == name]
    return hits[-1]["tokens_per_second"] if hits else None
learned, alibi = tps("gpt2-124m.toml"), tps("gpt2-124m-alibi.toml")
print(f"124M tokens/s: learned positions {learned}, ALiBi {alibi}")
if not learned or not alibi or alibi < 0.9 * learned:
    print("FAIL: the ALiBi run is not within 10% of the learned-position run")
    sys.exit(1)
print("ALiBi within 10%: ok")
PY
echo "llama gpu check: $([ $status -eq 0 ] && echo PASSED || echo FAILED) (results in $out)"
exit $status
