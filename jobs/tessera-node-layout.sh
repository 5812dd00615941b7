# shellcheck shell=bash
# tessera-node-layout.sh - where the ranks of a job land, node by node (sourced by tessera-job-lib.sh).
# Owns: the per-node rank counts of the allocation, the check that tensor-parallel (and expert-
# parallel) groups stay inside a node, and the per-node layout lines the templates print.
#
# srun places ranks in blocks (its default distribution): node 0 gets ranks 0..c0-1, node 1 the next
# c1, ... (c = SLURM_TASKS_PER_NODE). The rank order is Megatron's: rank = tp_r + TP*(dp_r + DP*pp_r),
# so a TP group is TP consecutive ranks, and an EP group spans TP*EP consecutive ranks. Each rank
# computes on GPU (node-local rank mod the GPUs it sees): tessera-train takes the node-local rank from
# MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) - Slurm's SLURM_LOCALID under srun, Open MPI's
# OMPI_COMM_WORLD_LOCAL_RANK under mpirun - never from the world rank.
#
# Environment knobs:
#   TESSERA_ALLOW_CROSS_NODE_TP=1   run even if a TP group would span nodes (a warning instead of exit 2)

# tessera_tasks_per_node WORLD -> one rank count per node, space-separated (from SLURM_TASKS_PER_NODE,
# e.g. "2(x2),1" -> "2 2 1"; else SLURM_NNODES nodes sharing WORLD evenly; else one node)
tessera_tasks_per_node() {
  local world=$1 spec=${SLURM_TASKS_PER_NODE:-} part count times i out=() parts=()
  if [[ -n $spec ]]; then
    IFS=, read -r -a parts <<<"$spec"
    for part in "${parts[@]}"; do
      if [[ $part =~ ^([0-9]+)\(x([0-9]+)\)$ ]]; then count=${BASH_REMATCH[1]} times=${BASH_REMATCH[2]}
      elif [[ $part =~ ^[0-9]+$ ]]; then count=$part times=1
      else tessera_die "SLURM_TASKS_PER_NODE=$spec: cannot read '$part' (expected N or N(xM))"; fi
      for ((i = 0; i < times; i++)); do out+=("$count"); done
    done
    echo "${out[*]}"
    return
  fi
  local nodes=${SLURM_NNODES:-1}
  ((world % nodes == 0)) || tessera_die "cannot spread $world ranks evenly over SLURM_NNODES=$nodes nodes (SLURM_TASKS_PER_NODE is not set)"
  for ((i = 0; i < nodes; i++)); do out+=($((world / nodes))); done
  echo "${out[*]}"
}

