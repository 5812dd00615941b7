#!/usr/bin/env bash
# Hugging Face interop acceptance (issue 17, item 2), for the GPU machine (python3 there has
# transformers, torch and safetensors; everything below runs on its CPU in float32):
#  1. each family's HF fixture (FAMILIES, default gpt2 llama megatron-bert t5) -> tessera-convert
#     import-hf at the TP x PP its shape allows (TP=2 x PP=2 for the public fixtures) -> reshard to
#     TP=1 x PP=1 -> export-hf; transformers loads the export with the class its config names, and
#     every output in expected.safetensors (logits; BERT's MLM and NSP logits) matches within 1e-4
#     (positions with attention_mask = 1).
#  2. tessera-train trains a small GPT at TP=2 x PP=2 for 20 iterations (CPU, mpirun -np 4) and
#     saves; export-hf; transformers loads it, and its mean loss on a random batch equals the loss
#     Tessera's model computes on that batch from the same checkpoint (convert_score: the forward
#     the trainer's evaluation runs) within 1e-4.
# Usage: convert_hf_check.sh BUNDLE_BIN SOURCE_DIR OUT [FIXTURES_DIR]
#   BUNDLE_BIN: tessera-convert, tessera-train, convert_score (e.g. .gpu/bin/bin from device-bundle
#   of build/bin); FIXTURES_DIR: the shared fixtures (default BUNDLE_BIN/../../data/fixtures, i.e.
#   device-bundle -d ../shared/fixtures). Results: OUT/convert_summary.txt; exit 0 only if all pass.
set -uo pipefail
bin=$1
src=$2
out=$3
fixtures=${4:-$bin/../../data/fixtures}
[ -d "$fixtures/hf/gpt2" ] || fixtures=$bin/../data/fixtures
hf=$fixtures/hf/gpt2
FAMILIES=${FAMILIES:-gpt2 llama megatron-bert t5}  # the families tessera-convert has
work=$out/convert_work
rm -rf "$work"
mkdir -p "$work"
summary=$out/convert_summary.txt
: >"$summary"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
status=0
log() { echo "$*" | tee -a "$summary"; }
run() {  # name command...
  local name=$1
  shift
  if "$@" >"$work/$name.log" 2>&1; then log "ok   $name"; else
    log "FAIL $name (exit $?):"
    tail -n 20 "$work/$name.log" | tee -a "$summary"
    status=1
    return 1
  fi
}
[ -f "$hf/hf/model.safetensors" ] || { log "FAIL fixture missing: $hf/hf"; exit 1; }
python3 -c "import transformers, torch, safetensors; print('transformers', transformers.__version__, 'torch', torch.__version__)" | tee -a "$summary"

