#!/usr/bin/env bash
# slurm_two_node_test.sh CASE - one two-node slurm test (label slurm): the jobs/*.sbatch templates on
# the local two-node cluster of `scripts/start-local-slurm.sh --nodes 2` (nodes n1 n2 on this host,
# Open MPI kept on loopback), each compared with a reference run outside Slurm.
# Always this local cluster (never a site cluster: node_failure kills a node's daemons), so it needs
# root. Needs TESSERA_SOURCE_DIR, TESSERA_BIN_DIR and TESSERA_TEST_WORK (test/slurm/CMakeLists.txt).
# Exit 77 (CTest: skipped) with the reason when the cluster cannot run; 0 pass; 1 fail.
set -euo pipefail
CASE=${1:?usage: slurm_two_node_test.sh CASE}
SRC=${TESSERA_SOURCE_DIR:?}
BIN=${TESSERA_BIN_DIR:?}
WORK=${TESSERA_TEST_WORK:?}/two_node_$CASE
START=$SRC/scripts/start-local-slurm.sh
JOBS=$SRC/jobs
CONFIGS=$SRC/test/slurm/configs
JOB_TIMEOUT=${TESSERA_SLURM_JOB_TIMEOUT:-240}
CPU_OPTS=(--gpus-per-node=0 --cpus-per-task=1 --time=10)
CLUSTER_DIR=${TESSERA_SLURM_2NODE_DIR:-/tmp/local-slurm-2nodes}
MARKER=$TESSERA_TEST_WORK/local-slurm-2nodes-started-by-tests
# shellcheck source=slurm_test_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/slurm_test_lib.sh"

start_cluster() { LOCAL_SLURM_DIR=$CLUSTER_DIR timeout 120 "$START" --nodes 2; }

ensure_cluster() {
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null ||
    skip "Slurm is not installed (scripts/install-slurm-deps.sh installs slurmctld, slurmd, munge)"
  [[ $(id -u) -eq 0 ]] || skip "the local two-node cluster needs root to start"
  mkdir -p "$TESSERA_TEST_WORK"
  local log=$TESSERA_TEST_WORK/start-local-slurm-2nodes.log fresh=0
  [[ -d $CLUSTER_DIR ]] || fresh=1
  start_cluster >"$log" 2>&1 || { cat "$log" >&2; fail "scripts/start-local-slurm.sh --nodes 2 could not start the cluster (log above)"; }
  # remember that the tests started the daemons (and made the directory), so cluster_stop undoes it
  if grep -q "starting slurmctld" "$log" && [[ ! -e $MARKER ]]; then echo "$fresh" >"$MARKER"; fi
  export SLURM_CONF=$CLUSTER_DIR/etc/slurm.conf
  [[ $(sinfo -h -N -o '%N %T' 2>/dev/null | sort | paste -sd' ') == "n1 idle n2 idle" ]] ||
    fail "two-node cluster is not idle: $(sinfo -N 2>&1)"
}

case $CASE in
  cluster_start) # fixture setup: start the cluster once (each case re-checks)
    (ensure_cluster && echo "two-node cluster: $(sinfo -h -N -o '%N=%T/%c' | paste -sd' ')") || true
    exit 0 ;;
  cluster_stop) # fixture cleanup: stop the daemons and remove the cluster's directory if the tests made them
    if [[ -e $MARKER ]]; then
      LOCAL_SLURM_DIR=$CLUSTER_DIR "$START" --nodes 2 stop
      if [[ $(cat "$MARKER") == 1 ]]; then rm -rf "$CLUSTER_DIR"; fi
      rm -f "$MARKER"
    fi
    exit 0 ;;
esac

rm -rf "$WORK"
mkdir -p "$WORK"
ensure_cluster
CLUSTER_NAME=$(grep -oP '^ClusterName=\K\S+' "$SLURM_CONF")
trap cleanup_jobs EXIT
export TESSERA_BIN_DIR=$BIN TESSERA_JOBS_DIR=$JOBS
unset TESSERA_DRY_RUN TESSERA_MODULES TESSERA_ALLOW_CROSS_NODE_TP

