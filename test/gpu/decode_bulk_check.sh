#!/usr/bin/env bash
# The fused decode linear's bulk-copy path (TESSERA_DECODE_BULK, kernels/decode_linear_bulk.cu) against
# its register path, on one GPU in one call (issue 18's 1.5B batch-1 floor):
# (1) gpu_generate_parity_test under each setting below (120 s bound each, so a barrier that never
#     completes ends the run, not the call): every case must pass, and with TESSERA_DECODE_BULK set
#     some decode_linear cases must take the bulk path. The first setting,
#     TESSERA_GENERATE_RUN_AHEAD=4, is the register path with the host 4 decode steps behind the GPU
#     (generate/generator.cpp); the second, TESSERA_DECODE_EARLY_TRIGGER=1 alone, the register path
#     with the attention triggering early; the others take the bulk path;
# (2) decode_profile.sh (1.5B shape, batch 1, bf16, greedy, prompt 128, 256 new tokens, at 48 and 24
#     layers) alternating the register path ("default", first and last) with the bulk settings, and
#     whether each setting's 48-layer tokens equal the register path's (bf16 sums in another order may
#     change a token of a random-weight model: reported, not enforced; the settings without
#     TESSERA_DECODE_BULK run the register path's kernels, so their tokens must be equal).
# Usage: [BULK_SETTINGS="...;..."] decode_bulk_check.sh BIN_DIR SOURCE_DIR OUT_DIR. Exit 0 when every
# parity run passed and every generation ran.
set -uo pipefail
bin=${1:?usage: decode_bulk_check.sh BIN_DIR SOURCE_DIR OUT_DIR}
src=${2:?}
out=${3:?}
mkdir -p "$out"
B=TESSERA_DECODE_BULK
settings=${BULK_SETTINGS:-"TESSERA_GENERATE_RUN_AHEAD=4;TESSERA_DECODE_EARLY_TRIGGER=1;$B=1;$B=1 ${B}_PIECES=4;$B=1 ${B}_PIECES=4 TESSERA_DECODE_EARLY_TRIGGER=1;$B=2 ${B}_PIECES=2 TESSERA_DECODE_EARLY_TRIGGER=1;$B=1 ${B}_ROWS=8 ${B}_PIECES=2 TESSERA_DECODE_EARLY_TRIGGER=1"}
status=0
IFS=';' read -r -a list <<<"$settings"
for s in "${list[@]}"; do
  read -r -a envs <<<"$s"
  tag=$(echo "$s" | tr -c 'A-Za-z0-9_\n' '_')
  env "${envs[@]}" timeout 120 "$bin/gpu_generate_parity_test" >"$out/parity_$tag.txt" 2>&1
  rc=$?
  echo "parity [$s]: exit $rc, $(grep -c '^PASS' "$out/parity_$tag.txt") PASS / $(grep -c '^FAIL' "$out/parity_$tag.txt") FAIL lines, $(grep -c 'bulk copies' "$out/parity_$tag.txt") bulk-path cases"
  [ "$rc" -eq 0 ] || { status=1; grep '^FAIL' "$out/parity_$tag.txt" | head -5; }
done
DECODE_NCU=0 DECODE_VARIANTS="default;$settings;default" "$src/test/gpu/decode_profile.sh" "$bin" "$out/profile" || status=1
python3 - "$out/profile" "$settings" <<'PY'
import json, os, sys
out, settings = sys.argv[1], sys.argv[2].split(";")
tag = lambda v: "".join(c if c.isalnum() or c == "_" else "_" for c in v)
def tokens(v):
    p = f"{out}/tokens_48_gen_48_{tag(v)}.jsonl"
    return [json.loads(l)["output_ids"] for l in open(p)] if os.path.exists(p) else None
ref = tokens("default")
ok = True
for v in settings:
    t = tokens(v)
    same = t is not None and t == ref
    print(f"48-layer tokens [{v}] == register path: {same}")
    if "TESSERA_DECODE_BULK=" not in v and not same:
        print(f"FAIL: [{v}] runs the register path's kernels: its tokens must equal the register path's")
        ok = False
sys.exit(0 if ok else 1)
PY
[ "$?" -eq 0 ] || status=1
exit $status
