#!/usr/bin/env bash
# Activation recomputation on one GPU (issue 21), in well under 6 minutes:
# (a) GPT-2 124M shape (share/configs/bench/gpt2-124m.toml), bf16, hidden and attention dropout 0.1,
#     20 iterations: recompute_granularity = full (uniform, 1 layer per run) and selective against
#     none, all four runs with training.deterministic_mode = true (no float atomics, fixed-order
#     reductions, no split-K GEMMs): none runs twice and the two must be bitwise equal (else the
#     deterministic mode is broken), then full and selective must be bitwise equal to none in every
#     iteration's lm_loss and grad_norm (issue 21 acceptance 1). DETERMINISTIC=0 in the environment
#     runs them without the flag (the default atomic kernels, not run-to-run deterministic): then
#     each recomputed run's largest |lm_loss| and |grad_norm| difference from none must stay within
#     4x the none-vs-none difference (a wrong dropout mask is orders of magnitude larger).
# (b) GPT-2 1.5B shape (gpt2-1.5b.toml: bf16, no dropout, flash attention), micro-batch 8: peak
#     device memory with full recomputation <= 45% of 78 GiB (35.1 GiB) and tokens/s >= 0.72x the
#     run without; then the largest micro-batch that fits with and without recomputation: predicted
#     from the peak at two micro-batches (linear in the micro-batch) against the GPU's memory, then
#     run to confirm (and the next one up, expected not to fit), with the tokens/s of each (5
#     iterations a run, the last 4 timed; the search stops at micro-batch 64).
# Results: OUT/recompute_summary.txt (and each run's log under OUT/recompute/). Exit 0 when every
# check passes, 1 otherwise, 77 without a GPU.
# Usage: recompute_check.sh BIN_DIR SOURCE_DIR [OUT]
set -uo pipefail
bin=$1
src=$2
out=${3:-$(mktemp -d)}
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
[ "${gpus:-0}" -ge 1 ] || { echo "no GPU visible: skipped"; exit 77; }
mkdir -p "$out/recompute"
logs=$out/recompute
summary=$out/recompute_summary.txt
: >"$summary"
cfg=$src/share/configs/bench
status=0
say() { echo "$*" | tee -a "$summary"; }
fail() { say "FAIL: $*"; status=1; }

# ---- (a) 124M, bf16, dropout 0.1, 20 iterations
deterministic=${DETERMINISTIC:-1}
det_flag=(--set training.deterministic_mode=true)
[ "$deterministic" = 0 ] && det_flag=()
a_run() {  # name overrides...
  local name=$1
  shift
  "$bin/tessera-train" --config "$cfg/gpt2-124m.toml" "${det_flag[@]}" --set model.hidden_dropout=0.1 \
    --set model.attention_dropout=0.1 \
    --set training.train_iters=20 --set logging.log_interval=1 --set logging.metrics_file="$logs/$name.jsonl" "$@" \
    >"$logs/$name.log" 2>&1 || { tail -5 "$logs/$name.log"; fail "124M $name did not train"; return; }
  say "124M $name: $(grep -o 'training finished.*' "$logs/$name.log" | head -1)"
}
a_run none
a_run none_again
a_run full --set parallel.recompute_granularity=full --set parallel.recompute_method=uniform \
  --set parallel.recompute_num_layers=1
a_run selective --set parallel.recompute_granularity=selective
python3 - "$logs" "$deterministic" >>"$summary" 2>&1 <<'PY' || status=1
import json, sys
logs, deterministic = sys.argv[1], sys.argv[2] != "0"
def seq(name):
    rows = [json.loads(l) for l in open(f"{logs}/{name}.jsonl") if '"lm_loss"' in l]
    return {r["iteration"]: (r["lm_loss"], r["grad_norm"]) for r in rows}
def diff(a, b):
    if sorted(a) != sorted(b) or len(a) != 20: return None
    return max(max(abs(a[i][0] - b[i][0]), abs(a[i][1] - b[i][1])) for i in a)
