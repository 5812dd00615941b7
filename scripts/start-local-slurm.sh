#!/usr/bin/env bash
# start-local-slurm.sh - run a throw-away single-node Slurm cluster on localhost (CI use).
# Tessera: test/slurm/slurm_job_test.sh calls it when no Slurm answers; scripts/install-slurm-deps.sh
# installs the packages (or LOCAL_SLURM_INSTALL=1 here). Adapted from shared/slurm/ (verified there).
#
# Starts a private munged + slurmctld + slurmd, all state/logs/sockets under one
# directory (default /tmp/local-slurm), waits until node "localhost" is idle and
# prints the PIDs plus the exact command to stop them. Idempotent: if the daemons
# recorded in the pid files are alive and the config is unchanged, it only re-checks
# the node state. Tested on Debian 12 (slurm-wlm 22.05.8, munge 0.5.15) as root,
# without systemd and without cgroups (proctrack/linuxproc + task/none).
#
# Usage:  start-local-slurm.sh [start|stop|status|env|wait JOBID [TIMEOUT_S]]  (default: start)
#   start   install config, start daemons if needed, wait for node idle
#   stop    kill the daemons recorded in the pid files (by PID only)
#   status  show daemon PIDs and sinfo
#   env     print the export lines needed by clients (sinfo/srun/sbatch)
#   wait    poll a batch job until it ends; rc 0 only if JobState=COMPLETED
#
# Environment knobs (all optional):
#   LOCAL_SLURM_DIR=/tmp/local-slurm   state/log/socket/config directory
#   LOCAL_SLURM_CPUS=8                 CPUs advertised for node "localhost" (may exceed
#                                      real cores: SlurmdParameters=config_overrides)
#   LOCAL_SLURM_MEM_MB=<MemTotal-512>  RealMemory of the node
#   LOCAL_SLURM_MPI_DEFAULT=pmix       MpiDefault (pmix works with Debian Open MPI 4.1)
#   LOCAL_SLURM_CTLD_PORT=6817 LOCAL_SLURM_SLURMD_PORT=6818
#   LOCAL_SLURM_TIMEOUT=60             seconds to wait for each daemon / node idle
#   LOCAL_SLURM_INSTALL=0              1 = apt-get install missing packages first
#   LOCAL_SLURM_LINK_ETC=0             1 = symlink /etc/slurm/slurm.conf to our config so
#                                      clients work without SLURM_CONF
set -euo pipefail

DIR=${LOCAL_SLURM_DIR:-/tmp/local-slurm}
CPUS=${LOCAL_SLURM_CPUS:-8}
MEM_MB=${LOCAL_SLURM_MEM_MB:-$(awk '/MemTotal/{m=int($2/1024)-512; if(m<1024)m=1024; print m}' /proc/meminfo)}
MPI_DEFAULT=${LOCAL_SLURM_MPI_DEFAULT:-pmix}
CTLD_PORT=${LOCAL_SLURM_CTLD_PORT:-6817}
SLURMD_PORT=${LOCAL_SLURM_SLURMD_PORT:-6818}
TIMEOUT=${LOCAL_SLURM_TIMEOUT:-60}
NODE=localhost

CONF=$DIR/etc/slurm.conf
MUNGE_DIR=$DIR/munge
MUNGE_SOCK=$MUNGE_DIR/munge.socket.2
MUNGE_PID=$MUNGE_DIR/munged.pid
CTLD_PID=$DIR/run/slurmctld.pid
SLURMD_PID=$DIR/run/slurmd.pid

