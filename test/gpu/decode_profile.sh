#!/usr/bin/env bash
# Where a GPT-2 1.5B-shape decode step at batch 1 goes, on one GPU (issue 18's batch-1 floor):
# (1) new tokens/s of tessera-generate (random weights, bf16, greedy, prompt 128, 256 new tokens) at
#     48 and 24 layers, for each configuration in DECODE_VARIANTS (environment settings, ';'-separated;
#     "default" = none); a layer's cost is the difference of the two per-token times over 24 layers;
# (2) with ncu on PATH: per-kernel GPU time and DRAM bytes of the decode steps of a 2-layer model of
#     the same shape (ncu replays each kernel alone with cold caches: no PDL overlap, no L2 prefetch
#     benefit; the sum against (1) shows what overlap buys).
# Usage: [DECODE_VARIANTS=...] [DECODE_LAYERS="48 24"] [DECODE_NCU=0] [DECODE_RUN_TIMEOUT=s (240)] decode_profile.sh BIN_DIR OUT_DIR.
# Prints a table; exit 0 when every run succeeded (a run past the timeout fails).
set -uo pipefail
bin=${1:?usage: decode_profile.sh BIN_DIR OUT_DIR}
out=${2:?}
mkdir -p "$out"
status=0
python3 -c "
import json, random
random.seed(1)
print(json.dumps({'prompt_ids': [random.randrange(50257) for _ in range(128)]}))" >"$out/prompt.jsonl"
generate() {  # LAYERS NEW_TOKENS WARMUP LOG [env...]
  local layers=$1 new=$2 warmup=$3 log=$4
  shift 4
  timeout "${DECODE_RUN_TIMEOUT:-240}" env "$@" "$bin/tessera-generate" --random-init --set model.num_layers="$layers" --set model.hidden_size=1600 \
    --set model.num_attention_heads=25 --set model.max_position_embeddings=1024 --set model.hidden_dropout=0.0 \
    --set model.attention_dropout=0.0 --set training.device=\"cuda\" --set training.precision=\"bf16\" \
    --prompts-file "$out/prompt.jsonl" --max-new-tokens "$new" --no-stop --warmup "$warmup" \
    --output "$out/tokens_${layers}_$(basename "$log" .log).jsonl" >"$log" 2>&1
}
IFS=';' read -r -a variants <<<"${DECODE_VARIANTS:-default}"
: >"$out/variants.jsonl"
for v in "${variants[@]}"; do
  envs=()
  [ "$v" = default ] || read -r -a envs <<<"$v"
  tag=$(echo "$v" | tr -c 'A-Za-z0-9_\n' '_')
  for layers in ${DECODE_LAYERS:-48 24}; do
    generate "$layers" 256 8 "$out/gen_${layers}_$tag.log" "${envs[@]}" || { echo "run failed: $v $layers"; tail -3 "$out/gen_${layers}_$tag.log"; status=1; }
    line=$(grep -o '{"benchmark": "tessera-generate".*}' "$out/gen_${layers}_$tag.log" | tail -1)
    echo "{\"variant\": \"$v\", \"layers\": $layers, \"result\": ${line:-null}}" >>"$out/variants.jsonl"
  done
done
python3 - "$out/variants.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {}  # a variant listed again (an A/B's baseline first and last) gets its own line
for r in rows:
    key, n = r["variant"], 2
    while r["layers"] in by.get(key, {}):
        key, n = f'{r["variant"]} #{n}', n + 1
    if r["result"]: by.setdefault(key, {})[r["layers"]] = r["result"]["tok_s"]
print("1.5B shape, batch 1, bf16, greedy, prompt 128, 256 new tokens:")
for v, t in by.items():
    if 48 in t and 24 in t:
        per_layer = (1e6 / t[48] - 1e6 / t[24]) / 24
        rest = 1e6 / t[48] - 48 * per_layer
        print(f"  {v:52s} 48 layers {t[48]:7.1f} tok/s | 24 layers {t[24]:7.1f} | {per_layer:5.1f} us a layer, {rest:5.1f} us the rest")
    else:
        print(f"  {v:52s} {t}")
PY
if [ "${DECODE_NCU:-1}" = 0 ]; then
  echo "ncu: skipped (DECODE_NCU=0)"
elif command -v ncu >/dev/null 2>&1; then
  ncu --clock-control none --graph-profiling node --csv --page raw --print-units base \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,launch__grid_size,launch__registers_per_thread,launch__occupancy_limit_registers \
    env "$bin/tessera-generate" --random-init --set model.num_layers=2 --set model.hidden_size=1600 \
    --set model.num_attention_heads=25 --set model.max_position_embeddings=1024 --set model.hidden_dropout=0.0 \
    --set model.attention_dropout=0.0 --set training.device=\"cuda\" --set training.precision=\"bf16\" \
    --prompts-file "$out/prompt.jsonl" --max-new-tokens 4 --no-stop >"$out/ncu.csv" 2>"$out/ncu.log" || { echo "ncu failed"; tail -5 "$out/ncu.log"; }
  python3 - "$out/ncu.csv" <<'PY'
import csv, sys
lines = [l for l in open(sys.argv[1]) if l.startswith('"')]
rows = list(csv.DictReader(lines))
rows = [r for r in rows if r.get("Kernel Name") and r.get("gpu__time_duration.sum", "").replace(".", "").replace(",", "").isdigit()]
def num(r, k):
    try: return float(r[k].replace(",", ""))
    except (KeyError, ValueError): return 0.0
# The last decode step: the kernels after the last-but-one argmax-like reduction; print the last 16.
print(f"ncu: {len(rows)} kernels profiled; the last 16 (one decode step of 2 layers + head):")
for r in rows[-16:]:
    t = num(r, "gpu__time_duration.sum"); b = num(r, "dram__bytes_read.sum")
    # units: ncu raw page gives ns and bytes unless the header row says otherwise
    print(f"  {r['Kernel Name'][:60]:60s} {t/1000:8.2f} us  {b/1e6:8.2f} MB  {b/t if t else 0:7.1f} GB/s  grid {r.get('launch__grid_size','')} regs {r.get('launch__registers_per_thread','')} occ-lim-regs {r.get('launch__occupancy_limit_registers','')}")
PY
else
  echo "ncu: not on PATH (skipped)"
fi
exit $status
