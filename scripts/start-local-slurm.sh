#!/usr/bin/env bash
# start-local-slurm.sh - run a throw-away Slurm cluster of one or more nodes on localhost (CI use).
# Tessera: test/slurm/slurm_job_test.sh calls it when no Slurm answers (one node), and
# test/slurm/slurm_two_node_test.sh with --nodes 2; scripts/install-slurm-deps.sh installs the
# packages (or LOCAL_SLURM_INSTALL=1 here). Adapted from shared/slurm/ (verified there).
#
# Starts a private munged + slurmctld + one slurmd per node, all state/logs/sockets under one
# directory, waits until every node is idle and prints the PIDs plus the exact command to stop
# them. Idempotent: if the daemons recorded in the pid files are alive and the config is
# unchanged, it only re-checks the node states. Tested on Debian 12 (slurm-wlm 22.05.8,
# munge 0.5.15, Open MPI 4.1.4) as root, without systemd and without cgroups
# (proctrack/linuxproc + task/none).
#
# One node (default): node "localhost", /tmp/local-slurm, ports 6817 (slurmctld) and 6818.
# --nodes N (N >= 2): nodes n1..nN, all on this host (Slurm's multiple-slurmd mode: one
#   `slurmd -N nI` per node, each with its own port and %n spool/pid/log/TmpFS paths),
#   /tmp/local-slurm-Nnodes, ports 6827 (slurmctld) and 6828..6828+N-1, so it runs beside the
#   one-node cluster. A TaskProlog gives each fake node its own Open MPI shared-memory directory
#   (same hostname and /dev/shm otherwise: ranks on n1 and n2 would map the same segment) and keeps
#   all Open MPI traffic on the loopback interface.
#
# Usage:  start-local-slurm.sh [--nodes N] [start|stop|status|env|wait JOBID [TIMEOUT_S]]  (default: start)
#   start   install config, start daemons if needed, wait for the nodes to be idle
#   stop    kill the daemons recorded in the pid files (by PID only)
#   status  show daemon PIDs and sinfo
#   env     print the export lines needed by clients (sinfo/srun/sbatch)
#   wait    poll a batch job until it ends; rc 0 only if JobState=COMPLETED
#
# Environment knobs (all optional):
#   LOCAL_SLURM_NODES=1                same as --nodes (the option wins)
#   LOCAL_SLURM_DIR                    state/log/socket/config directory (default above)
#   LOCAL_SLURM_CPUS                   CPUs advertised per node: 8 for one node, 4 with --nodes
#                                      (may exceed real cores: SlurmdParameters=config_overrides)
#   LOCAL_SLURM_MEM_MB                 RealMemory per node (default (MemTotal-512)/N)
#   LOCAL_SLURM_MPI_DEFAULT=pmix       MpiDefault (pmix works with Debian Open MPI 4.1)
#   LOCAL_SLURM_CTLD_PORT LOCAL_SLURM_SLURMD_PORT   slurmctld port / port of the first slurmd
#   LOCAL_SLURM_TIMEOUT=60             seconds to wait for each daemon / node idle
#   LOCAL_SLURM_SLURMD_TIMEOUT=10 LOCAL_SLURM_KILL_WAIT=5   several nodes: SlurmdTimeout, KillWait
#   LOCAL_SLURM_INSTALL=0              1 = apt-get install missing packages first
#   LOCAL_SLURM_LINK_ETC=0             1 = symlink /etc/slurm/slurm.conf to our config so
#                                      clients work without SLURM_CONF (one node only)
set -euo pipefail

