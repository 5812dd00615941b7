#!/usr/bin/env bash
# Everything the GPU acceptance needs, in one run on the GPU machine (device time is scarce): the
# gpu-label parity tests, the loss-curve and parallel-parity scripts and the training benchmarks.
# Usage (from a bundle made by ../shared/tools/device-bundle): gpu_check.sh BUNDLE_BIN SOURCE_DIR OUT [what...]
# what: parity | curve | parallel | bench1 | bench2 | dp | convert | generate | asyncsave | recompute | llama | bert | t5 | moe |
# deterministic (default: all but dp, convert, generate, asyncsave, recompute, llama, bert, t5, moe and deterministic;
# moe = moe_gpu_check.sh (MoE op parity, GPU-vs-CPU MoE losses, the 8-expert benchmark), OUT/moe/summary.txt;
# deterministic = gpu_deterministic_parity_test, the op parity suites with TESSERA_TEST_DETERMINISTIC=1
# and deterministic_check.sh, OUT/deterministic_summary.txt; llama = llama_gpu_check.sh; bert = bert_gpu_check.sh; t5 = t5_gpu_check.sh;
# asyncsave = async_save_step_time.sh and async_save_kill_check.sh; recompute =
# recompute_check.sh, OUT/recompute_summary.txt; convert = convert_hf_check.sh; dp = the 124M DP=2 scaling pair; generate = generate_bench.sh:
# generation parity and decode speed vs transformers, shared files from TESSERA_DATA_DIR, e.g. a bundle
# made with -d ../shared/fixtures -d ../shared/bench). Results: OUT/summary.txt (exit code
# and last lines of each step), OUT/log.txt (every step's whole output), OUT/bench.jsonl (benchmark JSON).
set -uo pipefail
bin=$1
src=$2
out=$3
shift 3
what=("${@:-parity curve parallel bench1 bench2}")
what=" ${what[*]} "
mkdir -p "$out"
gpus=$(nvidia-smi -L | grep -c '^GPU')
status=0
step() {  # name command...
  local name=$1
  shift
  local start=$SECONDS
  "$@" >"$out/step.txt" 2>&1
  local rc=$?
  echo "== $name: exit $rc, $((SECONDS - start)) s" | tee -a "$out/summary.txt"
  tail -n 12 "$out/step.txt" | tee -a "$out/summary.txt"
  { echo "== $name"; cat "$out/step.txt"; } >>"$out/log.txt"
  grep '^{"benchmark"' "$out/step.txt" >>"$out/bench.jsonl" || true
  rm -f "$out/step.txt"
  [ $rc -eq 0 ] || status=1
}
bench() {  # name ranks args...
  local name=$1 ranks=$2
  shift 2
  if [ "$ranks" -gt 1 ]; then
    step "$name" mpirun --allow-run-as-root --oversubscribe -np "$ranks" "$bin/tessera-bench" train "$@"
  else
    step "$name" "$bin/tessera-bench" train "$@"
  fi
}
if [[ $what == *" parity "* ]]; then
  for t in gpu_ops_parity_test gpu_flash_attention_parity_test gpu_fused_ops_parity_test gpu_multi_tensor_parity_test \
    gpu_gpt_training_parity_test gpu_generate_parity_test gpu_llama_ops_parity_test gpu_deterministic_parity_test \
    gpu_moe_ops_parity_test; do
    [ -x "$bin/$t" ] && step "$t" "$bin/$t"
  done
fi
if [[ $what == *" deterministic "* ]]; then
  step gpu_deterministic_parity_test "$bin/gpu_deterministic_parity_test"
  step gpu_ops_parity_deterministic env TESSERA_TEST_DETERMINISTIC=1 "$bin/gpu_ops_parity_test"
  step gpu_fused_ops_parity_deterministic env TESSERA_TEST_DETERMINISTIC=1 "$bin/gpu_fused_ops_parity_test"
  step gpu_flash_attention_parity_deterministic env TESSERA_TEST_DETERMINISTIC=1 \
    "$bin/gpu_flash_attention_parity_test" "$out/flash_attention_deterministic_errors.txt" quick
  step deterministic_check "$src/test/gpu/deterministic_check.sh" "$bin" "$src" "$out"