# tessera_node_names COUNT -> COUNT node names (the allocation's, else node0 node1 ... in dry runs)
tessera_node_names() {
  local count=$1 names=() i
  if [[ -n ${SLURM_JOB_NODELIST:-} ]] && command -v scontrol >/dev/null; then
    mapfile -t names < <(scontrol show hostnames "$SLURM_JOB_NODELIST" 2>/dev/null || true)
  fi
  ((${#names[@]} == count)) || { names=(); for ((i = 0; i < count; i++)); do names+=("node$i"); done; }
  echo "${names[*]}"
}

# tessera_range FIRST LAST -> "F-L" or "F"
tessera_range() { if (($1 == $2)); then echo "$1"; else echo "$1-$2"; fi; }

# tessera_ranges N... (ascending) -> runs of consecutive numbers joined: 0 1 2 5 -> "0-2,5"
tessera_ranges() {
  local text="" start=$1 prev=$1 n
  shift
  for n in "$@" ""; do
    if [[ -n $n ]] && ((n == prev + 1)); then prev=$n; continue; fi
    text+=",$(tessera_range "$start" "$prev")"
    [[ -n $n ]] && start=$n prev=$n
  done
  echo "${text#,}"
}

# tessera_node_layout WORLD TP PP [EP]: checks that every TP group (TP consecutive ranks) lies inside
# one node - TP communicates in every layer, far too often for the network between nodes - and prints
# one line per node: its ranks, node-local ranks, TP groups, PP stages and DP ranks (and whether EP
# groups stay inside it). A TP group that would span nodes stops the job (exit 2) unless
# TESSERA_ALLOW_CROSS_NODE_TP=1; EP groups spanning nodes are normal for large EP (a note only).
tessera_node_layout() {
  local world=$1 tp=$2 pp=$3 ep=${4:-0}
  local -a counts names
  read -r -a counts <<<"$(tessera_tasks_per_node "$world")"
  read -r -a names <<<"$(tessera_node_names "${#counts[@]}")"
  local total=0 c
  for c in "${counts[@]}"; do total=$((total + c)); done
  if ((total != world)); then
    tessera_log "WARNING: the nodes hold $total tasks (SLURM_TASKS_PER_NODE=${SLURM_TASKS_PER_NODE:-}) but the job runs $world ranks: per-node layout not checked"
    return 0
  fi
  if [[ -n ${SLURM_DISTRIBUTION:-} && ${SLURM_DISTRIBUTION%%:*} != block ]]; then
    tessera_log "WARNING: SLURM_DISTRIBUTION=$SLURM_DISTRIBUTION: the per-node layout below assumes srun's block distribution"
  fi
  local dp=$((world / (tp * pp))) first=0 i last bad=() line stages dps groups r g
  for i in "${!counts[@]}"; do
    c=${counts[i]}
    last=$((first + c - 1))
    ((first % tp == 0 && c % tp == 0)) || bad+=("${names[i]} (ranks $(tessera_range "$first" "$last"))")
    groups="" stages="" dps=""
    for ((r = first - first % tp; r <= last; r += tp)); do groups+=" $(tessera_range "$r" $((r + tp - 1)))"; done
    ((tp > 1)) || groups=" none (TP=1)"
    for ((r = first; r <= last; r++)); do
      g=$((r / (tp * dp)))
      [[ " $stages " == *" $g "* ]] || stages+=" $g"
      g=$(((r / tp) % dp))
      [[ " $dps " == *" $g "* ]] || dps+=" $g"
    done
    # shellcheck disable=SC2046
    stages=$(tessera_ranges $(tr ' ' '\n' <<<"$stages" | sort -n | uniq)) dps=$(tessera_ranges $(tr ' ' '\n' <<<"$dps" | sort -n | uniq))
    line="node ${names[i]}: ranks $(tessera_range "$first" "$last") (node-local $(tessera_range 0 $((c - 1))); GPU = node-local rank)"
    line+=" | TP groups${groups} | PP stages $stages | DP ranks $dps"
    if ((ep > 1)); then
      if ((first % (tp * ep) == 0 && c % (tp * ep) == 0)); then line+=" | EP groups inside the node"
      else line+=" | EP groups span nodes (expert all-to-all over the network)"; fi
    fi
    if [[ -n ${SLURM_GPUS_ON_NODE:-} && ${SLURM_GPUS_ON_NODE} -gt 0 && $c -gt ${SLURM_GPUS_ON_NODE} ]]; then
      line+=" | WARNING: $c ranks share ${SLURM_GPUS_ON_NODE} GPUs"
    fi
    tessera_log "$line"
    first=$((last + 1))
  done
  ((${#bad[@]} == 0)) && return 0
  local why="tensor_model_parallel_size $tp does not fit the ranks per node (SLURM_TASKS_PER_NODE=${SLURM_TASKS_PER_NODE:-${counts[*]}}):"
  local joined
  joined=$(printf '%s, ' "${bad[@]}")
  why+=" a TP group on ${joined%, } would span nodes, and TP communicates in every layer"
  if [[ ${TESSERA_ALLOW_CROSS_NODE_TP:-0} == 1 ]]; then
    tessera_log "WARNING: $why (running anyway: TESSERA_ALLOW_CROSS_NODE_TP=1)"
    return 0
  fi
  tessera_die "layout does not fit the nodes: $why; use --ntasks-per-node a multiple of $tp, a smaller TP, or TESSERA_ALLOW_CROSS_NODE_TP=1 to run anyway"
}
