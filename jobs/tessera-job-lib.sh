# shellcheck shell=bash
# tessera-job-lib.sh - shared functions of the jobs/*.sbatch templates (sourced, not run).
# Owns: finding executables, reading TOML values (+ --set overrides), the parallel-layout check
# (per node: tessera-node-layout.sh),
# NCCL/thread defaults, the srun command line, dry runs, and preemption (signal -> save -> requeue).
#
# Environment knobs read here (every template documents the ones it uses):
#   TESSERA_BIN_DIR       directory holding the tessera-* executables (default: found on PATH)
#   TESSERA_MODULES       modules to `module load` inside the job, e.g. "tessera/0.1.0"
#   TESSERA_SRUN_ARGS     extra srun arguments, word-split (e.g. "--cpu-bind=cores")
#   TESSERA_DRY_RUN=1     print the layout, environment and srun command, then exit 0 without srun
#   TESSERA_MAX_REQUEUES  training templates: requeue at most this many times (default 20)
#   TESSERA_STEP_SIGNAL   training templates: signal forwarded to the ranks on preemption (USR1)

tessera_log() { printf '[tessera-job] %s\n' "$*"; }
# Usage/config errors exit 2 (as every Tessera executable does); nothing has been launched yet.
tessera_die() { printf '[tessera-job] ERROR: %s\n' "$*" >&2; exit 2; }

# the per-node layout (TP inside a node, one line per node) lives beside this file
[[ -r $(dirname "${BASH_SOURCE[0]}")/tessera-node-layout.sh ]] ||
  tessera_die "$(dirname "${BASH_SOURCE[0]}")/tessera-node-layout.sh is missing (it is installed beside tessera-job-lib.sh)"
# shellcheck source=tessera-node-layout.sh
source "$(dirname "${BASH_SOURCE[0]}")/tessera-node-layout.sh"

# tessera_load_modules: `module load $TESSERA_MODULES` (jobs inherit PATH but not the module function)
tessera_load_modules() {
  [[ -n ${TESSERA_MODULES:-} ]] || return 0
  if ! declare -F module >/dev/null; then
    local init
    for init in /usr/share/modules/init/bash /usr/share/lmod/lmod/init/bash /etc/profile.d/modules.sh; do
      # shellcheck disable=SC1090
      [[ -r $init ]] && { source "$init"; break; }
    done
  fi
  declare -F module >/dev/null || tessera_die "TESSERA_MODULES=$TESSERA_MODULES but no 'module' command (Environment Modules / Lmod) was found"
  # shellcheck disable=SC2086
  module load $TESSERA_MODULES || tessera_die "module load $TESSERA_MODULES failed"
}

# tessera_find_exe NAME -> absolute path of the executable, from TESSERA_BIN_DIR or PATH
tessera_find_exe() {
  local name=$1 path
  if [[ -n ${TESSERA_BIN_DIR:-} ]]; then
    path=$TESSERA_BIN_DIR/$name
    [[ -x $path ]] || path=""
  else
    path=$(command -v "$name") || path=""
  fi
  if [[ -z $path ]]; then
    local where="is not on PATH: 'module load tessera', set TESSERA_MODULES=tessera, or set TESSERA_BIN_DIR=<dir with $name>"
    [[ -z ${TESSERA_BIN_DIR:-} ]] || where="not found in TESSERA_BIN_DIR=$TESSERA_BIN_DIR"
    # a dry run only prints the command line, so a tool that is not built yet is a warning there
    [[ ${TESSERA_DRY_RUN:-0} == 1 ]] || tessera_die "$name $where"
    printf '[tessera-job] WARNING: %s %s (dry run: printing the command anyway)\n' "$name" "$where" >&2
    path=$name
  fi
  echo "$path"
}

