#!/usr/bin/env bash
# A single-node SLURM on localhost from Debian's packages: for the slurm-marked tests, and for trying
# workflow/profiles/slurm on a laptop.      usage: tests/slurm/cluster.sh up|down|clean|status
#
# up      installs munge + slurmctld + slurmd + slurm-client when missing, writes /etc/slurm/slurm.conf
#         (only if there is none, or it is ours), starts munged, slurmctld and slurmd, waits until the
#         node is idle and `srun hostname` answers. Idempotent: a cluster that is already up is left alone.
# down    stops, in reverse order and by PID, only the daemons this script started.
# clean   down, then leaves the machine as `up` found it: purges exactly the packages `up` installed (those
#         it asked for and what apt-get pulled in with them) and removes the slurm.conf it wrote. Without it Debian's slurm-client
#         stays, and Snakemake's SLURM plugin, which runs `scontrol show config` whenever it loads, makes every
#         later `snakemake` call wait ~9 s for a controller that no longer runs.
# status  prints the daemons and `sinfo`; exit 0 when the cluster answers, 1 otherwise.
#
# Needs root (daemons run as munge / slurm). No accounting daemon: run Snakemake's slurm executor with
# `--slurm-status-command squeue` (MinJobAge=3600 keeps finished jobs visible to squeue for an hour). Every wait is bounded.
set -euo pipefail

STATE=/run/attnlens-slurm          # PID files of the daemons we started; `installed`: the packages `up` installed
CONF=/etc/slurm/slurm.conf
MARK="# written by attnlens tests/slurm/cluster.sh"
HOST=$(hostname -s)

say() { echo "cluster.sh: $*" >&2; }
die() { say "error: $*"; exit 2; }

# wait_for SECONDS DESCRIPTION COMMAND...: poll every 0.2 s until COMMAND succeeds
wait_for() {
    local limit=$1 what=$2
    shift 2
    local end=$((SECONDS + limit))
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < end)) || die "timed out after ${limit}s waiting for ${what}"
        sleep 0.2
    done
}