NNODES=${LOCAL_SLURM_NODES:-1}
if [[ ${1:-} == --nodes ]]; then NNODES=${2:?--nodes needs a number}; shift 2
elif [[ ${1:-} == --nodes=* ]]; then NNODES=${1#--nodes=}; shift; fi
[[ $NNODES =~ ^[1-9][0-9]?$ ]] || { echo "[local-slurm] --nodes $NNODES: need a node count 1..99" >&2; exit 2; }

if ((NNODES == 1)); then
  DIR=${LOCAL_SLURM_DIR:-/tmp/local-slurm}
  CTLD_PORT=${LOCAL_SLURM_CTLD_PORT:-6817}
  NODES=(localhost)
  NODELIST=localhost
  TAG=local-slurm
else
  DIR=${LOCAL_SLURM_DIR:-/tmp/local-slurm-${NNODES}nodes}
  CTLD_PORT=${LOCAL_SLURM_CTLD_PORT:-6827}
  NODES=()
  for ((i = 1; i <= NNODES; i++)); do NODES+=("n$i"); done
  NODELIST="n[1-$NNODES]"
  TAG=local-slurm-${NNODES}nodes
fi
SLURMD_PORT=${LOCAL_SLURM_SLURMD_PORT:-$((CTLD_PORT + 1))}
CPUS=${LOCAL_SLURM_CPUS:-$((NNODES == 1 ? 8 : 4))}
MEM_MB=${LOCAL_SLURM_MEM_MB:-$(awk -v n="$NNODES" '/MemTotal/{m=int((int($2/1024)-512)/n); if(m<1024)m=1024; print m}' /proc/meminfo)}
MPI_DEFAULT=${LOCAL_SLURM_MPI_DEFAULT:-pmix}
TIMEOUT=${LOCAL_SLURM_TIMEOUT:-60}
SLURMD_TIMEOUT=${LOCAL_SLURM_SLURMD_TIMEOUT:-10} # several nodes only: node failure detection
KILL_WAIT=${LOCAL_SLURM_KILL_WAIT:-5}

CONF=$DIR/etc/slurm.conf
MUNGE_DIR=$DIR/munge
MUNGE_SOCK=$MUNGE_DIR/munge.socket.2
MUNGE_PID=$MUNGE_DIR/munged.pid
CTLD_PID=$DIR/run/slurmctld.pid
# slurmd_pid NODE -> its pid file (= SlurmdPidFile, with %n expanded by `slurmd -N NODE` for several nodes)
slurmd_pid() { if ((NNODES == 1)); then echo "$DIR/run/slurmd.pid"; else echo "$DIR/run/slurmd-$1.pid"; fi; }
slurmd_port() { echo $((SLURMD_PORT + $1 - 1)); } # slurmd_port INDEX (1-based)

log() { printf '[%s] %s\n' "$TAG" "$*" >&2; }
die() { log "ERROR: $*"; dump_logs; exit 1; }
dump_logs() {
  local f
  for f in "$MUNGE_DIR/munged.log" "$DIR/log/slurmctld.log" "$DIR"/log/slurmd*.log; do
    [[ -f $f ]] && { log "--- tail $f"; tail -n 15 "$f" >&2 || true; }
  done
  return 0
}

# pid_alive PIDFILE NAME -> prints pid if the process is alive and is NAME
pid_alive() {
  local pf=$1 name=$2 pid
  [[ -r $pf ]] || return 1
  pid=$(tr -dc '0-9' 2>/dev/null <"$pf") || return 1
  proc_is "$pid" "$name" || return 1
  echo "$pid"
}
# proc_is PID NAME: process exists, is not a zombie, and its comm is NAME (guards PID reuse)
proc_is() {
  [[ -n $1 && -d /proc/$1 ]] || return 1
  [[ $(cat /proc/"$1"/comm 2>/dev/null) == "$2" ]] || return 1
  [[ $(awk '/^State:/{print $2}' /proc/"$1"/status 2>/dev/null) != Z ]]
}

# stop_pid PIDFILE NAME: TERM, wait up to 15 s, then KILL - by PID only
stop_pid() {
  local pf=$1 name=$2 pid i
  if pid=$(pid_alive "$pf" "$name"); then
    log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 150; i++)); do proc_is "$pid" "$name" || break; sleep 0.1; done
    if proc_is "$pid" "$name"; then log "$name did not exit, sending KILL"; kill -KILL "$pid" 2>/dev/null || true; fi
  fi
  rm -f "$pf"
}

# stop_slurmds: every slurmd with a pid file here (also nodes of an earlier, larger --nodes)
stop_slurmds() {
  local pf
  for pf in "$DIR"/run/slurmd.pid "$DIR"/run/slurmd-*.pid; do [[ -e $pf ]] && stop_pid "$pf" slurmd; done
  return 0
}

