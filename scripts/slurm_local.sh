#!/usr/bin/env bash
# A real one-node SLURM cluster on this machine, for the tests (pytest fixture) and CI.
#
#   scripts/slurm_local.sh start    install slurm-wlm + munge if missing, start munged,
#                                   slurmctld and slurmd; exit 0 once the node is usable
#   scripts/slurm_local.sh status   print sinfo and squeue; exit 0 if the controller answers
#                                   and the node is idle/mixed/allocated/completing, else 1
#   scripts/slurm_local.sh stop     cancel every job, stop slurmd and slurmctld; exit 0 also
#                                   when nothing ran. munged is left running (a shared system
#                                   service, cheap, and restarting it is what costs time)
# All three are idempotent; `start` on a running cluster is a quick no-op. Must run as root.
#
# What it writes, where:
#   ${PARABENCH_SLURM_DIR:-/var/tmp/parabench-slurm}/
#     slurm.conf          the generated config (rewritten only when its content changes;
#                         if it changes while the daemons run, they are restarted)
#     state/  spool/      slurmctld's StateSaveLocation, slurmd's SlurmdSpoolDir
#     log/                slurmctld.log, slurmd.log
#     run/                slurmctld.pid, slurmd.pid
#   /etc/slurm/slurm.conf a symlink to the file above, so that sinfo/sbatch/squeue/scancel/
#                         scontrol and Python code calling them find it without SLURM_CONF.
#                         Made only when that path is absent or is ours (a symlink to our
#                         conf, or a file carrying the marker line below); a slurm.conf
#                         someone else wrote is never touched: `start` fails instead.
#   /etc/munge/munge.key  created (munge:munge, mode 400) only when missing
#
# No accounting database (no slurmdbd, AccountingStorageType=accounting_storage/none, so
# `sacct` does not work): a one-node test cluster does not need a MySQL server. Callers read
# jobs' states and exit codes from `scontrol show job <id>` instead; MinJobAge=3600 keeps
# finished jobs visible there for an hour.
#
# Scheduling: select/cons_tres with CR_Core_Memory, so jobs are packed by CPU count (two
# 1-CPU jobs run at once on a 2-CPU node, a 2-CPU job then waits). Processes are tracked
# with proctrack/linuxproc (no cgroups needed, works in containers); scancel and time
# limits kill the job's whole process tree.
set -euo pipefail

PATH="$PATH:/usr/sbin:/sbin"
DIR=${PARABENCH_SLURM_DIR:-/var/tmp/parabench-slurm}
CONF="$DIR/slurm.conf"
ETC_CONF=/etc/slurm/slurm.conf
MARK='# written by parabench scripts/slurm_local.sh'
NODE=$(hostname -s)
export SLURM_CONF="$CONF"

say() { echo "slurm_local.sh: $*"; }
die() { echo "slurm_local.sh: $*" >&2; exit 1; }

# --- installation and munge -----------------------------------------------------------

have_binaries() {
  local b
  for b in slurmctld slurmd munged munge unmunge sinfo sbatch squeue scancel scontrol; do
    command -v "$b" >/dev/null || return 1
  done
}

ensure_packages() {
  have_binaries && return 0
  say "installing slurm-wlm and munge"
  local apt=(apt-get install -y -q slurm-wlm munge)
  if ! DEBIAN_FRONTEND=noninteractive "${apt[@]}" >/dev/null; then
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive "${apt[@]}" >/dev/null
  fi
  have_binaries || die "slurm-wlm/munge installed, but their commands are still missing"
}

munge_ok() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

ensure_munge_key() {
  local key=/etc/munge/munge.key
  [ -s "$key" ] && return 0
  mkdir -p /etc/munge
  if command -v mungekey >/dev/null; then
    mungekey --create --keyfile="$key" --force
  elif command -v create-munge-key >/dev/null; then
    create-munge-key -f
  else
    dd if=/dev/urandom of="$key" bs=1024 count=1 status=none
  fi
  chown munge:munge /etc/munge "$key"
  chmod 700 /etc/munge
  chmod 400 "$key"
}

