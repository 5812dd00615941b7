#!/usr/bin/env bash
# Mixture-of-experts checkpoints (issue 19): a tiny MoE GPT trained 1..10 at EP=2 x DP=2 on 4 ranks
# saves one model file per EP rank (mp_rank_00_000_000.h5, mp_rank_00_000_001.h5) and resumes
# 11..20 at the same layout and, resharding on load, at EP=1 on one rank and EP=4 on 4 ranks; the
# same with the distributed optimizer (its state sharded over DP for dense and expert-DP for expert
# parameters), resumed at EP=2 x DP=2, EP=2 x DP=1 and on one rank; and tessera-convert reshard of
# the EP=2 checkpoints to TP=2 (EP=1), TP=2 x EP=2 x DP=2 and EP=2 x DP=4 with distributed-optimizer
# files, resumed at those layouts (an EP that does not divide the experts exits 2). Every resumed lm_loss,
# moe_aux_loss and grad_norm is within 1e-5 of the uninterrupted single-rank run's.
# Usage: moe_checkpoint.sh MPIEXEC TESSERA_TRAIN [TESSERA_CONVERT]
set -uo pipefail
mpiexec="$1 --oversubscribe --allow-run-as-root"
train=$2
convert=${3:-$(dirname "$train")/tessera-convert}
check=$(dirname "$0")/../tools/metrics_check.py
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
status=0
fail() { echo "FAIL: $*"; status=1; }
common=(--set data.mock_data=true --set data.vocab_size=500 --set model.num_layers=2 --set model.hidden_size=32
  --set model.num_attention_heads=4 --set model.ffn_hidden_size=64 --set model.seq_length=16
  --set model.max_position_embeddings=16 --set model.hidden_dropout=0 --set model.attention_dropout=0
  --set model.num_experts=8 --set model.moe_router_topk=2 --set model.moe_ffn_hidden_size=48
  --set model.moe_aux_loss_coeff=0.01 --set model.moe_z_loss_coeff=0.001
  --set training.micro_batch_size=2 --set training.global_batch_size=8 --set training.device=cpu
  --set training.precision=\"fp32\" --set training.eval_interval=0 --set optimizer.lr=3e-3
  --set optimizer.lr_warmup_iters=2 --set optimizer.lr_decay_iters=20 --set logging.log_interval=1)
ep() { echo "--set parallel.expert_model_parallel_size=$1"; }
distopt="--set parallel.use_distributed_optimizer=true"
# run NAME NP ITERS ARGS...: tessera-train, metrics in $work/NAME.jsonl
run() {
  local name=$1 np=$2 iters=$3
  shift 3
  # shellcheck disable=SC2068
  $mpiexec -np "$np" "$train" "${common[@]}" --set training.train_iters="$iters" \
    --set logging.metrics_file=\"$work/$name.jsonl\" $@ >"$work/$name.log" 2>&1 ||
    { tail -20 "$work/$name.log"; fail "$name: exited non-zero"; return 1; }
}
compare() {  # NAME FIRST: iterations FIRST..20 against the reference's
  python3 -c 'import json, sys
for line in open(sys.argv[1]):
    if line.strip() and json.loads(line).get("iteration", 0) >= int(sys.argv[2]): print(line, end="")' \
    "$work/ref.jsonl" "$2" >"$work/ref_from_$2.jsonl"
  python3 "$check" "$work/$1.jsonl" --first "$2" --iterations 20 --reference "$work/ref_from_$2.jsonl" \
    --tolerance lm_loss=1e-5 --tolerance moe_aux_loss=1e-5 --tolerance grad_norm=1e-5 >"$work/$1.check" 2>&1 &&
    echo "$1: iterations $2..20 equal the single-rank run's (1e-5)" ||
    { cat "$work/$1.check"; fail "$1 differs from the single-rank run"; }
}
run ref 1 20
run saved 4 10 "$(ep 2) --set checkpoint.save=\"$work/ckpt\""
ls "$work/ckpt/iter_0000010" | grep -q '^mp_rank_00_000_001.h5$' || fail "no mp_rank_00_000_001.h5 (EP rank 1's experts): $(ls "$work/ckpt/iter_0000010")"
run resume_ep2 4 20 "$(ep 2) --set checkpoint.load=\"$work/ckpt\"" && compare resume_ep2 11
run resume_ep1 1 20 "--set checkpoint.load=\"$work/ckpt\"" && compare resume_ep1 11
run resume_ep4 4 20 "$(ep 4) --set checkpoint.load=\"$work/ckpt\"" && compare resume_ep4 11
run saved_distopt 4 10 "$(ep 2) $distopt --set checkpoint.save=\"$work/ckpt_distopt\""
run resume_distopt_ep2 4 20 "$(ep 2) $distopt --set checkpoint.load=\"$work/ckpt_distopt\"" && compare resume_distopt_ep2 11
run resume_distopt_ep2_dp2 2 20 "$(ep 2) $distopt --set checkpoint.load=\"$work/ckpt_distopt\"" &&
  compare resume_distopt_ep2_dp2 11
