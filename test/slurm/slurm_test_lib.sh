# shellcheck shell=bash
# slurm_test_lib.sh - helpers shared by the slurm tests (sourced by slurm_job_test.sh and
# slurm_two_node_test.sh): pass/fail/skip, submitting and waiting for jobs, checking their state and
# output, reference runs outside Slurm and comparing lm_loss sequences.
# The sourcing script sets CASE, WORK (the case's directory), BIN, SRC, JOBS, CONFIGS, CPU_OPTS (sbatch
# options of a CPU-only allocation), START (scripts/start-local-slurm.sh: its `wait` polls the cluster
# SLURM_CONF names) and JOB_TIMEOUT.

fail() { echo "FAIL [$CASE]: $*" >&2; exit 1; }
skip() { echo "SKIP [$CASE]: $*"; exit 77; }
pass() { echo "PASS [$CASE]: $*"; }

# submit_and_wait OUTVAR SBATCH_ARGS...: sbatch --parsable from $WORK; waits (0.25 s polls, faster
# than sbatch --wait) and sets OUTVAR to the job id. The job's output is $WORK/job-<id>.out.
submit_and_wait() {
  local -n _jid=$1
  shift
  _jid=$(cd "$WORK" && sbatch --parsable --chdir="$WORK" --output="$WORK/job-%j.out" "$@") || fail "sbatch $* was rejected"
  _jid=${_jid%%;*}
  "$START" wait "$_jid" "$JOB_TIMEOUT" || true
}
job_field() { scontrol -o show job "$1" | grep -oP "(^| )$2=\K\S+" || true; }
job_out() { cat "$WORK/job-$1.out"; }
expect_state() { # JOBID STATE EXITCODE
  local st ec
  st=$(job_field "$1" JobState)
  ec=$(job_field "$1" ExitCode)
  [[ $st == "$2" && $ec == "$3" ]] || { job_out "$1" >&2; fail "job $1: JobState=$st ExitCode=$ec, expected $2 / $3"; }
}
expect_out() { grep -qE -- "$2" "$WORK/job-$1.out" || { job_out "$1" >&2; fail "job $1 output lacks /$2/"; }; }
expect_no_out() { ! grep -qE -- "$2" "$WORK/job-$1.out" || { job_out "$1" >&2; fail "job $1 output has /$2/"; }; }

# dry_run_fails NTASKS EXPECTED_REGEX TEMPLATE ARGS...: the template run outside Slurm as a dry run
# (SLURM_NTASKS set by hand) must exit 2 with the message - the layout checks, without a job
dry_run_fails() {
  local n=$1 want=$2 out rc=0
  shift 2
  out=$(cd "$WORK" && SLURM_NTASKS=$n TESSERA_DRY_RUN=1 "$@" 2>&1) || rc=$?
  [[ $rc == 2 ]] && grep -qE -- "$want" <<<"$out" && ! grep -q "launch: srun" <<<"$out" ||
    { echo "$out" >&2; fail "$* on $n ranks: exit $rc, expected 2 and /$want/ before any launch"; }
}

# metrics_check FILE ITERS: one row per iteration 1..ITERS with a finite lm_loss
metrics_check() {
  python3 - "$1" "$2" <<'PY' || fail "metrics file $1 is wrong"
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
train = [r for r in rows if "lm_loss" in r]
its = [r["iteration"] for r in train]
assert its == list(range(1, int(sys.argv[2]) + 1)), f"iterations {its}"
assert all(math.isfinite(r["lm_loss"]) and r["lm_loss"] > 0 for r in train), train
print(f"metrics: {len(train)} iterations, lm_loss {train[0]['lm_loss']:.4f} -> {train[-1]['lm_loss']:.4f}")
PY
}

# direct_mpirun NP LOG ARGS...: tessera-train started by `mpirun -np NP` in $WORK, outside Slurm (the
# reference runs the jobs are compared with)
direct_mpirun() {
  local np=$1 log=$2
  shift 2
  (cd "$WORK" && OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    mpirun --oversubscribe -np "$np" "$BIN/tessera-train" "$@" >"$log" 2>&1) ||
    { tail -n 40 "$WORK/$log" >&2; fail "mpirun -np $np tessera-train $* failed"; }
}

# same_lm_loss JOB_METRICS REFERENCE_METRICS ITERS WHAT [TOLERANCE]: per iteration 1..ITERS the job's
# lm_loss equals the reference's - exactly, or within TOLERANCE (absolute) when one is given (a
# reference with another parallel layout sums in another order). A metrics file is appended to by a
# resumed run, so the rows are chosen by iteration: every iteration must be present, and an iteration
# written by two attempts (logged before the checkpoint it was then replayed from) must have the same
# lm_loss both times. Prints the largest difference.
same_lm_loss() {
  python3 - "$1" "$2" "$3" "${5:-0}" <<'PY' || fail "lm_loss of $4 differs from the reference run"
import json, sys
def by_iteration(path):
    rows = {}
    for line in open(path):
        r = json.loads(line) if line.strip() else {}
        if "lm_loss" not in r: continue
        rows.setdefault(r["iteration"], []).append(r["lm_loss"])
    for it, losses in rows.items():
        assert all(l == losses[0] for l in losses), f"{path}: iteration {it} written {len(losses)} times with different lm_loss {losses}"
    return {it: losses[-1] for it, losses in rows.items()}, sum(len(v) - 1 for v in rows.values())
job, repeated = by_iteration(sys.argv[1])
ref, _ = by_iteration(sys.argv[2])
want = list(range(1, int(sys.argv[3]) + 1))
assert sorted(job) == want, f"job iterations {sorted(job)}"
assert sorted(ref) == want, f"reference iterations {sorted(ref)}"
import math
bad = [(it, job[it], ref[it]) for it in want if not all(isinstance(v, float) and math.isfinite(v) for v in (job[it], ref[it]))]
assert not bad, f"(iteration, job, reference) with a non-finite lm_loss (two diverged runs are not equal): {bad}"
tol = float(sys.argv[4])
diff = [(it, job[it], ref[it]) for it in want if abs(job[it] - ref[it]) > tol]
assert not diff, f"(iteration, job, reference) differ by more than {tol}: {diff}"
worst = max(abs(job[it] - ref[it]) for it in want)
print(f"lm_loss {'equal' if tol == 0 else f'within {tol:g}'} on {len(want)} iterations (max |diff| {worst:.3g}; "
      f"{repeated} iteration rows repeated by a resumed run): {ref[1]:.6f} -> {ref[want[-1]]:.6f}")
PY
}