ensure_munge() {
  munge_ok && return 0
  ensure_munge_key
  mkdir -p /run/munge /var/lib/munge /var/log/munge
  chown munge:munge /run/munge /var/lib/munge /var/log/munge
  chmod 755 /run/munge
  runuser -u munge -- munged || die "munged did not start: $(tail -n 3 /var/log/munge/munged.log 2>/dev/null)"
  local i
  for i in $(seq 50); do munge_ok && return 0; sleep 0.1; done
  die "munged runs but 'munge -n | unmunge' fails"
}

# --- configuration --------------------------------------------------------------------

# `slurmd -C` prints e.g. "NodeName=vm CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2
# ThreadsPerCore=1 RealMemory=24105"; echo the node's hardware line for slurm.conf.
node_hardware() {
  local word cpus=1 boards=1 sockets=1 cores=1 threads=1 mem=2048
  for word in $(slurmd -C | sed -n 1p); do
    case $word in
      CPUs=*) cpus=${word#*=} ;;
      Boards=*) boards=${word#*=} ;;
      SocketsPerBoard=*) sockets=${word#*=} ;;
      CoresPerSocket=*) cores=${word#*=} ;;
      ThreadsPerCore=*) threads=${word#*=} ;;
      RealMemory=*) mem=${word#*=} ;;
    esac
  done
  # below the measured memory, so that the node is never drained for "low RealMemory"
  mem=$(( mem > 2048 ? mem - 1024 : mem / 2 ))
  echo "CPUs=$cpus Sockets=$(( boards * sockets )) CoresPerSocket=$cores ThreadsPerCore=$threads RealMemory=$mem"
}

render_conf() {
  cat <<EOF
$MARK
# One-node test cluster; see the top of scripts/slurm_local.sh. Regenerated on every start.
ClusterName=parabench
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1,bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1024
MinJobAge=3600
KillWait=5
InactiveLimit=0
ReturnToService=2
NodeName=$NODE NodeAddr=127.0.0.1 $(node_hardware) State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
}

# Writes $CONF; sets CONF_CHANGED=1 when its content changed.
CONF_CHANGED=0
write_conf() {
  mkdir -p "$DIR"/{state,spool,log,run}
  local tmp="$CONF.tmp.$$"
  render_conf >"$tmp"
  if cmp -s "$tmp" "$CONF"; then
    rm -f "$tmp"
  else
    mv -f "$tmp" "$CONF"
    CONF_CHANGED=1
  fi
}

etc_conf_is_ours() {
  [ -L "$ETC_CONF" ] && [ "$(readlink "$ETC_CONF")" = "$CONF" ] && return 0
  [ -f "$ETC_CONF" ] && grep -qxF "$MARK" "$ETC_CONF"
}

check_etc_conf() {
  if [ -e "$ETC_CONF" ] || [ -L "$ETC_CONF" ]; then
    etc_conf_is_ours || die "$ETC_CONF exists and was not written by us; not overwriting it (move it away or set SLURM_CONF)"
  fi
  return 0
}

link_etc_conf() {
  [ "$(readlink "$ETC_CONF" || true)" = "$CONF" ] && return 0
  mkdir -p "$(dirname "$ETC_CONF")"
  ln -sfn "$CONF" "$ETC_CONF"
}

# --- daemons --------------------------------------------------------------------------

# proc_is PID NAME: PID is a live NAME process (a zombie counts as gone: in containers
# PID 1 may never reap the daemons it inherits).
proc_is() {
  local stat
  [ "$(cat "/proc/$1/comm" 2>/dev/null)" = "$2" ] || return 1
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [ "${stat%% *}" != Z ]
}