try:
    none, again = seq("none"), seq("none_again")
except OSError as e:
    print("FAIL: (a) missing metrics:", e); sys.exit(1)
noise = diff(none, again)
if noise is None: print("FAIL: (a) the none runs did not log 20 iterations"); sys.exit(1)
mode = "deterministic mode" if deterministic else "default mode"
ok = True
if deterministic:
    passed = noise == 0
    print(f"(a) {mode}: none vs none again: "
          f"{'bitwise equal' if passed else 'largest difference %.3g' % noise}: {'PASS' if passed else 'FAIL'}")
    ok &= passed
else:
    print(f"(a) {mode}: none vs none again: "
          f"{'bitwise equal' if noise == 0 else 'largest difference %.3g (GPU atomics)' % noise}")
for name in ("full", "selective"):
    try: d = diff(none, seq(name))
    except OSError: d = None
    if d is None: print(f"FAIL: (a) {name}: no 20 iterations"); ok = False; continue
    bound = 0 if deterministic else 4 * noise
    passed = d == 0 if (deterministic or noise == 0) else d <= bound
    verdict = "bitwise equal" if d == 0 else f"largest difference {d:.3g} (bound {bound:.3g})"
    print(f"(a) {mode}: {name} vs none over 20 iterations of lm_loss and grad_norm: {verdict}: "
          f"{'PASS' if passed else 'FAIL'}")
    ok &= passed
sys.exit(0 if ok else 1)
PY
tail -4 "$summary"

# RECOMPUTE_PARTS=a stops here (the 124M check alone).
if [[ ${RECOMPUTE_PARTS:-ab} != *b* ]]; then
  say "recompute check (part a only): $([ $status -eq 0 ] && echo 'all checks passed' || echo 'FAILED')"
  exit $status
fi

# ---- (b) 1.5B: memory and throughput
bench() {  # name micro_batch overrides... ; prints "peak_mib tokens_per_second" or "oom"
  local name=$1 mb=$2
  shift 2
  "$bin/tessera-bench" train --config "$cfg/gpt2-1.5b.toml" --label "$name" --set training.micro_batch_size="$mb" \
    --set training.global_batch_size="$mb" --set training.train_iters=5 --set logging.log_interval=5 "$@" \
    >"$logs/$name.log" 2>&1
  local line
  line=$(grep '^{"benchmark"' "$logs/$name.log" | tail -1)
  if [ -z "$line" ]; then
    if grep -qiE "out of (GPU )?memory" "$logs/$name.log"; then echo oom; else echo error; fi
    return
  fi
  echo "$line" >>"$out/recompute_bench.jsonl"
  python3 -c 'import json,sys; j=json.loads(sys.argv[1]); print(j["peak_device_memory_mib"], j["tokens_per_second"], j.get("memory_estimate", {}).get("total_mib", "?"))' "$line"
}
full=(--set parallel.recompute_granularity=full --set parallel.recompute_method=uniform --set parallel.recompute_num_layers=1)
read -r none8_mib none8_tps none8_est < <(bench none_mb8 8)
read -r full8_mib full8_tps full8_est < <(bench full_mb8 8 "${full[@]}")
say "(b) 1.5B micro-batch 8 without recomputation: ${none8_mib} MiB peak (estimated at start: ${none8_est:-?} MiB), ${none8_tps} tokens/s"
say "(b) 1.5B micro-batch 8 with full recomputation: ${full8_mib} MiB peak (estimated at start: ${full8_est:-?} MiB), ${full8_tps} tokens/s"
if [[ $none8_mib =~ ^[0-9.]+$ && $full8_mib =~ ^[0-9.]+$ ]]; then
  python3 - "$none8_mib" "$none8_tps" "$full8_mib" "$full8_tps" >>"$summary" <<'PY' || status=1
