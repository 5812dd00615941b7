#!/usr/bin/env bash
# One-GPU training throughput and peak memory, Tessera against the PyTorch torch.compile reference
# (../shared/bench/torch_gpt_train.py) on the same shapes in the same GPU call (issue #20), with the
# ratios. Shapes: GPT-2 124M at micro-batch 16; the 1.5B shape (48 x 1600, 25 heads) at
# micro-batch 8; 124M with hidden and attention dropout 0.1. bf16, seq 1024, synthetic tokens.
# Usage: test/bench/train_vs_torch.sh BIN_DIR SOURCE_DIR [OUT_DIR] [SHARED_DIR] [SHAPES]
#   SHAPES: a space-separated subset of "124m 1.5b 124m-dropout" (default: all three).
#   A torch_SHAPE.json already in OUT_DIR (same GPU call) is reused instead of measured again.
#   TESSERA_BENCH_SET: extra --set overrides for every Tessera run (e.g. parallel.recompute_granularity="selective").
# Prints one table; exit 0 when every run produced its JSON (the ratios are reported, not enforced).
set -uo pipefail
bin=${1:?usage: train_vs_torch.sh BIN_DIR SOURCE_DIR [OUT_DIR] [SHARED_DIR] [SHAPES]}
src=${2:?}
out=${3:-$(mktemp -d)}
shared=${4:-${TESSERA_SHARED_DIR:-$src/../shared}}
shapes=${5:-124m 1.5b 124m-dropout}
mkdir -p "$out"
status=0
extra=()
for s in ${TESSERA_BENCH_SET:-}; do extra+=(--set "$s"); done

run_shape() {  # name, config, torch args, tessera --set args...
  local name=$1 config=$2 torch_args=$3; shift 3
  if [ -s "$out/torch_$name.json" ]; then  # measured earlier in this GPU call (OUT_DIR given again)
    echo "torch $name: reusing $out/torch_$name.json"
  else
    # shellcheck disable=SC2086
    python3 "$shared/bench/torch_gpt_train.py" $torch_args >"$out/torch_$name.json" 2>"$out/torch_$name.log" ||
      { echo "torch $name failed: $(tail -2 "$out/torch_$name.log")"; status=1; }
  fi
  "$bin/tessera-bench" train --config "$src/share/configs/bench/$config" --label "$name" "$@" "${extra[@]}" \
    >"$out/tessera_$name.json" 2>"$out/tessera_$name.log" ||
    { echo "tessera $name failed: $(tail -3 "$out/tessera_$name.log")"; status=1; }
}

for shape in $shapes; do
  case $shape in
    124m) run_shape 124m gpt2-124m.toml "--mbs 16" ;;
    1.5b) run_shape 1.5b gpt2-1.5b.toml "--layers 48 --hidden 1600 --heads 25 --mbs 8 --steps 12 --warmup 4" ;;
    124m-dropout) run_shape 124m-dropout gpt2-124m.toml "--mbs 16 --dropout 0.1" \
                    --set model.hidden_dropout=0.1 --set model.attention_dropout=0.1 ;;
    *) echo "unknown shape $shape (allowed: 124m 1.5b 124m-dropout)"; exit 2 ;;
  esac
done

python3 - "$out" $shapes <<'PY' | tee "$out/train_vs_torch.txt"
import json, sys
out, shapes = sys.argv[1], sys.argv[2:]
def last_json(path):
    try:
        lines = [l for l in open(path) if l.strip().startswith("{")]
        return json.loads(lines[-1]) if lines else None
    except OSError:
        return None
print("| shape | torch.compile tok/s | Tessera tok/s | ratio | peak GiB torch / Tessera | Tessera MFU | Tessera ms/step |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for s in shapes:
    t, x = last_json(f"{out}/torch_{s}.json"), last_json(f"{out}/tessera_{s}.json")
    if not t or not x:
        print(f"| {s} | {t and t['tok_s']} | {x and x['tokens_per_second']} | - | - | - | - |"); continue
    tg, xg = t["peak_mem_gib"], x["peak_device_memory_mib"] / 1024
    print(f"| {s} | {t['tok_s']:,} | {x['tokens_per_second']:,.0f} | {x['tokens_per_second'] / t['tok_s']:.3f} | "
          f"{tg:.1f} / {xg:.1f} ({xg / tg:.2f}x) | {100 * x['mfu']:.1f}% | {x['ms_per_step']:.1f} |")
    est = x.get("memory_estimate", {})
    print(f"|   Tessera memory estimate MiB: {json.dumps(est)[:400]} |")
print("FLOPs per token: 6N + 12*L*h*s (N: parameters without position embeddings), peak 989 TFLOP/s bf16 dense")
PY
exit $status