alive() { [[ -f $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }
node_idle() { sinfo -h -N -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; }
cluster_answers() { scontrol ping 2>/dev/null | grep -q UP && node_idle; }

install() {
    command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null &&
        command -v munged >/dev/null && return 0
    [[ $EUID -eq 0 ]] || die "SLURM is not installed and installing it needs root"
    command -v apt-get >/dev/null || die "SLURM is not installed and there is no apt-get to install it"
    local pkgs=(munge slurmctld slurmd slurm-client)
    say "installing ${pkgs[*]}"
    mkdir -p "$STATE"
    packages >"$STATE/before"
    export DEBIAN_FRONTEND=noninteractive
    timeout 300 apt-get install -y -q --no-install-recommends "${pkgs[@]}" >/dev/null 2>&1 ||
        { timeout 300 apt-get update -q >/dev/null 2>&1 &&
            timeout 300 apt-get install -y -q --no-install-recommends "${pkgs[@]}" >/dev/null 2>&1; } ||
        die "apt-get could not install ${pkgs[*]}"
    packages | comm -13 "$STATE/before" - >"$STATE/installed"  # what this install added, one a line
    rm -f "$STATE/before"
}

packages() { dpkg-query -W -f='${binary:Package}\n' | sort; }

write_conf() {
    if [[ -f $CONF ]] && ! grep -qF "$MARK" "$CONF"; then
        die "$CONF exists and was not written by this script; not touching a real cluster's configuration"
    fi
    local cpus mem
    cpus=$(nproc)
    mem=$(awk '/MemTotal/ {printf "%d", $2 / 1024 * 0.9}' /proc/meminfo)
    mkdir -p /etc/slurm
    cat >"$CONF" <<CONF
$MARK
ClusterName=attnlens
SlurmctldHost=${HOST}(127.0.0.1)
SlurmUser=slurm
AuthType=auth/munge
CommunicationParameters=NoInAddrAny
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurm/slurmctld.pid
SlurmdPidFile=/run/slurm/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1000
MinJobAge=3600
ReturnToService=2
MpiDefault=none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
NodeName=${HOST} NodeAddr=127.0.0.1 CPUs=${cpus} RealMemory=${mem} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
}

up() {
    if cluster_answers; then
        say "already up"
        return 0
    fi
    install
    [[ $EUID -eq 0 ]] || die "starting the daemons needs root"
    write_conf
    mkdir -p "$STATE" /run/munge /run/slurm /var/spool/slurmctld /var/log/slurm /var/spool/slurmd
    chown munge:munge /run/munge
    chown slurm:slurm /run/slurm /var/spool/slurmctld /var/log/slurm
    if [[ ! -f /etc/munge/munge.key ]]; then
        runuser -u munge -- mungekey --create >/dev/null
    fi
    if ! alive /run/munge/munged.pid; then
        runuser -u munge -- munged
        wait_for 10 "munged" test -f /run/munge/munged.pid
        cp /run/munge/munged.pid "$STATE/munged.pid"
    fi
    wait_for 10 "munge credentials" bash -c 'munge -n | unmunge'
    if ! alive /run/slurm/slurmctld.pid; then
        slurmctld
        wait_for 10 "slurmctld's PID file" test -f /run/slurm/slurmctld.pid
        cp /run/slurm/slurmctld.pid "$STATE/slurmctld.pid"
    fi
    wait_for 30 "slurmctld (scontrol ping)" bash -c 'scontrol ping | grep -q UP'
    if ! alive /run/slurm/slurmd.pid; then
        slurmd
        wait_for 10 "slurmd's PID file" test -f /run/slurm/slurmd.pid
        cp /run/slurm/slurmd.pid "$STATE/slurmd.pid"
    fi
    wait_for 60 "node ${HOST} to become idle" node_idle
    timeout 60 srun -t 1 -N 1 hostname >/dev/null || die "srun hostname failed"
    say "up: node ${HOST}, partition debug, $(nproc) CPUs"
}

down() {
    local name pidfile pid
    for name in slurmd slurmctld munged; do
        pidfile=$STATE/$name.pid
        [[ -f $pidfile ]] || continue
        pid=$(cat "$pidfile")
        if kill -0 "$pid" 2>/dev/null; then
            kill "$pid"
            local end=$((SECONDS + 15))
            while kill -0 "$pid" 2>/dev/null && ((SECONDS < end)); do sleep 0.2; done
            kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
        fi
        rm -f "$pidfile"
        say "stopped $name ($pid)"
    done
}

clean() {
    down
    if [[ -f $CONF ]] && grep -qF "$MARK" "$CONF"; then
        rm -f "$CONF"
        say "removed $CONF"
    fi
    if [[ -s $STATE/installed ]]; then
        local pkgs
        mapfile -t pkgs <"$STATE/installed"
        export DEBIAN_FRONTEND=noninteractive
        timeout 300 apt-get purge -y -q "${pkgs[@]}" >/dev/null 2>&1 || die "apt-get could not purge ${pkgs[*]}"
        rm -rf /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/slurm  # made by `up` for them
        say "purged the ${#pkgs[@]} packages up installed"
    fi
    rm -f "$STATE/installed"
}

status() {
    local name
    for name in munged slurmctld slurmd; do
        local f=/run/slurm/$name.pid
        [[ $name == munged ]] && f=/run/munge/munged.pid
        if alive "$f"; then echo "$name: running ($(cat "$f"))"; else echo "$name: not running"; fi
    done
    if cluster_answers; then
        sinfo
        return 0
    fi
    return 1
}

case "${1:-}" in
    up) up ;;
    down) down ;;
    clean) clean ;;
    status) status ;;
    *) echo "usage: $0 up|down|clean|status" >&2; exit 64 ;;
esac