# --- 1. each family's fixture: round trip, then transformers' outputs
# The model class comes from the exported config.json's architectures; every input.* tensor of
# expected.safetensors is fed, every output.* compared (at positions whose attention_mask is 1).
for family in $FAMILIES; do
  fixture=$fixtures/hf/$family
  [ -f "$fixture/hf/model.safetensors" ] || { log "FAIL fixture missing: $fixture/hf"; status=1; continue; }
  read -r layers heads groups < <(python3 -c "
import json; c = json.load(open('$fixture/hf/config.json'))
heads = c.get('n_head') or c.get('num_attention_heads') or c.get('num_heads')
print(c.get('n_layer') or c.get('num_hidden_layers') or c.get('num_layers'), heads, c.get('num_key_value_heads') or heads)")
  tp=1; [ $((heads % 2)) -eq 0 ] && [ $((groups % 2)) -eq 0 ] && tp=2
  pp=1; [ $((layers % 2)) -eq 0 ] && [ "$family" != t5 ] && pp=2  # T5 has no pipeline split (docs/t5.md)
  log "$family: $layers layers, $heads heads -> import at TP=$tp x PP=$pp"
  run "$family-import" "$bin/tessera-convert" import-hf --input "$fixture/hf" --output "$work/$family-imported" \
    --tensor-model-parallel-size $tp --pipeline-model-parallel-size $pp &&
    run "$family-reshard" "$bin/tessera-convert" reshard --input "$work/$family-imported" --output "$work/$family-tp1" &&
    run "$family-export" "$bin/tessera-convert" export-hf --input "$work/$family-tp1" --output "$work/$family-export" &&
    run "$family-outputs" python3 - "$work/$family-export" "$fixture/expected.safetensors" "$family" <<'PY'
import json, sys, torch, transformers
from safetensors.torch import load_file
folder, expected, family = sys.argv[1:4]
architecture = json.load(open(f"{folder}/config.json"))["architectures"][0]
model = getattr(transformers, architecture).from_pretrained(folder, dtype=torch.float32).eval()
e = load_file(expected)
inputs = {k[len("input."):]: v for k, v in e.items() if k.startswith("input.")}
with torch.no_grad():
    out = model(**inputs)
mask = inputs.get("attention_mask")
worst = 0.0
for key in sorted(k for k in e if k.startswith("output.")):
    name = key[len("output."):]
    got, want = getattr(out, name), e[key]
    diff = (got - want).abs()
    if mask is not None and diff.dim() >= 2 and diff.shape[:2] == mask.shape:
        diff = diff[mask.bool()]
    worst = max(worst, diff.max().item())
    print(f"{family} {architecture} {name}: max |exported - HF expected| = {diff.max().item():.3e}")
print(f"{family} fixture outputs: max |exported - HF expected| = {worst:.3e} (limit 1e-4)")
sys.exit(0 if worst <= 1e-4 else 1)
PY
  grep -h "fixture outputs" "$work/$family-outputs.log" >>"$summary"
done

# --- 2. a checkpoint trained at TP=2 x PP=2 for 20 iterations
cat >"$work/train.toml" <<'TOML'
[model]
num_layers = 4
hidden_size = 64
num_attention_heads = 4
seq_length = 32
max_position_embeddings = 64
[training]
micro_batch_size = 2
global_batch_size = 8
train_iters = 20
eval_interval = 0
precision = "fp32"
device = "cpu"
[optimizer]
lr = 3.0e-3
min_lr = 3.0e-4
lr_warmup_iters = 2
[data]
mock_data = true
vocab_size = 500
[logging]
log_interval = 5
TOML
run train mpirun --allow-run-as-root --oversubscribe -np 4 "$bin/tessera-train" --config "$work/train.toml" \
  --set parallel.tensor_model_parallel_size=2 --set parallel.pipeline_model_parallel_size=2 \
  --set checkpoint.save="$work/trained" --set logging.metrics_file="$work/train_metrics.jsonl" &&
  run export_trained "$bin/tessera-convert" export-hf --input "$work/trained" --output "$work/trained-hf" &&
  run batch python3 -c "
import torch
g = torch.Generator().manual_seed(17)
torch.randint(0, 500, (4, 33), generator=g, dtype=torch.int32).numpy().tofile('$work/batch.bin')" &&
  run score "$bin/convert_score" "$work/trained" "$work/batch.bin" 4 32 &&
  run trained_loss python3 - "$work/trained-hf" "$work/batch.bin" "$(awk '/^loss/{print $2}' "$work/score.log")" <<'PY'
import sys, numpy as np, torch, transformers
model = transformers.AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32).eval()
tokens = torch.from_numpy(np.fromfile(sys.argv[2], dtype=np.int32).reshape(4, 33)).long()
with torch.no_grad():
    logits = model(input_ids=tokens[:, :32]).logits
loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1)).item()
tessera = float(sys.argv[3])
print(f"trained TP=2 x PP=2 checkpoint: HF loss {loss:.7f}, Tessera loss {tessera:.7f}, |diff| {abs(loss - tessera):.2e} (limit 1e-4)")
sys.exit(0 if abs(loss - tessera) <= 1e-4 else 1)
PY
grep -h "trained TP=2" "$work/trained_loss.log" >>"$summary"
log "convert_hf_check: $([ $status -eq 0 ] && echo PASS || echo FAIL)"
exit $status
