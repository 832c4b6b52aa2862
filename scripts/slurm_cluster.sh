#!/bin/bash
# A one-node SLURM cluster on this machine, for the tests that submit real jobs:
#
#   sudo scripts/slurm_cluster.sh start   # installs Debian's slurm-wlm and munge if missing
#   sudo scripts/slurm_cluster.sh stop
#
# `start` does nothing where a cluster already answers (`sinfo`). It writes
# /etc/slurm/slurm.conf only where none exists or this script wrote it (its first line), so
# a real cluster's configuration is never touched. One node (this machine, all its CPUs),
# one partition, jobs started as root; spool and logs under /var/lib/trainlab-slurm.
set -euo pipefail
STATE=/var/lib/trainlab-slurm
CONF=/etc/slurm/slurm.conf
MARK="# written by trainlab's scripts/slurm_cluster.sh"

start() {
  if sinfo --noheader >/dev/null 2>&1; then exit 0; fi
  [[ $(id -u) == 0 ]] || { echo "error: starting a SLURM cluster needs root" >&2; exit 2; }
  if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q slurm-wlm munge >/dev/null 2>&1 \
      || { apt-get update -q >/dev/null && apt-get install -y -q slurm-wlm munge >/dev/null; }
  fi
  if [[ -e $CONF ]] && [[ $(head -1 "$CONF") != "$MARK" ]]; then
    echo "error: $CONF exists and is not this script's: start that cluster instead" >&2
    exit 2
  fi
  mkdir -p "$STATE"/{ctld,d} /etc/munge /run/munge
  if [[ ! -s /etc/munge/munge.key ]]; then
    head -c 1024 /dev/urandom > /etc/munge/munge.key
  fi
  chown -R munge:munge /etc/munge /run/munge
  chmod 400 /etc/munge/munge.key
  pgrep -x munged >/dev/null || runuser -u munge -- munged --force
  local host cpus mem
  host=$(hostname -s)
  cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)  # nproc honours both
  mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 * 8 / 10 ))
  cat > "$CONF" <<EOF
$MARK
ClusterName=trainlab
SlurmctldHost=$host
SlurmUser=root
AuthType=auth/munge
# a step credential's life, and so how long a requeued job waits (120 s by default): a
# requeued job launched before its old credential expires is refused ("credential revoked")
AuthInfo=cred_expire=10
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
JobAcctGatherType=jobacct_gather/none
ReturnToService=2
EnforcePartLimits=ALL
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd.log
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=main Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
  pgrep -x slurmctld >/dev/null || slurmctld
  pgrep -x slurmd >/dev/null || slurmd
  for _ in $(seq 50); do
    if sinfo --noheader --states=idle,mixed,allocated 2>/dev/null | grep -q .; then exit 0; fi
    sleep 0.2
  done
  echo "error: the cluster did not come up: see $STATE/slurmctld.log and slurmd.log" >&2
  exit 1
}

stop() {
  [[ -e $CONF ]] && [[ $(head -1 "$CONF") == "$MARK" ]] || exit 0
  scancel --user=root 2>/dev/null || true
  pkill -x slurmd || true
  pkill -x slurmctld || true
  pkill -x munged || true
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