# daemon_pid NAME: echo the pid from our pid file if that process is a live NAME.
daemon_pid() {
  local pid
  pid=$(cat "$DIR/run/$1.pid" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  proc_is "$pid" "$1" || return 1
  echo "$pid"
}

ctld_answers() { scontrol ping 2>/dev/null | grep -q 'is UP'; }

start_ctld() {
  daemon_pid slurmctld >/dev/null && return 0
  slurmctld -i -f "$CONF"
  local i
  for i in $(seq 150); do ctld_answers && return 0; sleep 0.1; done
  fail "slurmctld did not answer 'scontrol ping' within 15 s"
}

start_slurmd() {
  daemon_pid slurmd >/dev/null && return 0
  slurmd -f "$CONF" -N "$NODE"
}

# stop_daemon NAME: SIGTERM, wait up to 10 s, then SIGKILL.
stop_daemon() {
  local pid i
  pid=$(daemon_pid "$1") || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 100); do
    proc_is "$pid" "$1" || return 0
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
  sleep 0.2
}

node_state() { sinfo -h -N -n "$NODE" -o '%T' 2>/dev/null | head -n 1; }

node_usable() {
  case $(node_state) in
    idle|mixed|allocated|completing) return 0 ;;
    *) return 1 ;;
  esac
}

# Wait up to 30 s for the node; resume it once if it is down/drained but responding.
wait_node() {
  local i state resumed=0
  for i in $(seq 300); do
    state=$(node_state)
    case $state in
      idle|mixed|allocated|completing) return 0 ;;
      down|drain*|fail)
        if [ "$resumed" = 0 ] && [ "$i" -gt 20 ]; then
          scontrol update nodename="$NODE" state=resume || true
          resumed=1
        fi ;;
    esac
    sleep 0.1
  done
  fail "node $NODE is '${state:-not known}', not idle, after 30 s"
}

fail() {
  echo "slurm_local.sh: $*" >&2
  local log
  for log in "$DIR/log/slurmctld.log" "$DIR/log/slurmd.log" /var/log/munge/munged.log; do
    [ -f "$log" ] || continue
    echo "--- tail of $log" >&2
    tail -n 25 "$log" >&2
  done
  exit 1
}

# --- commands -------------------------------------------------------------------------

cancel_all_jobs() {
  ctld_answers || return 0
  local ids i
  ids=$(squeue -h -o '%i' 2>/dev/null | tr '\n' ' ')
  [ -n "${ids// /}" ] || return 0
  # shellcheck disable=SC2086  # one word per job id
  scancel $ids 2>/dev/null || true
  for i in $(seq 150); do
    [ -z "$(squeue -h -o '%i' 2>/dev/null)" ] && return 0
    sleep 0.1
  done
  say "warning: jobs still listed 15 s after scancel: $(squeue -h -o '%i %T' | tr '\n' ' ')"
}

stop_daemons() {
  stop_daemon slurmd
  stop_daemon slurmctld
}

any_daemon() { daemon_pid slurmctld >/dev/null || daemon_pid slurmd >/dev/null; }

cmd_start() {
  [ "$(id -u)" = 0 ] || die "start must run as root"
  check_etc_conf
  ensure_packages
  ensure_munge
  write_conf
  link_etc_conf
  if [ "$CONF_CHANGED" = 1 ] && any_daemon; then
    say "slurm.conf changed; restarting slurmd and slurmctld"
    stop_daemons
  fi
  start_ctld
  start_slurmd
  wait_node
  say "cluster parabench up: node $NODE $(node_state)"
}

cmd_status() {
  if ! ctld_answers; then
    echo "slurm_local.sh: slurmctld is not answering (scontrol ping; SLURM_CONF=$CONF)" >&2
    exit 1
  fi
  sinfo -N -o '%N %T %C %m'
  squeue
  node_usable || { echo "slurm_local.sh: node $NODE is '$(node_state)'" >&2; exit 1; }
}

cmd_stop() {
  if [ ! -f "$CONF" ] || ! any_daemon; then
    say "nothing to stop (slurmctld and slurmd not running from $DIR)"
    return 0
  fi
  cancel_all_jobs
  stop_daemons
  say "slurmd and slurmctld stopped (munged left running)"
}

case ${1:-} in
  start) cmd_start ;;
  status) cmd_status ;;
  stop) cmd_stop ;;
  *) echo "usage: $0 start|status|stop" >&2; exit 2 ;;
esac
