#!/usr/bin/env bash
# The Llama-style [model] keys at the user surface (issue 15, acceptance 5): tessera-train --help lists
# each with its default; invalid values and combinations exit 2 with a message naming the keys, also
# one found only at model build on 2 ranks (query groups not divisible by TP), printed once per rank.
# Usage: llama_keys_test.sh BIN_DIR MPIEXEC
set -uo pipefail
bin=$1
mpiexec=$2
status=0
fail() { echo "FAIL: $*"; status=1; }
help=$("$bin/tessera-train" --help 2>&1)
for key in normalization norm_epsilon activation position_embedding_type rotary_base rotary_percent \
  rotary_interleaved untie_embeddings_and_output_weights add_bias_linear num_query_groups attention_head_type; do
  # --help prints the schema as TOML sections: "[model]" then "    key = default    # help"
  sed -n '/^ *\[model\]/,/^ *\[parallel\]/p' <<<"$help" | grep -qE "^ *$key = " || fail "--help does not list model.$key"
done
common=(--set data.mock_data=true --set data.vocab_size=100 --set training.device=cpu --set training.train_iters=1
  --set model.num_layers=1 --set model.hidden_size=48 --set model.num_attention_heads=6 --set model.seq_length=16
  --set model.max_position_embeddings=16 --set training.micro_batch_size=1 --set training.global_batch_size=2)
expect_exit2() {  # description ranks expected-substrings... -- overrides...
  local what=$1 ranks=$2
  shift 2
  local expected=()
  while [ "$1" != "--" ]; do expected+=("$1"); shift; done
  shift
  local out rc
  out=$("$mpiexec" --oversubscribe --allow-run-as-root -np "$ranks" "$bin/tessera-train" "${common[@]}" "$@" 2>&1)
  rc=$?
  [ $rc -eq 2 ] || { fail "$what: exit $rc, not 2: $(tail -3 <<<"$out")"; return; }
  for e in "${expected[@]}"; do grep -qF -- "$e" <<<"$out" || fail "$what: the message does not name '$e': $out"; done
  local count  # once per failing rank (each rank that finds the error prints it once, then the job aborts)
  count=$(grep -F -- "${expected[0]}" <<<"$out" | grep -c "rank 0\]\|^error\|^\S*error")
  [ "$count" -le 1 ] || fail "$what: rank 0 prints the message $count times"
  echo "$what: exit 2 naming ${expected[*]}"
}
expect_exit2 "rotary_percent 0" 1 "model.rotary_percent" -- --set model.position_embedding_type=\"rope\" \
  --set model.rotary_percent=0.0
expect_exit2 "query groups not dividing heads" 1 "model.num_query_groups = 4" "model.num_attention_heads" -- \
  --set model.num_query_groups=4
expect_exit2 "query groups not dividing TP" 2 "model.num_query_groups" "parallel.tensor_model_parallel_size" -- \
  --set model.num_query_groups=3 --set model.num_attention_heads=6 --tp 2 --set training.global_batch_size=1
expect_exit2 "multiquery with 2 groups" 1 "model.attention_head_type" "model.num_query_groups" -- \
  --set model.attention_head_type=\"multiquery\" --set model.num_query_groups=2
expect_exit2 "unknown normalization" 1 "model.normalization" -- --set model.normalization=\"batchnorm\"
expect_exit2 "relative positions" 1 "model.position_embedding_type" "not supported yet" -- \
  --set model.position_embedding_type=\"relative\"
[ $status -eq 0 ] && echo "llama keys: ok"
exit $status
