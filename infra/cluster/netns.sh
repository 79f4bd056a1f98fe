#!/usr/bin/env bash
# Run a command in a fresh network + mount namespace with no link out.
#
#   netns.sh <command...>
#
# Inside: loopback up; a veth pair whose both ends stay in the namespace
# (eddy0 carries the node address $EDDY_NODE_IP/24, eddy1 is its idle peer);
# the Service CIDR ($EDDY_SERVICE_CIDR) routed to eddy0 so that connections
# from the namespace to ClusterIPs find a route before kube-proxy's DNAT; no
# default route (`ip route get 1.1.1.1` fails); IPv4 forwarding on (a
# per-namespace setting). The mount namespace is private:
#   - /run is a fresh tmpfs (xtables.lock, runtime sockets);
#   - /etc, /var and /opt are overlays whose writes land in that tmpfs, so
#     nothing run inside changes the host's files (/var/lib/cni,
#     /var/log/containers, ...);
#   - the kernel sysctls that kubelet checks with protectKernelDefaults
#     (vm.overcommit_memory, vm.panic_on_oom, kernel.panic,
#     kernel.panic_on_oops, kernel.keys.root_maxkeys/maxbytes) read the values
#     kubelet wants from read-only files bound over their /proc/sys entries,
#     so kubelet neither writes nor refuses the host's values.
#
# Exported to the command: EDDY_NODE_IP, EDDY_SERVICE_CIDR, EDDY_NETNS=1.
# The exit status is the command's. When it ends, every process left in the
# namespace, and every descendant of those (containers in their own
# namespaces), is sent SIGTERM, then SIGKILL after EDDY_NETNS_KILL_TIMEOUT
# seconds (default 10), by PID; the namespaces then vanish with the last one.
# Then whatever is still in the cgroups that node.sh start listed in
# /run/eddy-netns/cgroups (containers re-parented away when their shim went
# first) is SIGKILLed by PID, and those cgroups are removed (node.sh stop
# does both too).
# SIGTERM, SIGINT or SIGHUP to netns.sh: the command gets SIGTERM, then the
# same clean-up runs, and the exit status is the command's.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
SELF="$HERE/$(basename "${BASH_SOURCE[0]}")"
export EDDY_NODE_IP="${EDDY_NODE_IP:-10.200.0.1}"
export EDDY_SERVICE_CIDR="${EDDY_SERVICE_CIDR:-10.0.0.0/24}"
KILL_TIMEOUT="${EDDY_NETNS_KILL_TIMEOUT:-10}"

log() { echo "netns.sh: $*" >&2; }