# job_pids JOBID [NODE]: PIDs of processes started for the job of this cluster (their environment
# names it; the one-node cluster numbers its jobs from 1 too), on NODE if given
job_pids() {
  local f p
  for f in $(grep -lzx "SLURM_JOB_ID=$1" /proc/[0-9]*/environ 2>/dev/null || true); do
    grep -qzx "SLURM_CLUSTER_NAME=$CLUSTER_NAME" "$f" 2>/dev/null || continue
    [[ -z ${2:-} ]] || grep -qzx "SLURMD_NODENAME=$2" "$f" 2>/dev/null || continue
    p=${f#/proc/}
    echo "${p%/environ}"
  done
}

# cleanup_jobs (on exit): a case that failed midway may leave its jobs running, or, after a node
# failure, ranks that no slurmstepd will kill: cancel this cluster's jobs (the cases take turns on
# it), then SIGKILL by PID whatever of them is left after 15 s
cleanup_jobs() {
  local jobs j i left
  jobs=$(squeue -h -o %i 2>/dev/null || true)
  [[ -n $jobs ]] || return 0
  # shellcheck disable=SC2086
  scancel $jobs 2>/dev/null || true
  for ((i = 0; i < 60; i++)); do
    left=""
    for j in $jobs; do left+=" $(job_pids "$j" | paste -sd' ')"; done
    [[ -n ${left// /} ]] || return 0
    sleep 0.25
  done
  echo "cleanup: SIGKILL to the processes of jobs $jobs left after scancel:$left" >&2
  # shellcheck disable=SC2086
  kill -9 $left 2>/dev/null || true
}

# rank_placement JOBID -> "rank node local-id" per running tessera-train rank, sorted by rank
rank_placement() {
  local p env
  for p in $(job_pids "$1"); do
    [[ $(cat "/proc/$p/comm" 2>/dev/null) == tessera-train ]] || continue
    env=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null) || continue
    echo "$(grep -oP '^SLURM_PROCID=\K.*' <<<"$env") $(grep -oP '^SLURMD_NODENAME=\K.*' <<<"$env") $(grep -oP '^SLURM_LOCALID=\K.*' <<<"$env")"
  done | sort -n
}

# crashed_before_start JOBID: the job failed because a rank jumped to address 0 (Open MPI's handler
# reports "Failing at address: (nil)" with no frame past the signal trampoline, the signature of a
# call through a null function pointer) before rank 0 printed tessera-train's arguments. Once in CI
# (2026-12-02) the first two jobs of a freshly started cluster died so, inside the MPI start-up of
# this one-host fake two-node cluster (both nodes' ranks share one kernel and loopback); not
# reproduced here (two CI-ordered suite starts, 35 srun jobs under load or beside the one-node
# cluster's jobs of the same ids). Tessera calls no raw function pointer before that print, so such
# a job says nothing about training: it is submitted once more, loudly. Any other failure, or the
# same crash twice, fails the case.
crashed_before_start() {
  local out=$WORK/job-$1.out
  [[ $(job_field "$1" JobState) != COMPLETED ]] && grep -q "Failing at address: (nil)" "$out" &&
    ! grep -q "\] \[ 1\] " "$out" && ! grep -q -- "-- arguments --" "$out"
}

# train_two_nodes WHAT SET_ARGS...: train-gpt.sbatch on -N2 --ntasks-per-node=2 with tiny-gpt.toml; must
# complete, print both nodes' layout, and match `mpirun -np 4` of the same config exactly and a
# one-rank run within 1e-6
train_two_nodes() {
  local what=$1
  shift
  submit_and_wait jid -N2 --ntasks-per-node=2 "${CPU_OPTS[@]}" "$JOBS/train-gpt.sbatch" "$CONFIGS/tiny-gpt.toml" "$@"
  if crashed_before_start "$jid"; then
    job_out "$jid" >&2
    echo "WARNING [$CASE]: job $jid: a rank called address 0 before tessera-train printed its arguments" \
      "(the launch crash above); submitting the job once more" >&2
    submit_and_wait jid -N2 --ntasks-per-node=2 "${CPU_OPTS[@]}" "$JOBS/train-gpt.sbatch" "$CONFIGS/tiny-gpt.toml" "$@"
  fi
  expect_state "$jid" COMPLETED 0:0
  expect_out "$jid" "launch: srun --mpi=pmix --ntasks=4 --kill-on-bad-exit=1 $BIN/tessera-train "
  expect_out "$jid" "step finished with exit code 0"
  metrics_check "$WORK/metrics.jsonl" 5
  direct_mpirun 4 direct.log --config "$CONFIGS/tiny-gpt.toml" "$@" --set logging.metrics_file=direct.jsonl
  same_lm_loss "$WORK/metrics.jsonl" "$WORK/direct.jsonl" 5 "the two-node $what job vs mpirun -np 4"
  (cd "$WORK" && "$BIN/tessera-train" --config "$CONFIGS/tiny-gpt.toml" --set logging.metrics_file=one.jsonl >one.log 2>&1) ||
    { tail -n 30 "$WORK/one.log" >&2; fail "the one-rank reference run failed"; }
  same_lm_loss "$WORK/metrics.jsonl" "$WORK/one.jsonl" 5 "the two-node $what job vs one rank" 1e-6
}

case $CASE in
  tp2_pp2)
    # TP=2 inside each node, PP=2 across the nodes (stage 0 on n1, stage 1 on n2)
    train_two_nodes "TP=2 PP=2" --set parallel.tensor_model_parallel_size=2 --set parallel.pipeline_model_parallel_size=2
    expect_out "$jid" "layout: nodes=2 world=4 ranks/node=2 \| TP=2 PP=2 DP=1 "
    expect_out "$jid" "node n1: ranks 0-1 \(node-local 0-1; GPU = node-local rank\) \| TP groups 0-1 \| PP stages 0 \| DP ranks 0$"
    expect_out "$jid" "node n2: ranks 2-3 \(node-local 0-1; GPU = node-local rank\) \| TP groups 2-3 \| PP stages 1 \| DP ranks 0$"
    # the node-local rank tessera's runtime picks the GPU with (MPI_Comm_split_type) comes from the
    # node: world ranks 2 and 3 on n2 are local 0 and 1 there (srun's SLURM_LOCALID), not 2 and 3
    out=$(timeout 120 srun -N2 --ntasks-per-node=2 --mpi=pmix "${CPU_OPTS[@]}" "$BIN/runtime_mpi_test" local_rank 2>&1) ||
      { echo "$out" >&2; fail "runtime_mpi_test local_rank under srun -N2 --ntasks-per-node=2 failed"; }
    grep "^rank " <<<"$out" | sort
    for want in "rank 0: node n1, local rank 0 of 2" "rank 1: node n1, local rank 1 of 2" \
      "rank 2: node n2, local rank 0 of 2" "rank 3: node n2, local rank 1 of 2"; do
      grep -qF "$want (launcher's SLURM_LOCALID=" <<<"$out" || { echo "$out" >&2; fail "runtime: no '$want'"; }
    done
    pass "TP=2 in each node x PP=2 across n1/n2: lm_loss = mpirun -np 4, and one rank within 1e-6; node-local ranks 0,1 | 0,1"
    ;;

  dp2_distributed_optimizer)
    # TP=2 inside each node, DP=2 across the nodes, optimizer state sharded over the DP groups {0,2} {1,3}
    train_two_nodes "TP=2 DP=2 distributed-optimizer" --set parallel.tensor_model_parallel_size=2 \
      --set parallel.use_distributed_optimizer=true
    expect_out "$jid" "layout: nodes=2 world=4 ranks/node=2 \| TP=2 PP=1 DP=2 "
    expect_out "$jid" "node n1: ranks 0-1 \(node-local 0-1; GPU = node-local rank\) \| TP groups 0-1 \| PP stages 0 \| DP ranks 0$"
    expect_out "$jid" "node n2: ranks 2-3 \(node-local 0-1; GPU = node-local rank\) \| TP groups 2-3 \| PP stages 0 \| DP ranks 1$"
    expect_out "$jid" "use_distributed_optimizer = true"
    pass "DP=2 across n1/n2 (TP=2 inside) with the distributed optimizer: lm_loss = mpirun -np 4, and one rank within 1e-6"
    ;;

  tp_layout)
    # TP=4 on 2 ranks per node: every TP group would span n1 and n2 -> exit 2 before srun
    submit_and_wait jid -N2 --ntasks-per-node=2 "${CPU_OPTS[@]}" "$JOBS/train-gpt.sbatch" "$CONFIGS/tiny-gpt.toml" \
      --set parallel.tensor_model_parallel_size=4
    expect_state "$jid" FAILED 2:0
    expect_out "$jid" "layout does not fit the nodes: tensor_model_parallel_size 4 does not fit the ranks per node \(SLURM_TASKS_PER_NODE=2\(x2\)\): a TP group on n1 \(ranks 0-1\), n2 \(ranks 2-3\) would span nodes"
    expect_no_out "$jid" "launch: srun"
    [[ ! -e $WORK/metrics.jsonl ]] || fail "tessera-train ran although TP=4 on 2 ranks per node was refused"
    # the same job with TESSERA_ALLOW_CROSS_NODE_TP=1 (dry run): a warning, then the launch line
    submit_and_wait jid -N2 --ntasks-per-node=2 "${CPU_OPTS[@]}" --export=ALL,TESSERA_DRY_RUN=1,TESSERA_ALLOW_CROSS_NODE_TP=1 \
      "$JOBS/train-gpt.sbatch" "$CONFIGS/tiny-gpt.toml" --set parallel.tensor_model_parallel_size=4
    expect_state "$jid" COMPLETED 0:0
    expect_out "$jid" "WARNING: tensor_model_parallel_size 4 does not fit .* \(running anyway: TESSERA_ALLOW_CROSS_NODE_TP=1\)"
    expect_out "$jid" "launch: srun --mpi=pmix --ntasks=4 "
    # uneven nodes (3 + 1 ranks, dry run outside Slurm): TP=2 group {2,3} would span the nodes
    out=$(cd "$WORK" && SLURM_NTASKS=4 SLURM_NNODES=2 SLURM_TASKS_PER_NODE=3,1 TESSERA_DRY_RUN=1 "$JOBS/train-gpt.sbatch" \
      "$CONFIGS/tiny-gpt.toml" --set parallel.tensor_model_parallel_size=2 2>&1) && rc=0 || rc=$?
    [[ $rc == 2 ]] && grep -q "a TP group on node0 (ranks 0-2), node1 (ranks 3) would span nodes" <<<"$out" ||
      { echo "$out" >&2; fail "TP=2 on 3+1 ranks per node: exit $rc, expected 2 and the nodes named"; }
    # EP groups (TP*EP consecutive ranks) inside or across nodes: the layout function itself
    out=$(SLURM_NNODES=2 SLURM_TASKS_PER_NODE="4(x2)" bash -c "source '$JOBS/tessera-job-lib.sh' && tessera_node_layout 8 2 1 2 &&
      SLURM_TASKS_PER_NODE='2(x4)' SLURM_NNODES=4 tessera_node_layout 8 2 1 2" 2>&1) || { echo "$out" >&2; fail "tessera_node_layout failed"; }
    [[ $(grep -c "EP groups inside the node" <<<"$out") == 2 && $(grep -c "EP groups span nodes" <<<"$out") == 4 ]] ||
      { echo "$out" >&2; fail "EP placement: expected 2 nodes with EP inside (4 ranks/node), 4 with EP spanning (2 ranks/node)"; }
    pass "TP=4 on 2 ranks/node refused (exit 2, nodes named); TESSERA_ALLOW_CROSS_NODE_TP=1 warns; 3+1 ranks refused; EP placement reported"
    ;;

  preempt_requeue)
    # one rank per node (DP=2 across n1/n2): USR1 -> checkpoint -> requeue -> resume on both nodes again
    preempt_requeue_resume -N2 --ntasks-per-node=1
    [[ $(grep -c "layout: nodes=2 world=2 ranks/node=1 | TP=1 PP=1 DP=2" "$WORK/job-$jid.out") == 2 ]] ||
      { job_out "$jid" >&2; fail "both runs (restart 0 and 1) must use two nodes"; }
    [[ $(grep -c "node n2: ranks 1 (node-local 0; GPU = node-local rank)" "$WORK/job-$jid.out") == 2 ]] ||
      { job_out "$jid" >&2; fail "rank 1 must run on n2 before and after the requeue"; }
    pass "two-node job: USR1 -> checkpoint at $saved -> requeue -> resumed on n1+n2 -> $iters/$iters, lm_loss = uninterrupted run"
    ;;

  node_failure)
    # n2 dies mid-run (its slurmd, slurmstepd and ranks are SIGKILLed): the job must end within 60 s
    # with no rank left and a message naming the failed node; the last checkpoint must load and resume
    # exactly (lm_loss of the failed job, then the resumed run = an uninterrupted run).
    # lr_decay_iters is fixed so the schedule does not depend on train_iters (the resumed run is shorter)
    sets=(--set parallel.tensor_model_parallel_size=2 --set checkpoint.save=ckpt --set checkpoint.save_interval=5
      --set optimizer.lr_decay_iters=1000)
    jid=$(cd "$WORK" && sbatch --parsable --chdir="$WORK" --output="$WORK/job-%j.out" --no-requeue -N2 --ntasks-per-node=2 \
      "${CPU_OPTS[@]}" "$JOBS/train-gpt.sbatch" "$CONFIGS/tiny-gpt.toml" "${sets[@]}" --set training.train_iters=100000)
    # fail n2 soon after the first checkpoint (iteration 5), so the reference runs below stay short
    for ((i = 0; i < 1200; i++)); do [[ -s $WORK/ckpt/latest_checkpointed_iteration.txt ]] && break; sleep 0.1; done
    [[ -s $WORK/ckpt/latest_checkpointed_iteration.txt ]] || { job_out "$jid" >&2; fail "no checkpoint after 120 s of training"; }
    # pause the ranks (iterations take ~0.1 s, the checks below longer): the job stays near iteration 5
    ranks=""
    for p in $(job_pids "$jid"); do [[ $(cat "/proc/$p/comm" 2>/dev/null) == tessera-train ]] && ranks+=" $p"; done
    # shellcheck disable=SC2086
    kill -STOP $ranks
    # where the ranks really are: world rank, node, SLURM_LOCALID (what the printed layout says)
    placement=$(rank_placement "$jid" | paste -sd,)
    [[ $placement == "0 n1 0,1 n1 1,2 n2 0,3 n2 1" ]] || fail "ranks run at '$placement', expected 0 n1 0,1 n1 1,2 n2 0,3 n2 1"
    expect_out "$jid" "node n2: ranks 2-3 \(node-local 0-1; GPU = node-local rank\) \| TP groups 2-3 \| PP stages 0 \| DP ranks 1$"
    victims=$(cat "$CLUSTER_DIR/run/slurmd-n2.pid")
    for p in $(job_pids "$jid" n2); do victims+=" $p $(awk '/^PPid:/{print $2}' "/proc/$p/status" 2>/dev/null || true)"; done
    # only the job's ranks on n2, their slurmstepd (parent) and n2's slurmd
    for p in $victims; do [[ $(cat "/proc/$p/comm" 2>/dev/null) =~ ^(tessera-train|slurmstepd|slurmd)$ ]] || fail "refusing to kill pid $p ($(cat "/proc/$p/comm" 2>/dev/null))"; done
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086
    kill -9 $victims
    # shellcheck disable=SC2086
    kill -CONT $ranks 2>/dev/null || true # n1's ranks go on, towards their peers on the dead node
    ended=""
    for ((i = 0; i < 360; i++)); do
      st=$(job_field "$jid" JobState)
      if [[ $st != RUNNING && $st != CONFIGURING && -z $(job_pids "$jid") ]]; then ended=$(date +%s.%N); break; fi
      sleep 0.25
    done
    [[ -n $ended ]] || { job_out "$jid" >&2; fail "job still $st 90 s after n2 failed, processes: $(job_pids "$jid" | paste -sd' ')"; }
    secs=$(python3 -c "print(f'{$ended - $t0:.1f}')")
    python3 -c "import sys; sys.exit(0 if $ended - $t0 <= 60 else 1)" || fail "job ended ${secs} s after n2 failed (limit 60 s)"
    expect_out "$jid" "srun: error: Node failure on n2"
    [[ $(job_field "$jid" Reason) == NodeDown ]] || fail "job Reason=$(job_field "$jid" Reason), expected NodeDown"
    # bring n2 back (start restarts its slurmd and resumes it): the job then ends as NODE_FAIL
    start_cluster >"$WORK/restart.log" 2>&1 || { cat "$WORK/restart.log" >&2; fail "n2 did not come back"; }
    for ((i = 0; i < 120; i++)); do [[ $(job_field "$jid" JobState) == NODE_FAIL ]] && break; sleep 0.25; done
    [[ $(job_field "$jid" JobState) == NODE_FAIL ]] || fail "JobState=$(job_field "$jid" JobState) after n2 returned, expected NODE_FAIL"
    # the last checkpoint loads: resume from it (mpirun -np 4, same layout) up to 3 iterations further
    saved=$(cat "$WORK/ckpt/latest_checkpointed_iteration.txt" 2>/dev/null || true)
    [[ $saved =~ ^[0-9]+$ && $saved -ge 5 ]] || { ls -R "$WORK/ckpt" >&2; fail "no checkpoint (tracker: '$saved')"; }
    until=$((saved + 3))
    direct_mpirun 4 resumed.log --config "$CONFIGS/tiny-gpt.toml" "${sets[@]}" --set checkpoint.load=ckpt \
      --set checkpoint.save=ckpt-resumed --set "training.train_iters=$until" --set logging.metrics_file=resumed.jsonl
    grep -qE "loaded checkpoint from ckpt.* at iteration $saved " "$WORK/resumed.log" || { cat "$WORK/resumed.log" >&2; fail "checkpoint $saved did not load"; }
    # the uninterrupted reference: the same config from scratch to the same iteration
    direct_mpirun 4 uninterrupted.log --config "$CONFIGS/tiny-gpt.toml" "${sets[@]}" --set checkpoint.save=ckpt-uninterrupted \
      --set "training.train_iters=$until" --set logging.metrics_file=uninterrupted.jsonl
    # the failed job's rows up to `until` (a row cut by the kill is dropped) + the resumed run's: every
    # iteration once or, if both logged it, with the same lm_loss - and all equal to the reference
    python3 - "$WORK/metrics.jsonl" "$WORK/resumed.jsonl" "$until" >"$WORK/combined.jsonl" <<'PY' || fail "cannot combine the metrics"