run resume_distopt_ep1 1 20 "--set checkpoint.load=\"$work/ckpt_distopt\"" && compare resume_distopt_ep1 11
"$convert" reshard --input "$work/ckpt" --output "$work/ckpt_tp2" --tensor-model-parallel-size 2 >"$work/reshard.log" 2>&1 ||
  { cat "$work/reshard.log"; fail "tessera-convert reshard of the MoE checkpoint to TP=2"; }
run resume_converted_tp2_ep2 8 20 "--tp 2 $(ep 2) --set checkpoint.load=\"$work/ckpt_tp2\"" && compare resume_converted_tp2_ep2 11
# The distributed-optimizer checkpoint (EP=2 x DP=2) rewritten at TP=2 x EP=2 x DP=2: one file per
# (TP, EP) rank, each expert in its EP rank's files only; resumed at that layout on 4 ranks.
"$convert" reshard --input "$work/ckpt_distopt" --output "$work/ckpt_tp2_ep2" --tensor-model-parallel-size 2 \
  --expert-model-parallel-size 2 --data-parallel-size 2 >"$work/reshard_ep.log" 2>&1 ||
  { cat "$work/reshard_ep.log"; fail "tessera-convert reshard to TP=2 x EP=2"; }
files=$(cd "$work/ckpt_tp2_ep2/iter_0000010" && ls mp_rank_* | tr '\n' ' ')
[ "$files" = "mp_rank_00_000_000.h5 mp_rank_00_000_001.h5 mp_rank_01_000_000.h5 mp_rank_01_000_001.h5 " ] ||
  fail "tessera-convert reshard to TP=2 x EP=2 wrote: $files"
run resume_converted_tp2_ep2_dp2 4 20 "--tp 2 $(ep 2) --set checkpoint.load=\"$work/ckpt_tp2_ep2\"" &&
  compare resume_converted_tp2_ep2_dp2 11
# The same rewritten at EP=2 x DP=2 with distributed-optimizer files (an expert's state sharded over
# its EP rank's DP ranks only), resumed at that layout.
"$convert" reshard --input "$work/ckpt_distopt" --output "$work/ckpt_ep2_distopt" --expert-model-parallel-size 2 \
  --data-parallel-size 4 --use-distributed-optimizer >"$work/reshard_distopt.log" 2>&1 ||
  { cat "$work/reshard_distopt.log"; fail "tessera-convert reshard to EP=2 x DP=4 with the distributed optimizer"; }
run resume_converted_ep2_distopt 4 20 "$(ep 2) $distopt --set checkpoint.load=\"$work/ckpt_ep2_distopt\"" &&
  compare resume_converted_ep2_distopt 11
rc=0
"$convert" reshard --input "$work/ckpt" --output "$work/ckpt_ep3" --expert-model-parallel-size 3 \
  --data-parallel-size 3 >"$work/reshard_ep3.log" 2>&1 || rc=$?
[ $rc -eq 2 ] && grep -q "expert_model_parallel_size = 3 must divide model.num_experts = 8" "$work/reshard_ep3.log" ||
  fail "tessera-convert reshard --expert-model-parallel-size 3: exit $rc, expected 2 naming the key"
[ $status -eq 0 ] && echo "moe checkpoint: ok"
exit $status