# tessera_world_size: ranks of this job, from the allocation (SLURM_NTASKS; falls back to
# nodes x tasks-per-node). Outside Slurm (dry runs) SLURM_NTASKS must be set by hand.
tessera_world_size() {
  if [[ -n ${SLURM_NTASKS:-} ]]; then echo "$SLURM_NTASKS"; return; fi
  if [[ -n ${SLURM_NNODES:-} && -n ${SLURM_NTASKS_PER_NODE:-} ]]; then
    local per_node=${SLURM_NTASKS_PER_NODE%%[(]*} # "4(x2)" -> 4
    echo $((SLURM_NNODES * per_node))
    return
  fi
  tessera_die "cannot derive the world size: SLURM_NTASKS is not set (submit with sbatch, or set SLURM_NTASKS for a dry run)"
}

# tessera_toml_get TOML_TEXT_FILE SECTION KEY DEFAULT [ARGS...]: the value of SECTION.KEY with the
# quotes of a string removed. ARGS are the template's command-line arguments: the last
# `--set SECTION.KEY=VALUE` (or --set=...) among them wins over the file. Arrays come back as
# written, e.g. ["text", "title"].
tessera_toml_get() {
  local file=$1 section=$2 key=$3 default=$4 value="" found=0 a next=0
  shift 4
  for a in "$@"; do
    if ((next)); then
      next=0
      [[ $a == "$section.$key="* ]] && { value=${a#*=}; found=1; }
      continue
    fi
    case $a in
      --set) next=1 ;;
      --set="$section.$key="*) value=${a#--set=*=}; found=1 ;;
    esac
  done
  if ((!found)) && [[ -r $file ]]; then
    value=$(awk -v want_section="$section" -v want_key="$key" '
      { sub(/\r$/, "") }
      /^[ \t]*\[[^]]+\][ \t]*(#.*)?$/ { s = $0; sub(/^[ \t]*\[/, "", s); sub(/\].*/, "", s); gsub(/[ \t]/, "", s); section = s; next }
      section == want_section {
        line = $0
        if (match(line, /^[ \t]*[A-Za-z0-9_-]+[ \t]*=/)) {
          k = substr(line, 1, RLENGTH - 1); gsub(/[ \t]/, "", k)
          if (k == want_key) { v = substr(line, RLENGTH + 1); found = 1; result = v }
        }
      }
      END { if (found) print result; else exit 3 }' "$file") && found=1
  fi
  ((found)) || { echo "$default"; return 0; }
  # strip a trailing comment outside quotes, surrounding blanks and the quotes of a string
  value=$(printf '%s' "$value" | sed -E -e 's/^[[:space:]]+//' -e "s/[[:space:]]+#[^\"']*\$//" -e 's/[[:space:]]+$//')
  if [[ $value =~ ^\"(.*)\"$ || $value =~ ^\'(.*)\'$ ]]; then value=${BASH_REMATCH[1]}; fi
  echo "$value"
}

# tessera_require_int NAME VALUE: layout numbers must be positive integers
tessera_require_int() {
  [[ $2 =~ ^[0-9]+$ && $2 -ge 1 ]] || tessera_die "$1 = '$2': must be a positive integer"
}

# tessera_nccl_defaults: sensible communication/threading defaults; a value already in the
# environment (the user's) always wins.
tessera_nccl_defaults() {
  : "${NCCL_DEBUG:=WARN}"                      # errors and warnings, not the INFO flood
  : "${NCCL_ASYNC_ERROR_HANDLING:=1}"          # a failed peer aborts the communicator instead of hanging
  : "${CUDA_DEVICE_MAX_CONNECTIONS:=1}"        # keeps TP/SP communication kernels ordered (Megatron's setting)
  : "${NCCL_IB_TIMEOUT:=22}"                   # tolerate fabric hiccups on large jobs
  : "${OMP_NUM_THREADS:=${SLURM_CPUS_PER_TASK:-1}}"
  : "${OPENBLAS_NUM_THREADS:=${OMP_NUM_THREADS}}"
  export NCCL_DEBUG NCCL_ASYNC_ERROR_HANDLING CUDA_DEVICE_MAX_CONNECTIONS NCCL_IB_TIMEOUT OMP_NUM_THREADS OPENBLAS_NUM_THREADS
  tessera_log "environment: NCCL_DEBUG=$NCCL_DEBUG NCCL_ASYNC_ERROR_HANDLING=$NCCL_ASYNC_ERROR_HANDLING" \
    "CUDA_DEVICE_MAX_CONNECTIONS=$CUDA_DEVICE_MAX_CONNECTIONS NCCL_IB_TIMEOUT=$NCCL_IB_TIMEOUT" \
    "OMP_NUM_THREADS=$OMP_NUM_THREADS OPENBLAS_NUM_THREADS=$OPENBLAS_NUM_THREADS${NCCL_SOCKET_IFNAME:+ NCCL_SOCKET_IFNAME=$NCCL_SOCKET_IFNAME}"
}

# tessera_srun_command NTASKS EXE ARGS... -> fills the global array TESSERA_CMD
tessera_srun_command() {
  local ntasks=$1
  shift
  local -a extra=()
  # shellcheck disable=SC2206
  [[ -n ${TESSERA_SRUN_ARGS:-} ]] && extra=($TESSERA_SRUN_ARGS)
  TESSERA_CMD=(srun --mpi=pmix --ntasks="$ntasks" --kill-on-bad-exit=1 "${extra[@]}" "$@")
}

tessera_print_command() { tessera_log "launch: $(printf '%q ' "${TESSERA_CMD[@]}")"; }

# tessera_dry_run_exit: with TESSERA_DRY_RUN=1 stop here (after the layout was checked and printed)
tessera_dry_run_exit() {
  if [[ ${TESSERA_DRY_RUN:-0} == 1 ]]; then
    tessera_log "dry run (TESSERA_DRY_RUN=1): not launching"
    exit 0
  fi
}

# tessera_run_step: run TESSERA_CMD in the foreground and exit with its status
tessera_run_step() {
  tessera_print_command
  tessera_dry_run_exit
  local rc=0
  "${TESSERA_CMD[@]}" || rc=$?
  tessera_log "step finished with exit code $rc"
  exit "$rc"
}

# tessera_tracker_iteration SAVE_DIR -> the iteration in latest_checkpointed_iteration.txt ("" if none)
tessera_tracker_iteration() {
  local tracker=$1/latest_checkpointed_iteration.txt
  [[ -n $1 && -r $tracker ]] || return 0
  tr -d '[:space:]' <"$tracker"
}

# tessera_run_preemptible SAVE_DIR TRAIN_ITERS: run TESSERA_CMD in the background; on the warning
# signal (#SBATCH --signal=B:USR1@120) forward TESSERA_STEP_SIGNAL to every rank (the trainer saves a
# checkpoint and exits 0), then requeue the job with `scontrol requeue` unless training already
# reached TRAIN_ITERS. The requeued job resumes from SAVE_DIR/latest_checkpointed_iteration.txt (the
# template passes checkpoint.load). SIGTERM (scancel, scheduler preemption) is forwarded the same way
# so the ranks checkpoint, but does not requeue: Slurm decides that itself.
tessera_run_preemptible() {
  local save=$1 train_iters=$2
  TESSERA_PREEMPTED=""
  tessera_print_command
  tessera_dry_run_exit
  local step_signal=${TESSERA_STEP_SIGNAL:-USR1}
  "${TESSERA_CMD[@]}" &
  TESSERA_STEP_PID=$!
  # shellcheck disable=SC2064
  trap "tessera_on_preempt USR1 $step_signal" USR1
  # shellcheck disable=SC2064
  trap "tessera_on_preempt TERM $step_signal" TERM
  local rc=0
  while :; do
    rc=0
    wait "$TESSERA_STEP_PID" || rc=$?
    kill -0 "$TESSERA_STEP_PID" 2>/dev/null || break # a trapped signal interrupts wait: keep waiting
  done
  trap - USR1 TERM
  tessera_log "step finished with exit code $rc"
  [[ -n $TESSERA_PREEMPTED ]] || exit "$rc"
  if [[ $TESSERA_PREEMPTED == SIGTERM ]]; then
    # scancel, or the scheduler preempting the job: Slurm itself decides whether the job comes back
    # (PreemptMode=REQUEUE requeues it; a cancelled job stays cancelled), so no requeue here
    tessera_log "SIGTERM: the ranks were asked to checkpoint; not requeueing (Slurm requeues preempted jobs itself)"
    exit "$rc"
  fi

  local reached restarts=${SLURM_RESTART_COUNT:-0} max=${TESSERA_MAX_REQUEUES:-20}
  reached=$(tessera_tracker_iteration "$save")
  if [[ -n $reached && $reached =~ ^[0-9]+$ && $reached -ge $train_iters ]]; then
    tessera_log "training reached iteration $reached of $train_iters: not requeueing"
    exit "$rc"
  fi
  if [[ -z $save ]]; then
    tessera_log "WARNING: checkpoint.save is empty, so a requeued job could only start from scratch: not requeueing"
    exit "$rc"
  fi
  if ((restarts >= max)); then
    tessera_log "ERROR: job was already requeued $restarts times (TESSERA_MAX_REQUEUES=$max): not requeueing"
    exit 1
  fi
  tessera_log "preempted ($TESSERA_PREEMPTED) at checkpoint iteration ${reached:-none}: requeueing job $SLURM_JOB_ID (restart $((restarts + 1)))"
  scontrol requeue "$SLURM_JOB_ID" || { tessera_log "ERROR: scontrol requeue $SLURM_JOB_ID failed (submit with --requeue?)"; exit 1; }
  # Slurm now ends this batch script; if it does not within a minute, leave quietly.
  sleep 60
  exit 0
}

tessera_on_preempt() {
  local received=$1 forward=$2
  [[ -z $TESSERA_PREEMPTED ]] || return 0
  TESSERA_PREEMPTED=SIG$received
  tessera_log "received SIG$received: sending SIG$forward to the ranks to save a checkpoint and exit"
  kill -s "$forward" "$TESSERA_STEP_PID" 2>/dev/null || true
}

# tessera_train_job KIND CONFIG ARGS...: the whole of train-gpt.sbatch (KIND=gpt),
# train-moe.sbatch (KIND=moe), train-bert.sbatch (bert) and train-t5.sbatch (t5): resolve the
# config, resume, check + print the layout, launch.
tessera_train_job() {
  local kind=$1
  shift
  [[ $# -ge 1 && $1 != -* ]] || tessera_die "usage: sbatch [sbatch options] train-$kind.sbatch CONFIG.toml [--set key=value ...]"
  local config=$1
  shift
  [[ -r $config ]] || tessera_die "config file '$config' not found (relative paths start at $PWD)"
  tessera_load_modules
  local exe resolved
  exe=$(tessera_find_exe tessera-train)
  resolved=$(mktemp "${TMPDIR:-/tmp}/tessera-config.XXXXXX")
  # shellcheck disable=SC2064
  trap "rm -f '$resolved'" EXIT
  # the trainer resolves the file + defaults + overrides itself (and rejects bad keys) on one process
  "$exe" --config "$config" "$@" --print-config >"$resolved" ||
    tessera_die "tessera-train rejected the config (see above): $config $*"
  local get=(tessera_toml_get "$resolved")
  local tp pp ep experts mbs gbs iters save load world arch
  arch=$("${get[@]}" model architecture gpt)
  tp=$("${get[@]}" parallel tensor_model_parallel_size 1)
  pp=$("${get[@]}" parallel pipeline_model_parallel_size 1)
  ep=$("${get[@]}" parallel expert_model_parallel_size 1)
  experts=$("${get[@]}" model num_experts 0)
  mbs=$("${get[@]}" training micro_batch_size 1)
  gbs=$("${get[@]}" training global_batch_size 1)
  iters=$("${get[@]}" training train_iters 0)
  save=$("${get[@]}" checkpoint save "")
  load=$("${get[@]}" checkpoint load "")
  world=$(tessera_world_size)
  # removed now, not only at exit: a job killed later (node failure, KillWait's SIGKILL) runs no trap
  rm -f "$resolved"
  local n
  for n in world tp pp ep mbs gbs; do tessera_require_int "$n" "${!n}"; done

  local model_parallel=$((tp * pp))
  ((world % model_parallel == 0)) ||
    tessera_die "layout does not fit: world size $world (SLURM_NTASKS) is not divisible by tensor_model_parallel_size $tp x pipeline_model_parallel_size $pp = $model_parallel"
  local dp=$((world / model_parallel))
  # train-bert.sbatch / train-t5.sbatch run BERT / T5 configs only, and those configs run only there
  if [[ ($kind == bert || $kind == t5) && $arch != "$kind" ]]; then
    tessera_die "train-$kind.sbatch needs model.architecture = \"$kind\" (got '$arch'); use train-$arch.sbatch"
  elif [[ $kind != "$arch" && ($arch == bert || $arch == t5) ]]; then
    tessera_die "model.architecture = \"$arch\": use train-$arch.sbatch"
  fi
  if [[ $kind == moe ]]; then
    [[ $experts =~ ^[0-9]+$ && $experts -ge 1 ]] || tessera_die "train-moe.sbatch needs model.num_experts >= 1 (got '$experts'); use train-gpt.sbatch for dense models"
    ((dp % ep == 0)) ||
      tessera_die "layout does not fit: data-parallel size $dp (= $world / ($tp x $pp)) is not divisible by expert_model_parallel_size $ep"
    ((experts % ep == 0)) ||
      tessera_die "layout does not fit: num_experts $experts is not divisible by expert_model_parallel_size $ep"
  elif ((ep != 1)); then
    tessera_die "expert_model_parallel_size = $ep: use train-moe.sbatch for expert parallelism"
  fi
  ((gbs % (mbs * dp) == 0)) ||
    tessera_die "layout does not fit: global_batch_size $gbs is not divisible by micro_batch_size $mbs x data-parallel size $dp"
  local per_node=$((world / ${SLURM_NNODES:-1}))
  local layout="nodes=${SLURM_NNODES:-1} world=$world ranks/node=$per_node | TP=$tp PP=$pp DP=$dp"
  [[ $kind == moe ]] && layout+=" EP=$ep experts=$experts (experts/rank=$((experts / ep)), expert-DP=$((dp / ep)))"
  layout+=" | micro_batch=$mbs global_batch=$gbs micro-batches/step=$((gbs / (mbs * dp))) train_iters=$iters"
  tessera_log "job ${SLURM_JOB_ID:-none} (restart ${SLURM_RESTART_COUNT:-0}) layout: $layout"
  # per node: TP groups must stay inside a node (exit 2 otherwise); one line per node
  tessera_node_layout "$world" "$tp" "$pp" "$([[ $kind == moe ]] && echo "$ep" || echo 0)"

  local -a resume=()
  local at
  if [[ -z $load && -n $save ]]; then
    at=$(tessera_tracker_iteration "$save")
    if [[ -n $at ]]; then
      resume=(--set "checkpoint.load=$save")
      tessera_log "resuming from $save (latest_checkpointed_iteration.txt: $at)"
    else
      tessera_log "no checkpoint in '$save' yet: starting from scratch"
    fi
  elif [[ -n $load ]]; then
    tessera_log "checkpoint.load=$load (latest_checkpointed_iteration.txt: $(tessera_tracker_iteration "$load"))"
  fi
  tessera_nccl_defaults
  tessera_srun_command "$world" "$exe" --config "$config" "$@" "${resume[@]}"
  tessera_run_preemptible "$save" "$iters"
}

# tessera_section_flags CONFIG SECTION ARGS...: turn every key of [SECTION] in CONFIG (TOML) into a
# command-line option of the executable: key = "v" -> --key v (underscores become dashes),
# key = true -> --key, key = false -> nothing, key = ["a", "b"] -> --key a b. ARGS may hold
# `--set SECTION.key=value` (overrides or adds a key); any other argument passes through unchanged.
# Fills the global arrays TESSERA_FLAGS and TESSERA_PASSTHROUGH.
tessera_section_flags() {
  local config=$1 section=$2
  shift 2
  local -a keys=() sets=()
  local a next=0 k
  TESSERA_PASSTHROUGH=()
  for a in "$@"; do
    if ((next)); then next=0; sets+=("$a"); continue; fi
    case $a in
      --set) next=1 ;;
      --set=*) sets+=("${a#--set=}") ;;
      *) TESSERA_PASSTHROUGH+=("$a") ;;
    esac
  done
  ((!next)) || tessera_die "--set needs a value: --set $section.key=value"
  mapfile -t keys < <(awk -v want_section="$section" '
      { sub(/\r$/, "") }
      /^[ \t]*\[[^]]+\][ \t]*(#.*)?$/ { s = $0; sub(/^[ \t]*\[/, "", s); sub(/\].*/, "", s); gsub(/[ \t]/, "", s); section = s; next }
      section == want_section && match($0, /^[ \t]*[A-Za-z0-9_-]+[ \t]*=/) { k = substr($0, 1, RLENGTH - 1); gsub(/[ \t]/, "", k); print k }' "$config")
  for a in "${sets[@]}"; do
    [[ $a == "$section".*=* ]] || tessera_die "--set $a: this template only takes $section.KEY=VALUE"
    k=${a#"$section".}
    k=${k%%=*}
    [[ " ${keys[*]} " == *" $k "* ]] || keys+=("$k")
  done
  TESSERA_FLAGS=()
  local value item
  for k in "${keys[@]}"; do
    value=$(tessera_toml_get "$config" "$section" "$k" "" "$@")
    case $value in
      true) TESSERA_FLAGS+=("--${k//_/-}") ;;
      false) ;;
      \[*\])
        TESSERA_FLAGS+=("--${k//_/-}")
        value=${value#[}
        value=${value%]}
        IFS=, read -r -a items <<<"$value"
        for item in "${items[@]}"; do
          item=$(printf '%s' "$item" | sed -E -e 's/^[[:space:]]+//' -e 's/[[:space:]]+$//')
          if [[ $item =~ ^\"(.*)\"$ || $item =~ ^\'(.*)\'$ ]]; then item=${BASH_REMATCH[1]}; fi
          [[ -n $item ]] && TESSERA_FLAGS+=("$item")
        done ;;
      *) TESSERA_FLAGS+=("--${k//_/-}" "$value") ;;
    esac
  done
}

# tessera_job_start NAME CONFIG: common start of the non-training templates
tessera_job_start() {
  local name=$1 config=${2:-}
  [[ -n $config && $config != -* ]] || tessera_die "usage: sbatch [sbatch options] $name.sbatch CONFIG.toml [--set key=value ...]"
  [[ -r $config ]] || tessera_die "config file '$config' not found (relative paths start at $PWD)"
  tessera_load_modules
}