fi
[[ $what == *" curve "* ]] && step loss_curve "$src/test/gpu/loss_curve_test.sh" "$bin" "$src"
if [[ $what == *" parallel "* ]] && [ "$gpus" -ge 2 ]; then
  step nccl_collectives mpirun --allow-run-as-root --oversubscribe -np 2 "$bin/gpu_nccl_collectives_test"
  step parallel_parity "$src/test/gpu/parallel_parity_test.sh" "$bin" "$src" mpirun
fi
[[ $what == *" generate "* ]] && step generate "$src/test/gpu/generate_bench.sh" "$bin" "$src" "$out/generate" \
  "${TESSERA_DATA_DIR:-$src/../shared}"
[[ $what == *" recompute "* ]] && step recompute "$src/test/gpu/recompute_check.sh" "$bin" "$src" "$out"
[[ $what == *" llama "* ]] && step llama "$src/test/gpu/llama_gpu_check.sh" "$bin" "$src" "$out/llama"
[[ $what == *" bert "* ]] && step bert "$src/test/gpu/bert_gpu_check.sh" "$bin" "$src" "$out/bert"
[[ $what == *" t5 "* ]] && step t5 "$src/test/gpu/t5_gpu_check.sh" "$bin" "$out/t5"
[[ $what == *" moe "* ]] && step moe "$src/test/gpu/moe_gpu_check.sh" "$bin" "$src" "$out/moe"
[[ $what == *" convert "* ]] && step convert_hf "$src/test/gpu/convert_hf_check.sh" "$bin" "$src" "$out"
# Issue 23: step time while an asynchronous save of the 124M checkpoint is in flight (within 10% of
# the others) and async == sync checkpoints (h5diff: bundle /usr/bin/h5diff into BUNDLE_BIN).
[[ $what == *" asyncsave "* ]] && step async_save_step_time "$src/test/gpu/async_save_step_time.sh" "$bin" "$src" \
  "$out/async_save"
[[ $what == *" asyncsave "* ]] && step async_save_kill "$src/test/gpu/async_save_kill_check.sh" "$bin" "$src" \
  "$out/async_kill"
cfg=$src/share/configs/bench
if [[ $what == *" dp "* ]] && [ "$gpus" -ge 2 ]; then
  bench bench_124m_1gpu 1 --config "$cfg/gpt2-124m.toml"
  bench bench_124m_dp2 2 --config "$cfg/gpt2-124m.toml" --set training.global_batch_size=32
  bench bench_124m_dp2_distopt 2 --config "$cfg/gpt2-124m.toml" --set training.global_batch_size=32 \
    --set parallel.use_distributed_optimizer=true
fi
if [[ $what == *" bench1 "* ]]; then
  bench bench_124m_1gpu 1 --config "$cfg/gpt2-124m.toml"
  bench bench_1.5b_1gpu 1 --config "$cfg/gpt2-1.5b.toml"
fi
if [[ $what == *" bench2 "* ]] && [ "$gpus" -ge 2 ]; then
  bench bench_124m_dp2 2 --config "$cfg/gpt2-124m.toml" --set training.global_batch_size=32
  bench bench_124m_dp2_distopt 2 --config "$cfg/gpt2-124m.toml" --set training.global_batch_size=32 \
    --set parallel.use_distributed_optimizer=true
  # GPT-2 1.5B has 25 heads, which do not split over 2 ranks (nor in Megatron): the TP=2 comparison
  # uses the nearest TP-compatible shape, 26 heads of 64 (hidden 1664, 48 layers, 1.68B parameters).
  tp_shape=(--config "$cfg/gpt2-1.5b.toml" --set model.hidden_size=1664 --set model.num_attention_heads=26)
  bench bench_1.7b_1gpu 1 "${tp_shape[@]}"
  bench bench_1.7b_tp2_sp 2 "${tp_shape[@]}" --set parallel.tensor_model_parallel_size=2 \
    --set parallel.sequence_parallel=true
  bench bench_1.7b_tp2 2 "${tp_shape[@]}" --set parallel.tensor_model_parallel_size=2
fi
exit $status