# stop_job_leftovers: what a stopped slurmd leaves behind - slurmstepds of this cluster and the
# processes of its jobs (a node failure, or a test stopped midway, can leave both). Found by their
# environment (SLURM_CONF = this cluster's config; job processes also carry SLURM_JOB_ID), never this
# script or its callers; TERM, then KILL after 5 s, by PID.
stop_job_leftovers() {
  local f p keep=" " pids="" i
  for ((p = $$; p > 1; p = $(awk '/^PPid:/{print $2}' /proc/"$p"/status 2>/dev/null || echo 1))); do keep+="$p "; done
  for f in $(grep -lzx "SLURM_CONF=$CONF" /proc/[0-9]*/environ 2>/dev/null || true); do
    p=${f#/proc/}
    p=${p%/environ}
    [[ $keep != *" $p "* ]] || continue
    [[ $(cat /proc/"$p"/comm 2>/dev/null) == slurmstepd ]] || grep -qz "^SLURM_JOB_ID=" "$f" 2>/dev/null || continue
    pids+=" $p"
  done
  [[ -n $pids ]] || return 0
  log "stopping leftover job processes and slurmstepds:$pids"
  # shellcheck disable=SC2086
  kill -TERM $pids 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do
    # shellcheck disable=SC2086
    kill -0 $pids 2>/dev/null || return 0
    sleep 0.1
  done
  # shellcheck disable=SC2086
  kill -KILL $pids 2>/dev/null || true
}

do_stop() {
  stop_slurmds
  stop_job_leftovers
  stop_pid "$CTLD_PID" slurmctld
  stop_pid "$MUNGE_PID" munged
  if [[ -L /etc/slurm/slurm.conf && $(readlink /etc/slurm/slurm.conf) == "$CONF" ]]; then rm -f /etc/slurm/slurm.conf; fi
  log "stopped (state kept in $DIR; rm -rf it for a clean slate)"
}

print_env() {
  echo "export SLURM_CONF=$CONF"
}

do_status() {
  local p pid n
  for p in "$MUNGE_PID:munged" "$CTLD_PID:slurmctld"; do
    if pid=$(pid_alive "${p%%:*}" "${p##*:}"); then echo "${p##*:}: running (pid $pid)"; else echo "${p##*:}: not running"; fi
  done
  for n in "${NODES[@]}"; do
    if pid=$(pid_alive "$(slurmd_pid "$n")" slurmd); then echo "slurmd $n: running (pid $pid)"; else echo "slurmd $n: not running"; fi
  done
  SLURM_CONF=$CONF sinfo -N -l 2>&1 || true
}

pmix_lib_present() { compgen -G '/usr/lib/*/pmix2/lib/libpmix.so' >/dev/null || compgen -G '/usr/lib/*/libpmix.so' >/dev/null; }

install_packages() {
  local missing=()
  command -v munged >/dev/null || missing+=(munge)
  command -v slurmctld >/dev/null || missing+=(slurmctld)
  command -v slurmd >/dev/null || missing+=(slurmd)
  command -v sinfo >/dev/null || missing+=(slurm-client)
  # Slurm's mpi/pmix plugin dlopen()s .../pmix2/lib/libpmix.so - the unversioned symlink that
  # only libpmix-dev ships (libopenmpi-dev pulls it in; slurm packages do not)
  [[ $MPI_DEFAULT != pmix* ]] || pmix_lib_present || missing+=(libpmix-dev)
  ((${#missing[@]})) || return 0
  log "apt-get install ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y --no-install-recommends "${missing[@]}" >&2
}

write_config() {
  local tmp=$1 i
  cat >"$tmp" <<CONF
# generated by start-local-slurm.sh - nodes $NODELIST on localhost, everything under $DIR
ClusterName=$( ((NNODES == 1)) && echo localci || echo "localci${NNODES}")
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCK
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$DIR/state
SlurmctldPidFile=$CTLD_PID
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
# no cgroups needed (containers / VMs without systemd)
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
ReturnToService=2
# reject impossible requests (e.g. -n 16 > CPUs) at submit time instead of pending forever
EnforcePartLimits=ALL
MpiDefault=$MPI_DEFAULT
# trust the CPUs= below even if the machine has fewer cores (oversubscription for CI)
SlurmdParameters=config_overrides
CONF
  if ((NNODES == 1)); then
    cat >>"$tmp" <<CONF
SlurmdSpoolDir=$DIR/spool
SlurmdPidFile=$(slurmd_pid localhost)
SlurmdLogFile=$DIR/log/slurmd.log
# the pmix plugin's <TmpFS>/spmix_appdir_<uid>_<job>.<step>: under $DIR, so that a step killed before
# it cleaned up leaves nothing that a restarted cluster (job ids from 1 again) would trip over ("File
# exists": the step fails to launch)
TmpFS=$DIR/tmp
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM_MB State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF
    return 0
  fi
  cat >>"$tmp" <<CONF
# several slurmd on one host: %n = the node name given to slurmd -N, so no two daemons (nor their
# slurmstepds and the pmix plugin's sockets, which live in the spool dir) share a path
SlurmdSpoolDir=$DIR/spool/%n
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmdLogFile=$DIR/log/slurmd-%n.log
# the pmix plugin creates <TmpFS>/spmix_appdir_<uid>_<job>.<step> on every node of a step: with one
# shared TmpFS the second node's slurmstepd fails "File exists" and every srun -N2 --mpi=pmix dies
TmpFS=$DIR/tmp/%n
# per-node environment of every task (Open MPI shared-memory dir, loopback only): see task-prolog.sh
TaskProlog=$DIR/etc/task-prolog.sh
# a node whose slurmd stops answering is DOWN after ${SLURMD_TIMEOUT} s (default 300), and its jobs'
# remaining processes get ${KILL_WAIT} s between SIGTERM and SIGKILL (default 30): a failed node ends
# its job within a minute (tested by killing one node's slurmd, slurmstepds and ranks)
SlurmdTimeout=$SLURMD_TIMEOUT
KillWait=$KILL_WAIT
CONF
  # one NodeName line per node: same address, its own port (a shared NodeHostname needs a Slurm
  # built with multiple-slurmd support; start checks MULTIPLE_SLURMD)
  for ((i = 1; i <= NNODES; i++)); do
    echo "NodeName=n$i NodeAddr=127.0.0.1 NodeHostname=localhost Port=$(slurmd_port "$i") CPUs=$CPUS RealMemory=$MEM_MB State=UNKNOWN" >>"$tmp"
  done
  echo "PartitionName=debug Nodes=$NODELIST Default=YES MaxTime=INFINITE State=UP" >>"$tmp"
}

# TaskProlog (several nodes): its "export X=Y" lines go into every task's environment, on the task's
# own node. Open MPI's shared-memory BTL (vader) maps /dev/shm/vader_segment.<hostname>.<uid>.<job>.
# <local rank>: the fake nodes share hostname and /dev/shm, so local rank 0 of n1 and of n2 would map
# the same file (ranks segfault in vader). Not for the batch step (no SLURM_STEP_ID): mpirun would
# pass n1's directory on to its ranks on n2; its orteds are srun steps and get their own node's.
# NNODES x CPUS ranks share the real cores: srun-started Open MPI ranks busy-poll unless told to
# yield (mpirun --oversubscribe does that itself). All TCP traffic (ranks and runtime) stays on lo.
# A value the user exported wins.
write_task_prolog() {
  cat >"$1" <<PROLOG
#!/bin/sh
# generated by start-local-slurm.sh --nodes $NNODES: per-node Open MPI settings of every task
[ -z "\$SLURM_STEP_ID" ] || echo "export OMPI_MCA_btl_vader_backing_directory=$DIR/tmp/\$SLURMD_NODENAME"
[ -n "\$OMPI_MCA_mpi_yield_when_idle" ] || echo "export OMPI_MCA_mpi_yield_when_idle=1"
[ -n "\$OMPI_MCA_btl_tcp_if_include" ] || echo "export OMPI_MCA_btl_tcp_if_include=lo"
[ -n "\$OMPI_MCA_oob_tcp_if_include" ] || echo "export OMPI_MCA_oob_tcp_if_include=lo"
PROLOG
  chmod 755 "$1"
}

node_state() { SLURM_CONF=$CONF sinfo -h -n "$1" -o %T 2>/dev/null | head -n1; }

wait_for() { # wait_for DESCRIPTION COMMAND...
  local what=$1 i; shift
  for ((i = 0; i < TIMEOUT * 5; i++)); do "$@" && return 0; sleep 0.2; done
  die "timeout (${TIMEOUT}s) waiting for $what"
}

port_free() { ! ss -Hltn "sport = :$1" 2>/dev/null | grep -q .; }

# wait_idle NODE: the node must become idle (or mixed/allocated if jobs are already running);
# a down/drained node gets one State=RESUME
wait_idle() {
  local node=$1 i st resumed=0
  for ((i = 0; i < TIMEOUT * 5; i++)); do
    st=$(node_state "$node" || true)
    case $st in
      idle | mixed | allocated | completing) return 0 ;;
      down* | drain* | fail* | inval*)
        if ((!resumed)); then scontrol update NodeName="$node" State=RESUME >/dev/null 2>&1 || true; resumed=1; fi ;;
    esac
    sleep 0.2
  done
  die "node $node state '${st:-unknown}' after ${TIMEOUT}s"
}

do_start() {
  [[ $EUID -eq 0 ]] || { log "must run as root (slurmd/slurmctld run as root here)"; exit 1; }
  [[ ${LOCAL_SLURM_INSTALL:-0} == 1 ]] && install_packages
  local c n i port
  for c in munged munge slurmctld slurmd sinfo scontrol; do
    command -v "$c" >/dev/null || { log "missing '$c' (apt-get install munge slurm-wlm, or LOCAL_SLURM_INSTALL=1)"; exit 1; }
  done

  if [[ $MPI_DEFAULT == pmix* ]] && ! pmix_lib_present; then
    log "WARNING: libpmix.so not found (apt-get install libpmix-dev): using MpiDefault=none, srun --mpi=pmix will fail"
    MPI_DEFAULT=none
  fi

  mkdir -p "$DIR"/{etc,state,spool,log,run,tmp} "$MUNGE_DIR"
  if ((NNODES > 1)); then for n in "${NODES[@]}"; do mkdir -p "$DIR/spool/$n" "$DIR/tmp/$n"; done; fi
  chmod 755 "$DIR" "$MUNGE_DIR" # munged requires the socket dir to be o+x and not group/other-writable
  exec 9>"$DIR/.lock"; flock -w "$TIMEOUT" 9 || die "another start-local-slurm.sh holds $DIR/.lock"
  # (fd 9 is closed for every daemon we start - "9>&-" - or they would hold the lock forever)

  ((NNODES == 1)) || write_task_prolog "$DIR/etc/task-prolog.sh"
  local newconf=$DIR/etc/slurm.conf.new restart=0
  write_config "$newconf"
  if [[ -f $CONF ]] && cmp -s "$newconf" "$CONF"; then rm -f "$newconf"; else
    [[ -f $CONF ]] && restart=1
    mv "$newconf" "$CONF"
  fi
  if [[ ${LOCAL_SLURM_LINK_ETC:-0} == 1 ]]; then
    ((NNODES == 1)) || die "LOCAL_SLURM_LINK_ETC=1 is for the one-node cluster only (/etc/slurm/slurm.conf is its)"
    mkdir -p /etc/slurm; ln -sfn "$CONF" /etc/slurm/slurm.conf
  fi
  export SLURM_CONF=$CONF

  if ((restart)); then
    log "config changed: restarting slurm daemons"
    stop_slurmds; stop_pid "$CTLD_PID" slurmctld
  fi

  # --- munge (private key + socket; does not touch /etc/munge or a system munged)
  if [[ ! -s $MUNGE_DIR/munge.key ]]; then
    dd if=/dev/urandom of="$MUNGE_DIR/munge.key" bs=1024 count=1 status=none
    chmod 400 "$MUNGE_DIR/munge.key"
  fi
  if ! pid_alive "$MUNGE_PID" munged >/dev/null; then
    rm -f "$MUNGE_PID" "$MUNGE_SOCK" "$MUNGE_SOCK.lock"
    log "starting munged"
    munged --force --key-file="$MUNGE_DIR/munge.key" --socket="$MUNGE_SOCK" \
      --pid-file="$MUNGE_PID" --log-file="$MUNGE_DIR/munged.log" --seed-file="$MUNGE_DIR/munged.seed" 9>&- ||
      die "munged failed to start"
  fi
  wait_for "munge credential round-trip" bash -c "munge -S '$MUNGE_SOCK' -n </dev/null | unmunge -S '$MUNGE_SOCK' >/dev/null 2>&1"

  # --- slurmctld
  if ! pid_alive "$CTLD_PID" slurmctld >/dev/null; then
    port_free "$CTLD_PORT" || die "port $CTLD_PORT busy (another slurmctld?); set LOCAL_SLURM_CTLD_PORT"
    rm -f "$CTLD_PID"
    log "starting slurmctld"
    slurmctld -f "$CONF" -c 9>&- || die "slurmctld failed to start"   # -c: fresh state every start
  fi
  wait_for "slurmctld to answer" bash -c "scontrol ping 2>/dev/null | grep -q UP"
  if ((NNODES > 1)) && ! grep -qE '^MULTIPLE_SLURMD +=? *Yes' <<<"$(scontrol show config 2>/dev/null)"; then
    die "this Slurm was built without multiple-slurmd support (scontrol show config: MULTIPLE_SLURMD is not Yes): --nodes $NNODES needs it"
  fi

  # --- one slurmd per node; -N picks its NodeName line (and so its port and %n paths)
  for ((i = 1; i <= NNODES; i++)); do
    n=${NODES[i - 1]} port=$(slurmd_port "$i")
    pid_alive "$(slurmd_pid "$n")" slurmd >/dev/null && continue
    port_free "$port" || die "port $port busy (another slurmd?); set LOCAL_SLURM_SLURMD_PORT"
    rm -f "$(slurmd_pid "$n")"
    log "starting slurmd -N $n (port $port)"
    slurmd -f "$CONF" -N "$n" 9>&- || die "slurmd -N $n failed to start"
  done
  for n in "${NODES[@]}"; do wait_idle "$n"; done

  sinfo -N -l >&2
  print_env >"$DIR/env.sh"
  local pids="" lines=""
  for n in "${NODES[@]}"; do
    pids+=" $(pid_alive "$(slurmd_pid "$n")" slurmd)"
    lines+="  slurmd $n pid $(pid_alive "$(slurmd_pid "$n")" slurmd)"$'\n'
  done
  cat <<EOF
local Slurm is up: nodes $NODELIST ($(sinfo -h -o %T | sort -u | paste -sd,)), CPUs=$CPUS per node, MpiDefault=$MPI_DEFAULT
  munged    pid $(pid_alive "$MUNGE_PID" munged)
  slurmctld pid $(pid_alive "$CTLD_PID" slurmctld)
${lines%$'\n'}
clients need:   $(print_env)      (or: source $DIR/env.sh)
stop with:      kill${pids} $(pid_alive "$CTLD_PID" slurmctld) $(pid_alive "$MUNGE_PID" munged)
           or:  $0 --nodes $NNODES stop
logs:           $DIR/log/  $MUNGE_DIR/munged.log
EOF
}

# wait JOBID [TIMEOUT_S]: poll every 0.25 s (sbatch --wait backs off to 10 s polls).
# exit 0 = COMPLETED, 1 = FAILED/CANCELLED/TIMEOUT/..., 124 = still not finished at timeout
do_wait() {
  local id=${1:?usage: $0 wait JOBID [TIMEOUT_S]} t=${2:-600} st=UNKNOWN i
  export SLURM_CONF=${SLURM_CONF:-$CONF}
  for ((i = 0; i < t * 4; i++)); do
    st=$(scontrol -o show job "$id" 2>/dev/null | grep -oP 'JobState=\K\S+') || st=UNKNOWN
    case $st in
      COMPLETED) return 0 ;;
      PENDING | CONFIGURING | RUNNING | COMPLETING | SUSPENDED | REQUEUED | RESIZING) sleep 0.25 ;;
      *) log "job $id ended in state $st"; return 1 ;;
    esac
  done
  log "job $id still $st after ${t}s"; return 124
}

case ${1:-start} in
  start) do_start ;;
  stop) do_stop ;;
  status) do_status ;;
  env) print_env ;;
  wait) shift; do_wait "$@" ;;
  *) echo "usage: $0 [start|stop|status|env|wait JOBID [TIMEOUT_S]]" >&2; exit 2 ;;
esac