import sys
none_mib, none_tps, full_mib, full_tps = map(float, sys.argv[1:])
limit = 0.45 * 78 * 1024
ratio = full_tps / none_tps
ok_mem, ok_tps = full_mib <= limit, ratio >= 0.72
print(f"(b) full recomputation peak {full_mib:.0f} MiB = {full_mib / (78 * 1024):.1%} of 78 GiB (target <= 45%): "
      f"{'PASS' if ok_mem else 'FAIL'}; vs {none_mib:.0f} MiB without ({full_mib / none_mib:.1%})")
print(f"(b) tokens/s with / without: {full_tps:.0f} / {none_tps:.0f} = {ratio:.3f}x (target >= 0.72x): {'PASS' if ok_tps else 'FAIL'}")
sys.exit(0 if ok_mem and ok_tps else 1)
PY
  tail -2 "$summary"
else
  fail "(b) a micro-batch 8 run did not finish (none: $none8_mib, full: $full8_mib; logs in $logs)"
fi

# Largest micro-batch: peak(mb) ~ a + b*mb from two runs, against the GPU's memory less 1 GiB for the
# CUDA context and libraries (not counted in the peak); from the guess the search walks up while runs fit (down while they do not), at most 6 runs. The
# search stops at micro-batch 64 (65536 tokens a step: the logits alone pass 2^31 elements beyond
# ~41, and a step takes seconds): "64 fits" then means "at least 64".
total_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i 0 | head -1)
cap=64
largest() {  # label small_mb small_mib big_mb big_mib overrides...
  local label=$1 mb_a=$2 mib_a=$3 mb_b=$4 mib_b=$5
  shift 5
  local guess
  guess=$(python3 -c 'import sys; a,pa,b,pb,t=map(float,sys.argv[1:]); s=max((pb-pa)/(b-a),1.0); print(int(b+(t-1024-pb)//s))' \
    "$mb_a" "$mib_a" "$mb_b" "$mib_b" "$total_mib")
  local predicted=$guess
  [ "$guess" -gt "$cap" ] && guess=$cap
  # Walk from the guess: up while it fits (to the cap), else down until it fits; at most 6 runs.
  local fit="" fit_tps="" r tps mb=$guess runs=0 direction=""
  while [ "$runs" -lt 6 ] && [ "$mb" -ge 1 ] && [ "$mb" -le "$cap" ]; do
    runs=$((runs + 1))
    read -r r tps _ < <(bench "${label}_mb$mb" "$mb" "$@")
    if [[ $r =~ ^[0-9.]+$ ]]; then
      say "(b) $label micro-batch $mb: fits, $r MiB peak, $tps tokens/s"
      fit=$mb; fit_tps=$tps
      [ "$direction" = down ] && break
      direction=up; mb=$((mb + 1))
    else
      say "(b) $label micro-batch $mb: does not fit ($r)"
      [ "$direction" = up ] && break
      direction=down; mb=$((mb - 1))
    fi
  done
  local note=""
  [ "${fit:-0}" = "$cap" ] && note=" (the search cap: at least $cap)"
  [ "$direction" = up ] && [ "$mb" -le "$cap" ] && [ "$fit" = "$((mb - 1))" ] && [ "$runs" -ge 6 ] && note=" (at least: the run limit stopped the search)"
  say "(b) largest micro-batch $label: ${fit:-none found}$note, ${fit_tps:-?} tokens/s (predicted from the peaks: $predicted)"
}
if [[ $none8_mib =~ ^[0-9.]+$ && $full8_mib =~ ^[0-9.]+$ ]]; then
  read -r none4_mib _ < <(bench none_mb4 4)
  [[ $none4_mib =~ ^[0-9.]+$ ]] && largest without_recompute 4 "$none4_mib" 8 "$none8_mib"
  read -r full16_mib _ < <(bench full_mb16 16 "${full[@]}")
  [[ $full16_mib =~ ^[0-9.]+$ ]] && largest full_recompute 8 "$full8_mib" 16 "$full16_mib" "${full[@]}"
fi
say "recompute check: $([ $status -eq 0 ] && echo 'all checks passed' || echo 'FAILED')"
exit $status