# preempt_requeue_resume SBATCH_LAYOUT_ARGS...: train-gpt.sbatch (real tessera-train, preemptible.toml,
# 2 ranks as the layout args place them) gets USR1 mid-training -> checkpoint -> scontrol requeue ->
# resumes -> finishes; its lm_loss sequence must equal an uninterrupted `mpirun -np 2` run's exactly.
# Sets jid, saved (the iteration checkpointed on USR1) and iters.
preempt_requeue_resume() {
  local i
  iters=40
  jid=$(cd "$WORK" && sbatch --parsable --chdir="$WORK" --output="$WORK/job-%j.out" \
    "$@" "${CPU_OPTS[@]}" "$JOBS/train-gpt.sbatch" "$CONFIGS/preemptible.toml")
  for ((i = 0; i < 1200; i++)); do grep -q "iteration 3/$iters " "$WORK/job-$jid.out" 2>/dev/null && break; sleep 0.1; done
  grep -q "iteration 3/$iters " "$WORK/job-$jid.out" || { job_out "$jid" >&2; fail "training did not start"; }
  # what Slurm does 120 s before the time limit with --signal=B:USR1@120
  scancel --signal=USR1 --batch "$jid"
  for ((i = 0; i < 600; i++)); do [[ $(job_field "$jid" Restarts) == 1 ]] && break; sleep 0.1; done
  [[ $(job_field "$jid" Restarts) == 1 ]] || { job_out "$jid" >&2; fail "job was not requeued"; }
  # a requeued job becomes eligible only after a delay (~2 min): start it in 3 s instead (not at
  # once: slurmd refuses a credential issued in the same second the old one was revoked)
  for ((i = 0; i < 100; i++)); do
    [[ $(job_field "$jid" JobState) == PENDING ]] && { scontrol update JobId="$jid" StartTime=now+3 2>/dev/null || true; break; }
    sleep 0.1
  done
  "$START" wait "$jid" "$JOB_TIMEOUT" || true
  expect_state "$jid" COMPLETED 0:0
  expect_out "$jid" "received SIGUSR1: sending SIGUSR1 to the ranks"
  saved=$(grep -oP "saved checkpoint at iteration \K[0-9]+" "$WORK/job-$jid.out" | head -1)
  [[ -n $saved ]] || { job_out "$jid" >&2; fail "no checkpoint was saved on SIGUSR1"; }
  ((saved < iters)) || fail "checkpoint at $saved: the signal came too late to test resuming"
  expect_out "$jid" "exiting program at iteration $saved"
  expect_out "$jid" "preempted \(SIGUSR1\) at checkpoint iteration $saved: requeueing job $jid \(restart 1\)"
  expect_out "$jid" "job $jid \(restart 1\) layout"
  expect_out "$jid" "resuming from ckpt \(latest_checkpointed_iteration.txt: $saved\)"
  expect_out "$jid" "launch: .* --set checkpoint.load=ckpt"
  expect_out "$jid" "loaded checkpoint from ckpt.* at iteration $saved "
  expect_out "$jid" "resuming from iteration $saved, consumed samples $((saved * 4))"
  expect_out "$jid" "iteration $((saved + 1))/$iters "
  [[ $(cat "$WORK/ckpt/latest_checkpointed_iteration.txt") == "$iters" ]] || fail "final checkpoint is not iteration $iters"
  [[ $(grep -c "iteration $iters/$iters " "$WORK/job-$jid.out") == 1 ]] || fail "iteration $iters ran more or less than once"
  # the uninterrupted reference: the same config, 2 ranks, its own checkpoint directory
  direct_mpirun 2 uninterrupted.log --config "$CONFIGS/preemptible.toml" --set logging.metrics_file=uninterrupted.jsonl \
    --set checkpoint.save=ckpt-uninterrupted
  same_lm_loss "$WORK/metrics.jsonl" "$WORK/uninterrupted.jsonl" "$iters" "the preempted and requeued job"
}

# write_corpus FILE: the preprocess tests' JSONL corpus (64 documents, some non-ASCII text)
write_corpus() {
  python3 - "$1" <<'PY'
import json, sys
words = "the quick brown fox jumps over a lazy dog while naïve café owners count €uros and 数字".split()
with open(sys.argv[1], "w", encoding="utf-8") as f:
    for d in range(64):
        text = " ".join(words[(d * 7 + i) % len(words)] for i in range(5 + d % 23))
        f.write(json.dumps({"id": d, "text": f"Document {d}. {text}."}, ensure_ascii=False) + "\n")
PY
}