import json, sys
until = int(sys.argv[3])
for path in sys.argv[1:3]:
    for line in open(path):
        try: row = json.loads(line)
        except ValueError: continue
        if row.get("iteration", 0) <= until: print(json.dumps(row))
PY
    same_lm_loss "$WORK/combined.jsonl" "$WORK/uninterrupted.jsonl" "$until" "the failed job + the run resumed from its checkpoint"
    pass "n2 killed: job ended in ${secs} s (Node failure on n2, NODE_FAIL, no rank left); checkpoint $saved loads and resumes exactly (to $until)"
    ;;

  preprocess)
    # preprocess.sbatch with one rank on each node writes exactly what one process writes
    write_corpus "$WORK/corpus.jsonl"
    tok=(--set "preprocess.vocab_file=$SRC/share/tokenizers/gpt2/vocab.json"
      --set "preprocess.merge_file=$SRC/share/tokenizers/gpt2/merges.txt")
    submit_and_wait jid -N2 --ntasks-per-node=1 --cpus-per-task=1 --time=10 "$JOBS/preprocess.sbatch" "$CONFIGS/preprocess.toml" "${tok[@]}"
    expect_state "$jid" COMPLETED 0:0
    expect_out "$jid" "layout: nodes=2 ranks=2 workers/rank=1 \| corpus.jsonl -> out/corpus"
    mkdir -p "$WORK/single"
    (cd "$WORK" && "$BIN/tessera-preprocess" --input corpus.jsonl --output-prefix single/corpus --json-keys text \
      --append-eod --vocab-file "$SRC/share/tokenizers/gpt2/vocab.json" --merge-file "$SRC/share/tokenizers/gpt2/merges.txt" \
      --log-interval 10 >single.log 2>&1) || { cat "$WORK/single.log" >&2; fail "single-process tessera-preprocess failed"; }
    for ext in bin idx; do
      [[ -s $WORK/out/corpus_text_document.$ext ]] || fail "no out/corpus_text_document.$ext"
      cmp "$WORK/out/corpus_text_document.$ext" "$WORK/single/corpus_text_document.$ext" ||
        fail "two-node .$ext differs from the single-process one"
    done
    pass "preprocess.sbatch on n1+n2 = single process ($(stat -c %s "$WORK/out/corpus_text_document.bin") bytes)"
    ;;

  *) fail "unknown case" ;;
esac
