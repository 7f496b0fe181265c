#!/usr/bin/env bash
# cluster.sh — a one-node SLURM cluster on this machine, for tests (issue 15).
#
#   cluster.sh start DIR   start munged, slurmctld and slurmd with a generated
#                          slurm.conf under DIR (as root); prints the
#                          SLURM_CONF to export; exit 77 when SLURM or munge is
#                          not installed or the daemons do not come up
#   cluster.sh stop DIR    stop them by the pids under DIR
#
# Everything lives in DIR (key, sockets, state, logs): nothing under /etc is
# touched, so a developer's own munge/slurm setup is left alone. Ports are
# chosen free at start so parallel test runs do not collide.
set -euo pipefail
cmd=${1:?usage: cluster.sh start|stop DIR}
D=${2:?usage: cluster.sh start|stop DIR}

skip() { echo "SKIP: $*" >&2; exit 77; }

free_port() {   # a TCP port nobody listens on
    local p
    for p in $(shuf -i 20000-60000 -n 50); do
        ss -ltn 2>/dev/null | awk '{print $4}' | grep -q ":$p\$" || { echo "$p"; return; }
    done
    skip "no free TCP port for slurmctld/slurmd"
}

case "$cmd" in
start)
    for b in munged slurmctld slurmd sbatch; do
        command -v "$b" >/dev/null || skip "$b not installed (Debian packages slurm-wlm and munge)"
    done
    [ "$(id -u)" -eq 0 ] || skip "starting a SLURM cluster needs root"
    rm -rf "$D"; mkdir -p "$D/state" "$D/spool"
    host=$(hostname -s)
    head -c 1024 /dev/urandom > "$D/munge.key"; chmod 400 "$D/munge.key"
    munged --key-file="$D/munge.key" --socket="$D/munge.sock" --pid-file="$D/munged.pid" \
           --log-file="$D/munged.log" --seed-file="$D/munge.seed" --force \
        || skip "munged did not start (see $D/munged.log)"
    mem_mib=$(( $(awk '/MemTotal/{print $2}' /proc/meminfo) / 1024 - 1024 ))
    cat > "$D/slurm.conf" <<CONF
ClusterName=nlflowtest
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
AuthType=auth/munge
AuthInfo=socket=$D/munge.sock
CredType=cred/munge
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd.pid
SlurmctldLogFile=$D/slurmctld.log
SlurmdLogFile=$D/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
MessageTimeout=10
NodeName=$host CPUs=$(nproc) RealMemory=$mem_mib State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
    export SLURM_CONF="$D/slurm.conf"
    slurmctld -f "$SLURM_CONF" -i || skip "slurmctld did not start (see $D/slurmctld.log)"
    slurmd -f "$SLURM_CONF" || skip "slurmd did not start (see $D/slurmd.log)"
    for _ in $(seq 1 30); do   # until the node is idle
        sinfo -h -o %t 2>/dev/null | grep -q idle && { echo "$SLURM_CONF"; exit 0; }
        sleep 1
    done
    skip "the SLURM node did not become idle within 30 s (see $D/slurmctld.log, $D/slurmd.log)"
    ;;
stop)
    pids=()
    for d in slurmd slurmctld munged; do
        [ -f "$D/$d.pid" ] && pids+=("$(cat "$D/$d.pid")")
    done
    [ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2>/dev/null || true
    for _ in $(seq 1 100); do   # until they are gone (slurmd ends its job steps first)
        alive=0
        for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
        [ $alive -eq 0 ] && exit 0
        sleep 0.1
    done
    kill -9 "${pids[@]}" 2>/dev/null || true
    ;;
*) echo "usage: cluster.sh start|stop DIR" >&2; exit 2 ;;
esac