(($#)) || { echo "usage: $0 <command...>" >&2; exit 2; }

# wait_for <pid>: wait until that child has exited (trapped signals
# interrupt `wait`) and return its exit status.
wait_for() {
    while kill -0 "$1" 2>/dev/null; do wait "$1" || true; done
    wait "$1"
}

if [[ "${EDDY_NETNS_INNER:-}" != "$$" ]]; then
    [[ "$(id -u)" == 0 ]] || { log "must run as root"; exit 2; }
    # --fork: the new namespaces get a child, which unshare waits for (it
    # ignores SIGTERM and SIGINT meanwhile, so this shell passes them on;
    # --kill-child: if unshare is killed, the child gets SIGTERM). The marker
    # is the child's own PID, known only after the fork, so a tiny shell in
    # between sets it.
    unshare --net --mount --propagation private --fork --kill-child=SIGTERM \
        bash -c 'export EDDY_NETNS_INNER=$$; exec "$0" "$@"' "$SELF" "$@" <&0 &
    outer=$!
    trap 'kill -TERM $(ps -o pid= --ppid "$outer") 2>/dev/null || true' TERM INT HUP
    rc=0
    wait_for "$outer" || rc=$?
    exit "$rc"
fi
unset EDDY_NETNS_INNER
export EDDY_NETNS=1

# ------------------------------------------------------------- mounts ----

PRIV=/run/eddy-netns
mount -t tmpfs -o mode=755,size=4g eddy-run /run
mkdir -p "$PRIV"
for d in etc var opt; do
    [[ -d "/$d" ]] || continue
    mkdir -p "$PRIV/overlay/$d/upper" "$PRIV/overlay/$d/work"
    mount -t overlay "eddy-$d" \
        -o "lowerdir=/$d,upperdir=$PRIV/overlay/$d/upper,workdir=$PRIV/overlay/$d/work" "/$d"
done
# /var/run and /var/lock are usually symlinks into /run: still fine.

mkdir -p "$PRIV/sysctl"
while read -r key value; do
    file="/proc/sys/${key//.//}"
    [[ -e "$file" ]] || continue
    echo "$value" >"$PRIV/sysctl/$key"
    mount --bind "$PRIV/sysctl/$key" "$file"
    mount -o remount,bind,ro "$file"
done <<'EOF'
vm.overcommit_memory 1
vm.panic_on_oom 0
kernel.panic 10
kernel.panic_on_oops 1
kernel.keys.root_maxkeys 1000000
kernel.keys.root_maxbytes 25000000
EOF

# ------------------------------------------------------------ network ----

ip link set lo up
ip link add eddy0 type veth peer name eddy1
ip addr add "$EDDY_NODE_IP/24" dev eddy0
ip link set eddy1 up
ip link set eddy0 up
ip route add "$EDDY_SERVICE_CIDR" dev eddy0 src "$EDDY_NODE_IP"
echo 1 >/proc/sys/net/ipv4/ip_forward

# ------------------------------------------------------------ cleanup ----

UNSHARE_PID="$PPID"

# leftovers: PIDs in this network namespace (but this shell and unshare),
# plus all their descendants, whatever namespaces those live in.
leftovers() {
    local p ppid stat rest changed=1
    local -A keep=() parent=()
    for p in /proc/[0-9]*; do
        p="${p#/proc/}"
        { read -r stat <"/proc/$p/stat"; } 2>/dev/null || continue
        rest="${stat##*) }"
        [[ "${rest:0:1}" == Z ]] && continue
        rest="${rest#* }"
        ppid="${rest%% *}"
        parent[$p]="$ppid"
        if [[ "$p" != "$$" && "$p" != "$UNSHARE_PID" && "$p" != "$BASHPID" \
            && "/proc/$p/ns/net" -ef /proc/$$/ns/net ]]; then
            keep[$p]=1
        fi
    done
    while ((changed)); do
        changed=0
        for p in "${!parent[@]}"; do
            [[ -n "${keep[$p]:-}" ]] && continue
            if [[ -n "${keep[${parent[$p]}]:-}" ]]; then keep[$p]=1; changed=1; fi
        done
    done
    echo "${!keep[@]}"
}

cleanup() {
    kill_leftovers
    # The cgroups node.sh made (listed in $PRIV/cgroups) once their processes
    # are gone, deepest first: they live in the host's cgroup tree.
    local cg h
    [[ -f "$PRIV/cgroups" ]] || return 0
    kill_in_cgroups $(sort -u "$PRIV/cgroups")
    for cg in $(sort -u "$PRIV/cgroups"); do
        for h in /sys/fs/cgroup/*/"$cg"; do
            [[ -d "$h" ]] || continue
            find "$h" -depth -type d -exec rmdir {} + 2>/dev/null || true
            [[ -d "$h" ]] && log "warning: could not remove cgroup $h"
        done
    done
    return 0
}

# kill_in_cgroups <cgroup...>: SIGKILL, by PID, what is left in the nodes'
# cgroups. A container whose shim exited first (on kill_leftovers' SIGTERM)
# was re-parented to init, out of the namespace's process tree, and would
# outlive the run if it ignores or takes its time over SIGTERM; its cgroup
# still holds it.
kill_in_cgroups() {
    local cg h pids try
    for ((try = 0; try < 5; try++)); do
        pids=""
        for cg in "$@"; do
            for h in /sys/fs/cgroup/*/"$cg"; do
                [[ -d "$h" ]] || continue
                pids+=" $({ find "$h" -name cgroup.procs -exec cat {} + 2>/dev/null || true; } | xargs)"
            done
        done
        pids="$(echo $pids | tr ' ' '\n' | sort -un | xargs)"
        [[ -z "$pids" ]] && return 0
        log "SIGKILL to what is left in the nodes' cgroups: $pids"
        # shellcheck disable=SC2086
        kill -KILL $pids 2>/dev/null || true
        sleep 0.5
    done
}

kill_leftovers() {
    local pids deadline p
    pids="$(leftovers)"
    [[ -z "$pids" ]] && return 0
    log "stopping leftover processes: $pids"
    # shellcheck disable=SC2086
    kill -TERM $pids 2>/dev/null || true
    deadline=$((SECONDS + KILL_TIMEOUT))
    while ((SECONDS < deadline)); do
        pids="$(leftovers)"
        [[ -z "$pids" ]] && return 0
        sleep 0.2
    done
    for _ in 1 2 3 4 5; do
        pids="$(leftovers)"
        [[ -z "$pids" ]] && return 0
        log "SIGKILL to $pids"
        # shellcheck disable=SC2086
        kill -KILL $pids 2>/dev/null || true
        sleep 0.5
    done
    pids="$(leftovers)"
    [[ -z "$pids" ]] || log "warning: still alive after SIGKILL: $pids"
}

# In the background (with our stdin), so that a SIGTERM, SIGINT or SIGHUP
# reaches this shell at once: it passes SIGTERM on, then cleans up.
"$@" <&0 &
cmd=$!
trap 'kill -TERM "$cmd" 2>/dev/null || true' TERM INT HUP
rc=0
wait_for "$cmd" || rc=$?
cleanup
exit "$rc"