log() { printf '[local-slurm] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; dump_logs; exit 1; }
dump_logs() {
  local f
  for f in "$MUNGE_DIR/munged.log" "$DIR/log/slurmctld.log" "$DIR/log/slurmd.log"; do
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

do_stop() {
  stop_pid "$SLURMD_PID" slurmd
  stop_pid "$CTLD_PID" slurmctld
  stop_pid "$MUNGE_PID" munged
  if [[ -L /etc/slurm/slurm.conf && $(readlink /etc/slurm/slurm.conf) == "$CONF" ]]; then rm -f /etc/slurm/slurm.conf; fi
  log "stopped (state kept in $DIR; rm -rf it for a clean slate)"
}

print_env() {
  echo "export SLURM_CONF=$CONF"
}

do_status() {
  local p
  for p in "$MUNGE_PID:munged" "$CTLD_PID:slurmctld" "$SLURMD_PID:slurmd"; do
    if pid=$(pid_alive "${p%%:*}" "${p##*:}"); then echo "${p##*:}: running (pid $pid)"; else echo "${p##*:}: not running"; fi
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
  local tmp=$1
  cat >"$tmp" <<EOF
# generated by start-local-slurm.sh - single node "localhost", everything under $DIR
ClusterName=localci
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCK
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$CTLD_PID
SlurmdPidFile=$SLURMD_PID
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
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
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM_MB State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
}

node_state() { SLURM_CONF=$CONF sinfo -h -n "$NODE" -o %T 2>/dev/null | head -n1; }

wait_for() { # wait_for DESCRIPTION COMMAND...
  local what=$1 i; shift
  for ((i = 0; i < TIMEOUT * 5; i++)); do "$@" && return 0; sleep 0.2; done
  die "timeout (${TIMEOUT}s) waiting for $what"
}

port_free() { ! ss -Hltn "sport = :$1" 2>/dev/null | grep -q .; }

do_start() {
  [[ $EUID -eq 0 ]] || { log "must run as root (slurmd/slurmctld run as root here)"; exit 1; }
  [[ ${LOCAL_SLURM_INSTALL:-0} == 1 ]] && install_packages
  local c
  for c in munged munge slurmctld slurmd sinfo scontrol; do
    command -v "$c" >/dev/null || { log "missing '$c' (apt-get install munge slurm-wlm, or LOCAL_SLURM_INSTALL=1)"; exit 1; }
  done

  if [[ $MPI_DEFAULT == pmix* ]] && ! pmix_lib_present; then
    log "WARNING: libpmix.so not found (apt-get install libpmix-dev): using MpiDefault=none, srun --mpi=pmix will fail"
    MPI_DEFAULT=none
  fi

  mkdir -p "$DIR"/{etc,state,spool,log,run} "$MUNGE_DIR"
  chmod 755 "$DIR" "$MUNGE_DIR" # munged requires the socket dir to be o+x and not group/other-writable
  exec 9>"$DIR/.lock"; flock -w "$TIMEOUT" 9 || die "another start-local-slurm.sh holds $DIR/.lock"
  # (fd 9 is closed for every daemon we start - "9>&-" - or they would hold the lock forever)

  local newconf=$DIR/etc/slurm.conf.new restart=0
  write_config "$newconf"
  if [[ -f $CONF ]] && cmp -s "$newconf" "$CONF"; then rm -f "$newconf"; else
    [[ -f $CONF ]] && restart=1
    mv "$newconf" "$CONF"
  fi
  if [[ ${LOCAL_SLURM_LINK_ETC:-0} == 1 ]]; then mkdir -p /etc/slurm; ln -sfn "$CONF" /etc/slurm/slurm.conf; fi
  export SLURM_CONF=$CONF

  if ((restart)); then
    log "config changed: restarting slurm daemons"
    stop_pid "$SLURMD_PID" slurmd; stop_pid "$CTLD_PID" slurmctld
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

  # --- slurmd
  if ! pid_alive "$SLURMD_PID" slurmd >/dev/null; then
    port_free "$SLURMD_PORT" || die "port $SLURMD_PORT busy (another slurmd?); set LOCAL_SLURM_SLURMD_PORT"
    rm -f "$SLURMD_PID"
    log "starting slurmd"
    slurmd -f "$CONF" -N "$NODE" 9>&- || die "slurmd failed to start"
  fi

  # --- node must become idle (or mixed/allocated if jobs are already running)
  local i st resumed=0
  for ((i = 0; i < TIMEOUT * 5; i++)); do
    st=$(node_state || true)
    case $st in
      idle | mixed | allocated | completing) break ;;
      down* | drain* | fail* | inval*)
        if ((!resumed)); then scontrol update NodeName="$NODE" State=RESUME >/dev/null 2>&1 || true; resumed=1; fi ;;
    esac
    sleep 0.2
  done
  case $st in idle | mixed | allocated | completing) ;; *) die "node $NODE state '${st:-unknown}' after ${TIMEOUT}s" ;; esac

  sinfo -N -l >&2
  print_env >"$DIR/env.sh"
  cat <<EOF
local Slurm is up: node $NODE state=$st, CPUs=$CPUS, MpiDefault=$MPI_DEFAULT
  munged    pid $(pid_alive "$MUNGE_PID" munged)
  slurmctld pid $(pid_alive "$CTLD_PID" slurmctld)
  slurmd    pid $(pid_alive "$SLURMD_PID" slurmd)
clients need:   $(print_env)      (or: source $DIR/env.sh)
stop with:      kill $(pid_alive "$SLURMD_PID" slurmd) $(pid_alive "$CTLD_PID" slurmctld) $(pid_alive "$MUNGE_PID" munged)
           or:  $0 stop
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
