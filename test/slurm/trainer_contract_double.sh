#!/usr/bin/env bash
# trainer_contract_double.sh - test double of tessera-train's preemption contract, used by the
# slurm tests until the real trainer saves on SIGUSR1/SIGTERM and resumes from checkpoint.load:
#   --print-config   prints the config file, then each --set as a [table] key = value block
#   training         iterations 1..training.train_iters (0.2 s each), starting after the iteration in
#                    <checkpoint.load>/latest_checkpointed_iteration.txt; on SIGUSR1/SIGTERM rank 0
#                    writes <checkpoint.save>/latest_checkpointed_iteration.txt and every rank exits 0
set -euo pipefail
source "${TESSERA_JOBS_DIR:?}/tessera-job-lib.sh"
config="" print=0 args=("$@") sets=()
while (($#)); do
  case $1 in
    --config) config=$2; shift ;;
    --set) sets+=("$2"); shift ;;
    --print-config) print=1 ;;
    --version) echo "tessera-train (contract double)"; exit 0 ;;
  esac
  shift
done
if ((print)); then
  cat "$config"
  for s in "${sets[@]}"; do k=${s%%=*}; printf '\n[%s]\n%s = %s\n' "${k%%.*}" "${k#*.}" "${s#*=}"; done
  exit 0
fi
rank=${SLURM_PROCID:-0}
iters=$(tessera_toml_get "$config" training train_iters 0 "${args[@]}")
save=$(tessera_toml_get "$config" checkpoint save "" "${args[@]}")
load=$(tessera_toml_get "$config" checkpoint load "" "${args[@]}")
start=0
if [[ -n $load ]]; then
  start=$(tr -d '[:space:]' <"$load/latest_checkpointed_iteration.txt")
  ((rank)) || echo "resumed from $load at iteration $start"
fi
stop=""
trap 'stop=USR1' USR1
trap 'stop=TERM' TERM
((rank)) || echo "world size ${SLURM_NTASKS:-1}"
# Slurm signals every process of a task, so after the first signal only shell builtins run
# (an external command would be killed by the next signal and end the script)
((rank)) || mkdir -p "$save"
save_checkpoint() {
  ((rank)) || { echo "$1" >"$save/latest_checkpointed_iteration.txt"; echo "saved checkpoint at iteration $1"; }
}
for ((it = start + 1; it <= iters; it++)); do
  sleep 0.2 || true # the step signal also reaches this sleep (Slurm signals every process of the task)
  ((rank)) || echo "iteration $it/$iters"
  if [[ -n $stop ]]; then
    ((rank)) || echo "received SIG$stop: saving and exiting"
    save_checkpoint "$it"
    exit 0
  fi
done
save_checkpoint "$iters"
