#!/usr/bin/env bash
# The fused decode linear's bulk-copy path (TESSERA_DECODE_BULK, kernels/decode_linear_bulk.cu) and
# run-ahead decoding against the register path, on one GPU in one call (issue 18's 1.5B batch-1 floor),
# most telling figures first, so a call cut short still brings them back:
# (1) tokens/s of tessera-generate (1.5B shape, batch 1, bf16, greedy, prompt 128, 256 new tokens;
#     decode_profile.sh at DECODE_LAYERS, default 48) under the register path ("default", first and
#     last) and each setting, and whether each setting's tokens equal the register path's (bf16 sums
#     in another order may change a token of a random-weight model: reported, not enforced for the
#     bulk settings; the settings without TESSERA_DECODE_BULK run the register path's kernels, so
#     their tokens must be equal);
# (2) gpu_generate_parity_test under each setting (each decode_linear case prints the path it took;
#     with TESSERA_DECODE_BULK set some must take the bulk path): every case must pass.
# Each step starts only while CHECK_SECONDS (default 540) leave it room, and each run is bounded, so a
# barrier that never completes ends that run, not the call. The default settings: run-ahead 4 steps,
# the attention's early trigger alone, and five bulk variants.
# Usage: [BULK_SETTINGS="...;..."] [CHECK_SECONDS=s] [DECODE_LAYERS="48 24"] decode_bulk_check.sh BIN_DIR
# SOURCE_DIR OUT_DIR. Exit 0 when every step that ran passed and every step ran.
set -uo pipefail
bin=${1:?usage: decode_bulk_check.sh BIN_DIR SOURCE_DIR OUT_DIR}
src=${2:?}
out=${3:?}
mkdir -p "$out"
limit=${CHECK_SECONDS:-540}
B=TESSERA_DECODE_BULK
settings=${BULK_SETTINGS:-"$B=1 ${B}_PIECES=4 TESSERA_DECODE_EARLY_TRIGGER=1;TESSERA_GENERATE_RUN_AHEAD=4;$B=1 ${B}_ROWS=8 ${B}_PIECES=2 TESSERA_DECODE_EARLY_TRIGGER=1;$B=1;TESSERA_DECODE_EARLY_TRIGGER=1;$B=1 ${B}_PIECES=4;$B=2 ${B}_PIECES=2 TESSERA_DECODE_EARLY_TRIGGER=1"}
IFS=';' read -r -a list <<<"$settings"
status=0
tag() { echo "$1" | tr -c 'A-Za-z0-9_\n' '_'; }
room() {  # SECONDS_NEEDED WHAT: whether the call's time leaves room for the step
  [ $((limit - SECONDS)) -ge "$1" ] && return 0
  echo "not run (CHECK_SECONDS=$limit): $2"; status=1; return 1
}
layers=${DECODE_LAYERS:-48}
first=${layers%% *}
i=0
for s in default "${list[@]}" default; do
  i=$((i + 1))
  room 60 "tokens/s [$s]" || continue
  DECODE_RUN_TIMEOUT=${DECODE_RUN_TIMEOUT:-60} DECODE_LAYERS="$layers" DECODE_NCU=0 DECODE_VARIANTS="$s" \
    "$src/test/gpu/decode_profile.sh" "$bin" "$out/run$i" >"$out/run$i.txt" 2>&1 || status=1
  echo "[$s] $(grep -oE '[0-9]+ layers .*|\{[0-9]+: .*\}' "$out/run$i.txt" | head -1) ($SECONDS s)"
  tokens="$out/run$i/tokens_${first}_gen_${first}_$(tag "$s").jsonl"
  if [ "$i" -gt 1 ]; then
    if cmp -s "$tokens" "$out/run1/tokens_${first}_gen_${first}_default.jsonl"; then
      echo "  tokens == register path"
    else
      echo "  tokens differ from the register path"
      case "$s" in
        *"$B="*) ;;
        *) echo "  FAIL: [$s] runs the register path's kernels: its tokens must equal the register path's"; status=1 ;;
      esac
    fi
  fi
done
for s in "${list[@]}"; do
  room 40 "parity [$s]" || continue
  read -r -a envs <<<"$s"
  log="$out/parity_$(tag "$s").txt"
  left=$((limit - SECONDS))
  env "${envs[@]}" timeout $((left < 120 ? left : 120)) "$bin/gpu_generate_parity_test" >"$log" 2>&1
  rc=$?
  bulk=$(grep -c 'bulk copies' "$log")
  echo "parity [$s]: exit $rc, $(grep -c '^PASS' "$log") PASS / $(grep -c '^FAIL' "$log") FAIL lines, $bulk bulk-path cases ($SECONDS s)"
  [ "$rc" -eq 0 ] || { status=1; grep '^FAIL' "$log" | head -5; }  # with TESSERA_DECODE_BULK: fails without bulk cases
done
exit $status
