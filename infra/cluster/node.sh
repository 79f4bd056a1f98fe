#!/usr/bin/env bash
# A real Kubernetes cluster of one or more nodes (kubelet + containerd + runc
# per node, a CNI bridge per node, kube-proxy, CoreDNS, static local
# PersistentVolumes per node), run inside the network namespace that netns.sh
# makes: node, pod and Service addresses never leave it.
#
#   node.sh build          build CoreDNS (infra/coredns/go.mod) into
#                          $EDDY_CACHE/k8s/bin (skipped when up to date); the
#                          Kubernetes binaries come from ../k8s/k8s.sh build
#                          (kubelet and kube-proxy: its part `node`)
#   node.sh start <dir>    start everything (run inside netns.sh), wait until
#                          every node is Ready and CoreDNS answers, create the
#                          StorageClass and the PersistentVolumes
#   node.sh kill-node <dir> <node>
#                          make one node fail for real, without warning: SIGKILL
#                          its kubelet, its containerd, their children, its
#                          shims and every container process under its cgroup
#                          root (by PID), then cut its pod network (its bridge
#                          down, its pod CIDR a blackhole route: its pods' IPs
#                          stop answering, as a dead machine's do); <node> is
#                          a name or a 1-based index. Its mounts stay until
#                          stop; its address stays (node 1's carries the
#                          control plane): nothing listens there any more.
#   node.sh restart-node <dir> <node>
#                          a killed node comes back, as after a reboot: its pod
#                          network reachable again, its containerd and kubelet
#                          started on their state directories; waits until the
#                          node is Ready
#   node.sh stop <dir>     stop pods, nodes and control plane (etcd last),
#                          unmount what they mounted under <dir>, remove the
#                          nodes' cgroups, bridges, extra addresses and routes,
#                          and their image stores (containerd's root and
#                          state); logs are kept
#   node.sh dns <name>     the A records CoreDNS ($EDDY_NODE_IP:53) serves for
#                          <name>, one per line (fails without an answer)
#
#   infra/cluster/netns.sh sh -c 'infra/cluster/node.sh start /tmp/n && ... ;
#                                 infra/cluster/node.sh stop /tmp/n'
#   EDDY_NODES=3 infra/cluster/netns.sh sh -c '...'      three nodes
#
# Nodes (EDDY_NODES, default 1): node i (1-based) has
#   name      $EDDY_NODE_NAME (one node) or $EDDY_NODE_NAME-<i> (several)
#   address   $EDDY_NODE_IP + i - 1 (10.200.0.1, .2, .3 ...), on eddy0; node 1's
#             address also carries the control plane, CoreDNS and kube-proxy
#   zone      topology.kubernetes.io/zone: word i of EDDY_NODE_ZONES, else
#             zone-a for the first half (rounded up), zone-b for the rest
#             (1 node: zone-a; 3 nodes: zone-a, zone-a, zone-b)
#   pods      10.244.<i-1>.0/24 on bridge cni<i-1> (gateway 10.244.<i-1>.1);
#             all bridges are in the run's namespace, so routes between them
#             are local and pods on different nodes reach each other directly
#   directory <dir> for node 1, <dir>/node-<i> for the others, each with its
#             own containerd (root, state, socket), kubelet root, CNI config
#             and IPAM leases, pod logs, volumes, and a cgroup root of its own
#             (eddy-node-<hash of that directory>)
# Shared by all nodes: etcd, apiserver, controller-manager, scheduler, one
# kube-proxy (the iptables rules are the namespace's; it runs as node 1's) and
# CoreDNS on $EDDY_NODE_IP. kill-node leaves those running, whichever node dies.
# With several nodes the control plane notices a silent node quickly: kubelets
# renew their Lease every 5 s (nodeLeaseDurationSeconds 20), the
# controller-manager checks every 2 s and marks a node NotReady (Ready
# Unknown) after EDDY_NODE_MONITOR_GRACE (20s) without one. One node keeps
# Kubernetes' defaults (40 s lease, 50 s grace).
#
# Layout of <dir>:
#   kubeconfig        admin kubeconfig, server https://$EDDY_NODE_IP:$EDDY_NODE_API_PORT
#   cluster.env       NODE_IP, NODE_NAME (node 1), DNS_IP, API_URL, STORAGE_CLASS,
#                     KUBECONFIG, CLUSTER_DOMAIN, POD_CIDR (all nodes'), SERVICE_CIDR,
#                     PVS (per node), NODES
#   nodes             one line per node: index name address zone pod-cidr
#                     bridge directory cgroup
#   <name>.log/.pid   per component: etcd kube-apiserver kube-controller-manager
#                     kube-scheduler kube-proxy coredns (and node 1's containerd,
#                     kubelet)
#   pki/              CA, apiserver cert (SANs: 127.0.0.1, node IPs, 10.0.0.1,
#                     kubernetes.default.svc...), admin client cert
# and in each node's directory:
#   images.log        the image import
#   containerd.log/.pid, kubelet.log/.pid, killed (after kill-node)
#   containerd/       config.toml, root, state, containerd.sock
#   cni/              the bridge conflist; cni-ipam/ host-local's leases
#   kubelet/          kubelet root dir and config; pod-logs/ container logs
#   volumes/pv-NN     backing directories of the node's local PersistentVolumes
#
# Storage: StorageClass "eddy-local" (kubernetes.io/no-provisioner,
# WaitForFirstConsumer, the default class) and EDDY_NODE_PVS (12) static
# `local` PersistentVolumes per node of EDDY_NODE_PV_SIZE (2Gi), ReadWriteOncePod
# (what Spark 4 asks for its on-demand claims: one pod at a time writes a store),
# reclaim policy Retain, with node affinity to their node, on
# <node dir>/volumes/pv-NN (owner 185:185, mode 2775: pods run as uid 185 with
# fsGroup 185); named eddy-pv-NN (one node) or eddy-pv-<i>-NN, labelled
# eddy.local/node=<node name>. A claim binds when its first pod is scheduled; a
# deleted claim leaves its volume Released (Retain), so each run of a cluster
# has EDDY_NODE_PVS bindings per node.
#
# Addresses: Services 10.0.0.0/24 (kubernetes = 10.0.0.1, endpoint
# $EDDY_NODE_IP), cluster DNS = CoreDNS as a process on $EDDY_NODE_IP:53 (zones
# cluster.local, in-addr.arpa, ip6.arpa; nothing forwarded: there is no
# upstream). Ports in the namespace: etcd 127.0.0.1:2379/2380, apiserver
# 0.0.0.0:6443, kubelet 10250 (one node: on 0.0.0.0, healthz 127.0.0.1:10248;
# several: each on its own address, healthz there too), kube-proxy
# 127.0.0.1:10249/10256, CoreDNS ready 127.0.0.1:8181. One cluster per
# namespace: start refuses when etcd's or the apiserver's port is taken.
#
# Images: every *_ARCHIVE in $EDDY_CACHE/images/images.env (written by
# infra/image/image.sh build) is imported into each node's containerd (k8s.io
# namespace), all nodes at once; PAUSE_IMAGE is the sandbox image. Pods must
# use imagePullPolicy Never or IfNotPresent (there is no registry).
#
# Environment: EDDY_CACHE (<repo>/.cache), EDDY_NODES (1), EDDY_NODE_ZONES,
# EDDY_NODE_IP (10.200.0.1), EDDY_NODE_API_PORT (6443), EDDY_NODE_NAME
# (eddy-node), EDDY_NODE_PVS (12), EDDY_NODE_PV_SIZE (2Gi),
# EDDY_NODE_MONITOR_GRACE (s, several nodes: 20), EDDY_K8S_READY_TIMEOUT (s, 90),
# EDDY_K8S_STOP_TIMEOUT (s before SIGKILL, 10), EDDY_K8S_APISERVER_ARGS.
set -euo pipefail

NODE_HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# launch, alive, pid_of, fail, wait_until, kubectl_in, make_pki, stamps, $BIN...
# shellcheck source=../k8s/k8s.sh
source "$NODE_HERE/../k8s/k8s.sh"
COREDNS_MODULE_DIR="$REPO/infra/coredns"

NODE_IP="${EDDY_NODE_IP:-10.200.0.1}"
API_PORT="${EDDY_NODE_API_PORT:-6443}"
NODE_NAME="${EDDY_NODE_NAME:-eddy-node}"
NODES="${EDDY_NODES:-1}"
ZONES="${EDDY_NODE_ZONES:-}"
PVS="${EDDY_NODE_PVS:-12}"
PV_SIZE="${EDDY_NODE_PV_SIZE:-2Gi}"
SERVICE_CIDR=10.0.0.0/24
CLUSTER_DOMAIN=cluster.local
STORAGE_CLASS=eddy-local
POD_UID=185
ETCD_PORT=2379
ETCD_PEER_PORT=2380

# Started in this order; wait_nodes watches them all (containerd and kubelet
# once per node, in that node's directory).
IMPORT_PIDS=()
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler containerd kubelet kube-proxy coredns)
# The cluster's directory while start runs (fail stops the whole cluster).
CLUSTER_DIR=

log() { echo "node.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

# ---------------------------------------------------------------- build ----

cmd_build() {
    command -v go >/dev/null || die "go is not on PATH"
    mkdir -p "$BIN"
    exec 9>"$BIN/.build-coredns.lock"
    flock 9
    local version stamp start=$SECONDS
    version="$(module_version "$COREDNS_MODULE_DIR" github.com/coredns/coredns)"
    stamp="github.com/coredns/coredns@$version $(module_stamp "$COREDNS_MODULE_DIR")"
    stamp+=" $(sha256sum "$COREDNS_MODULE_DIR/main.go" | cut -c1-16)"
    if ! stamp_matches coredns "$stamp"; then
        log "building coredns ($version)"
        (cd "$COREDNS_MODULE_DIR" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" \
            -o "$BIN/coredns" .)
        write_stamp coredns "$stamp"
        log "built coredns in $((SECONDS - start)) s"
    fi
    echo "  coredns                  $("$BIN/coredns" -version | head -1)"
}

# ---------------------------------------------------------------- nodes ----

# The attributes of node <i> (1-based); see the header.
node_name_of() { if ((NODES == 1)); then echo "$NODE_NAME"; else echo "$NODE_NAME-$1"; fi; }
node_ip_of() { echo "${NODE_IP%.*}.$((${NODE_IP##*.} + $1 - 1))"; }
node_cidr_of() { echo "10.244.$(($1 - 1)).0/24"; }
node_bridge_of() { echo "cni$(($1 - 1))"; }
# node_dir_of <cluster dir> <i>
node_dir_of() { if (($2 == 1)); then echo "$1"; else echo "$1/node-$2"; fi; }
node_zone_of() {
    local zones
    if [[ -n "$ZONES" ]]; then
        read -ra zones <<<"$ZONES"
        ((${#zones[@]} >= NODES)) || die "EDDY_NODE_ZONES names ${#zones[@]} zone(s) for $NODES nodes"
        echo "${zones[$1 - 1]}"
    elif (($1 <= (NODES + 1) / 2)); then
        echo zone-a
    else
        echo zone-b
    fi
}
# The pod range of the whole cluster (kube-proxy's clusterCIDR).
cluster_cidr() { if ((NODES == 1)); then node_cidr_of 1; else echo 10.244.0.0/16; fi; }

# cgroup_name <dir>: the node's cgroup root, one per node directory, so that
# two nodes on one host never clean up each other's pod cgroups.
cgroup_name() {
    echo "eddy-node-$(echo "$1" | sha256sum | cut -c1-10)"
}

# Per node (index 1..NODES), filled by load_nodes from <dir>/nodes.
N_NAME=() N_IP=() N_ZONE=() N_CIDR=() N_BRIDGE=() N_DIR=() N_CG=()

write_nodes_file() {
    local dir="$1" i nd
    : >"$dir/nodes"
    for ((i = 1; i <= NODES; i++)); do
        nd="$(node_dir_of "$dir" "$i")"
        echo "$i $(node_name_of "$i") $(node_ip_of "$i") $(node_zone_of "$i") $(node_cidr_of "$i")" \
            "$(node_bridge_of "$i") $nd $(cgroup_name "$nd")" >>"$dir/nodes"
    done
}

# load_nodes <dir>: fill N_* and NODES from <dir>/nodes; a directory started
# before that file existed holds one node.
load_nodes() {
    local dir="$1" i name ip zone cidr bridge nd cg
    N_NAME=() N_IP=() N_ZONE=() N_CIDR=() N_BRIDGE=() N_DIR=() N_CG=()
    if [[ ! -f "$dir/nodes" ]]; then
        NODES=1
        N_NAME[1]="$NODE_NAME" N_IP[1]="$NODE_IP" N_ZONE[1]=zone-a N_CIDR[1]="$(node_cidr_of 1)"
        N_BRIDGE[1]=cni0 N_DIR[1]="$dir" N_CG[1]="$(cgroup_name "$dir")"
        return 0
    fi
    NODES=0
    while read -r i name ip zone cidr bridge nd cg; do
        N_NAME[i]="$name" N_IP[i]="$ip" N_ZONE[i]="$zone" N_CIDR[i]="$cidr"
        N_BRIDGE[i]="$bridge" N_DIR[i]="$nd" N_CG[i]="$cg"
        NODES=$i
    done <"$dir/nodes"
}

# node_index <name or index>: that node's index in N_* (fails if none).
node_index() {
    local i
    for ((i = 1; i <= NODES; i++)); do
        if [[ "$1" == "$i" || "$1" == "${N_NAME[i]}" ]]; then echo "$i"; return 0; fi
    done
    return 1
}

# ---------------------------------------------------------------- start ----

# images_env <key>: a value from images.env (empty when absent).
images_env() {
    sed -n "s/^$1=//p" "$EDDY_CACHE/images/images.env" | tail -1
}

make_cgroups() {
    local name="$1" h
    for h in /sys/fs/cgroup/*/; do
        h="${h%/}"
        mountpoint -q "$h" || continue
        mkdir -p "$h/$name"
        if [[ -f "$h/cpuset.cpus" ]]; then
            cat "$h/cpuset.cpus" >"$h/$name/cpuset.cpus"
            cat "$h/cpuset.mems" >"$h/$name/cpuset.mems"
        fi
    done
}

# write_node_configs <i> <pki dir> <pause image>: containerd's, the CNI's and
# kubelet's configuration of node i, in its own directory.
write_node_configs() {
    local i="$1" pki="$2" pause="$3" nd cg ip bind healthz lease=""
    nd="${N_DIR[i]}" cg="${N_CG[i]}" ip="${N_IP[i]}"
    mkdir -p "$nd/containerd" "$nd/cni" "$nd/cni-ipam" "$nd/kubelet" "$nd/pod-logs"
    # One node keeps kubelet's ports where they always were; several bind
    # each kubelet to its own address.
    if ((NODES == 1)); then
        bind=0.0.0.0 healthz=127.0.0.1
    else
        bind="$ip" healthz="$ip"
        lease="nodeLeaseDurationSeconds: 20"
    fi

    cat >"$nd/containerd/config.toml" <<EOF
version = 2
root = "$nd/containerd/root"
state = "$nd/containerd/state"
oom_score = 0

[grpc]
  address = "$nd/containerd/containerd.sock"

[ttrpc]
  address = "$nd/containerd/containerd.sock.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "$nd/containerd/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$nd/cni"
    max_conf_num = 1
EOF

    # containerd brings up each pod's loopback itself (with /usr/lib/cni/loopback).
    cat >"$nd/cni/10-eddy.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "eddy",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "${N_BRIDGE[i]}",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "${N_CIDR[i]}"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$nd/cni-ipam"
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF

    echo "nameserver $NODE_IP" >"$nd/resolv.conf"

    cat >"$nd/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $bind
port: 10250
readOnlyPort: 0
healthzBindAddress: $healthz
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: "$pki/ca.crt"}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: "unix://$nd/containerd/containerd.sock"
cgroupDriver: cgroupfs
cgroupRoot: "/$cg"
cgroupsPerQOS: true
failCgroupV1: false
protectKernelDefaults: true
makeIPTablesUtilChains: true
failSwapOn: false
oomScoreAdj: 0
clusterDNS: ["$NODE_IP"]
clusterDomain: "$CLUSTER_DOMAIN"
resolvConf: "$nd/resolv.conf"
podLogsDir: "$nd/pod-logs"
hairpinMode: hairpin-veth
maxPods: 110
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%"
  nodefs.inodesFree: "1%"
  imagefs.available: "1%"
  imagefs.inodesFree: "1%"
evictionPressureTransitionPeriod: 10s
nodeStatusUpdateFrequency: 5s
$lease
syncFrequency: 10s
shutdownGracePeriod: 0s
EOF
}

# write_cluster_configs <dir>: kube-proxy's and CoreDNS's (one each, shared by the nodes).
write_cluster_configs() {
    local dir="$1"
    cat >"$dir/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: "$dir/kubeconfig"
hostnameOverride: "${N_NAME[1]}"
mode: iptables
clusterCIDR: "$(cluster_cidr)"
bindAddress: "$NODE_IP"
healthzBindAddress: "127.0.0.1:10256"
metricsBindAddress: "127.0.0.1:10249"
oomScoreAdj: 0
nodePortAddresses: ["$NODE_IP/32"]
iptables:
  localhostNodePorts: false
  syncPeriod: 10s
  minSyncPeriod: 0s
# No conntrack sysctl writes (some of them are host-wide).
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
  udpTimeout: 0s
  udpStreamTimeout: 0s
EOF

    cat >"$dir/Corefile" <<EOF
.:53 {
    bind $NODE_IP
    errors
    ready 127.0.0.1:8181
    kubernetes $CLUSTER_DOMAIN in-addr.arpa ip6.arpa {
        kubeconfig $dir/kubeconfig eddy
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }
    cache 5
}
EOF
}

# dns_a <name>: the A records CoreDNS serves for <name> (one per line); fails
# without an answer. Python's standard library only: no dig/nslookup here.
dns_a() {
    python3 - "$1" "$NODE_IP" <<'EOF'
import random, socket, struct, sys
name, server = sys.argv[1], sys.argv[2]
qid = random.randrange(65536)
q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
q += b"".join(bytes([len(p)]) + p.encode() for p in name.rstrip(".").split(".")) + b"\0"
q += struct.pack(">HH", 1, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(2)
s.sendto(q, (server, 53))
r = s.recv(4096)
rid, flags, qd, an = struct.unpack(">HHHH", r[:8])
if rid != qid or flags & 0xF or not an:
    sys.exit(1)
i = 12
for _ in range(qd):
    while r[i]:
        i += r[i] + 1
    i += 5
for _ in range(an):
    if r[i] & 0xC0 == 0xC0:
        i += 2
    else:
        while r[i]:
            i += r[i] + 1
        i += 1
    t, c, ttl, ln = struct.unpack(">HHIH", r[i:i + 10])
    i += 10
    if t == 1:
        print(socket.inet_ntoa(r[i:i + ln]))
    i += ln
EOF
}

create_storage() {
    local dir="$1" i n name pv nd
    {
        cat <<EOF
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: $STORAGE_CLASS
  annotations:
    storageclass.kubernetes.io/is-default-class: "true"
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
reclaimPolicy: Retain
EOF
        for ((n = 1; n <= NODES; n++)); do
            nd="${N_DIR[n]}"
            mkdir -p "$nd/volumes"
            for ((i = 0; i < PVS; i++)); do
                name="$(printf 'pv-%02d' "$i")"
                if ((NODES == 1)); then pv="eddy-$name"; else pv="$(printf 'eddy-pv-%d-%02d' "$n" "$i")"; fi
                mkdir -p "$nd/volumes/$name"
                chown "$POD_UID:$POD_UID" "$nd/volumes/$name"
                chmod 2775 "$nd/volumes/$name"
                cat <<EOF
---
apiVersion: v1
kind: PersistentVolume
metadata:
  name: $pv
  labels:
    eddy.local/volume: "true"
    eddy.local/node: ${N_NAME[n]}
spec:
  capacity:
    storage: $PV_SIZE
  accessModes: [ReadWriteOncePod]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: $STORAGE_CLASS
  volumeMode: Filesystem
  local:
    path: $nd/volumes/$name
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions:
        - key: kubernetes.io/hostname
          operator: In
          values: [${N_NAME[n]}]
EOF
            done
        done
    } | kubectl_in "$dir" apply -f - >/dev/null || fail "$dir" kube-apiserver "could not create the StorageClass and PersistentVolumes"
}

write_node_kubeconfig() {
    write_kubeconfig "$1" "$API_PORT"
    sed -i "s|server: https://127.0.0.1:$API_PORT|server: https://$NODE_IP:$API_PORT|" "$1/kubeconfig"
}

# elapsed: seconds since cmd_start began, to 0.1 s.
elapsed() { awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
stage() { log "$(printf '%5ss' "$(elapsed)") $*"; }

# wait_nodes <what> <timeout> <command...>: k8s.sh's wait_until, watching the
# processes of every node (and of the control plane) rather than one directory's.
wait_nodes() {
    local what="$1" timeout="$2" deadline i name
    shift 2
    deadline=$((SECONDS + timeout))
    until "$@" >/dev/null 2>&1; do
        for ((i = 1; i <= NODES; i++)); do
            for name in "${COMPONENTS[@]}"; do
                if [[ -f "${N_DIR[i]}/$name.pid" ]] && ! pid_of "${N_DIR[i]}" "$name" >/dev/null; then
                    fail "${N_DIR[i]}" "$name" "$name exited while waiting for $what"
                fi
            done
        done
        ((SECONDS < deadline)) || fail "$CLUSTER_DIR" kube-apiserver "timed out after ${timeout}s waiting for $what"
        sleep 0.2
    done
}

# import_images <node dir>: every *_ARCHIVE of images.env into that node's containerd.
import_images() {
    local nd="$1" key archive start=$SECONDS
    for key in $(sed -n 's/^\([A-Z_]*_ARCHIVE\)=.*/\1/p' "$EDDY_CACHE/images/images.env"); do
        archive="$(images_env "$key")"
        [[ -f "$archive" ]] || { echo "$key=$archive: no such file"; return 1; }
        ctr --address "$nd/containerd/containerd.sock" -n k8s.io images import "$archive" ||
            { echo "could not import $archive"; return 1; }
    done
    echo "imported in $((SECONDS - start)) s"
}

cmd_start() {
    (($# == 1)) || die "usage: $0 start <dir>"
    local dir name pause i nd ip pki sans="" node_flags=()
    T0="$(date +%s.%N)"
    [[ "$NODES" =~ ^[1-9][0-9]?$ ]] || die "EDDY_NODES must be a number from 1 to 99: $NODES"
    mkdir -p "$1"
    dir="$(cd "$1" && pwd)"
    [[ "$(ip -o -4 addr show to "$NODE_IP/32")" == *"$NODE_IP"* ]] ||
        die "no interface has $NODE_IP: run inside infra/cluster/netns.sh"
    if ip route get 1.1.1.1 >/dev/null 2>&1; then
        die "this network namespace has a route out; run inside infra/cluster/netns.sh"
    fi
    require_binaries kubelet kube-proxy coredns
    [[ -f "$EDDY_CACHE/images/images.env" ]] || die "$EDDY_CACHE/images/images.env is missing; run: infra/image/image.sh build"
    pause="$(images_env PAUSE_IMAGE)"
    [[ -n "$pause" ]] || die "no PAUSE_IMAGE in $EDDY_CACHE/images/images.env"
    for name in "${COMPONENTS[@]}"; do
        pid_of "$dir" "$name" >/dev/null && die "$name is already running from $dir; stop it first"
    done
    port_is_free "$ETCD_PORT" && port_is_free "$API_PORT" ||
        die "port $ETCD_PORT or $API_PORT is taken: another cluster runs in this network namespace (one at a time)"
    node_zone_of "$NODES" >/dev/null
    write_nodes_file "$dir"
    load_nodes "$dir"
    for ((i = 1; i <= NODES; i++)); do
        for name in "${COMPONENTS[@]}"; do rm -f "${N_DIR[i]}/$name.pid"; done
        rm -f "${N_DIR[i]}/killed"
    done
    CLUSTER_DIR="$dir"
    STOP_ON_FAIL=1

    for ((i = 1; i <= NODES; i++)); do sans+=",IP:${N_IP[i]},DNS:${N_NAME[i]}"; done
    make_pki "$dir/pki" "${sans#,}"
    pki="$dir/pki"
    write_node_kubeconfig "$dir"
    write_cluster_configs "$dir"
    for ((i = 1; i <= NODES; i++)); do
        nd="${N_DIR[i]}" ip="${N_IP[i]}"
        mkdir -p "$nd"
        # Node 1's address is netns.sh's; the others' are added here, /32 so
        # that none of them is a secondary of another.
        if [[ "$(ip -o -4 addr show to "$ip/32")" != *"$ip"* ]]; then
            ip addr add "$ip/32" dev eddy0 || die "could not add the address $ip of node $i to eddy0"
        fi
        make_cgroups "${N_CG[i]}"
        # netns.sh removes them if the command ends without node.sh stop.
        if [[ -d /run/eddy-netns ]]; then echo "${N_CG[i]}" >>/run/eddy-netns/cgroups; fi
        write_node_configs "$i" "$pki" "$pause"
    done

    launch_etcd "$dir" "$ETCD_PORT" "$ETCD_PEER_PORT" --listen-metrics-urls=""
    # The containerds start meanwhile; they need nothing from the control plane.
    for ((i = 1; i <= NODES; i++)); do
        launch "${N_DIR[i]}" containerd /usr/bin/containerd --config "${N_DIR[i]}/containerd/config.toml"
    done
    wait_nodes "etcd on port $ETCD_PORT" "$READY_TIMEOUT" bash -c "exec 3<>/dev/tcp/127.0.0.1/$ETCD_PORT"
    stage "etcd listening"

    # shellcheck disable=SC2086 # extra args are meant to be split
    launch "$dir" kube-apiserver "$BIN/kube-apiserver" \
        --bind-address=0.0.0.0 \
        --advertise-address="$NODE_IP" \
        --secure-port="$API_PORT" \
        --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
        --tls-cert-file="$pki/apiserver.crt" \
        --tls-private-key-file="$pki/apiserver.key" \
        --client-ca-file="$pki/ca.crt" \
        --kubelet-client-certificate="$pki/admin.crt" \
        --kubelet-client-key="$pki/admin.key" \
        --kubelet-preferred-address-types=InternalIP \
        --service-cluster-ip-range="$SERVICE_CIDR" \
        --allow-privileged=true \
        --authorization-mode=Node,RBAC \
        --service-account-issuer="https://kubernetes.default.svc.$CLUSTER_DOMAIN" \
        --service-account-key-file="$pki/sa.pub" \
        --service-account-signing-key-file="$pki/sa.key" \
        --profiling=false \
        ${EDDY_K8S_APISERVER_ARGS:-}

    # The imports (~35 s for the 0.9 GB eddy image into one node, 50-70 s into
    # three at once: docs/testing.md) overlap the rest of the start-up; start
    # waits for them before it reports ready.
    IMPORT_PIDS=()
    for ((i = 1; i <= NODES; i++)); do
        nd="${N_DIR[i]}"
        wait_nodes "containerd's socket of node $i" "$READY_TIMEOUT" \
            ctr --address "$nd/containerd/containerd.sock" version
        import_images "$nd" </dev/null >>"$nd/images.log" 2>&1 &
        IMPORT_PIDS[i]=$!
    done
    stage "containerd serving on $NODES node(s); importing images in the background"

    wait_nodes "the apiserver's /readyz" "$READY_TIMEOUT" kubectl_in "$dir" get --raw /readyz
    stage "apiserver ready"

    if ((NODES == 1)); then
        node_flags=(--allocate-node-cidrs=true --cluster-cidr="$(cluster_cidr)" --node-cidr-mask-size=24)
    else
        # Each node's pod range is its bridge's (set below), not the allocator's pick.
        node_flags=(--allocate-node-cidrs=false --node-monitor-period=2s
            --node-monitor-grace-period="${EDDY_NODE_MONITOR_GRACE:-20}s")
    fi
    launch_controllers "$dir" "${node_flags[@]}" \
        --service-cluster-ip-range="$SERVICE_CIDR" \
        --use-service-account-credentials=true
    for ((i = 1; i <= NODES; i++)); do launch_kubelet "$dir" "$i"; done
    launch "$dir" kube-proxy "$BIN/kube-proxy" --config="$dir/kube-proxy.yaml"
    launch "$dir" coredns "$BIN/coredns" -conf "$dir/Corefile"

    for ((i = 1; i <= NODES; i++)); do
        if ((NODES > 1)); then
            wait_nodes "node ${N_NAME[i]} registered" "$READY_TIMEOUT" kubectl_in "$dir" get "node/${N_NAME[i]}"
            kubectl_in "$dir" patch "node/${N_NAME[i]}" --type=merge \
                -p "{\"spec\":{\"podCIDR\":\"${N_CIDR[i]}\",\"podCIDRs\":[\"${N_CIDR[i]}\"]}}" >/dev/null ||
                fail "${N_DIR[i]}" kubelet "could not set the pod range of node ${N_NAME[i]}"
        fi
        wait_nodes "node ${N_NAME[i]} Ready" "$READY_TIMEOUT" \
            kubectl_in "$dir" wait --for=condition=Ready "node/${N_NAME[i]}" --timeout=1s
        stage "node ${N_NAME[i]} Ready"
    done
    wait_nodes "CoreDNS to answer kubernetes.default.svc.$CLUSTER_DOMAIN" "$READY_TIMEOUT" \
        dns_a "kubernetes.default.svc.$CLUSTER_DOMAIN"
    stage "CoreDNS answers"
    for ((i = 1; i <= NODES; i++)); do
        nd="${N_DIR[i]}"
        wait "${IMPORT_PIDS[i]}" || fail "$nd" images "the image import into node ${N_NAME[i]} failed"
        # Not `ctr ... | grep -q`: grep stops at the match, ctr dies of SIGPIPE and pipefail fails it.
        grep -qxF "$pause" < <(ctr --address "$nd/containerd/containerd.sock" -n k8s.io images ls -q) ||
            fail "$nd" images "the pause image $pause is not in node ${N_NAME[i]}'s containerd after the import"
    done
    IMPORT_PIDS=()
    stage "images imported"
    wait_nodes "the default ServiceAccount (controller-manager)" "$READY_TIMEOUT" \
        kubectl_in "$dir" -n default get serviceaccount default
    create_storage "$dir"

    for ((i = 1; i <= NODES; i++)); do
        for name in "${COMPONENTS[@]}"; do
            [[ -f "${N_DIR[i]}/$name.pid" ]] || continue
            pid_of "${N_DIR[i]}" "$name" >/dev/null || fail "${N_DIR[i]}" "$name" "$name exited during start-up"
        done
    done
    cat >"$dir/cluster.env" <<EOF
NODE_IP=$NODE_IP
NODE_NAME=${N_NAME[1]}
DNS_IP=$NODE_IP
API_URL=https://$NODE_IP:$API_PORT
STORAGE_CLASS=$STORAGE_CLASS
KUBECONFIG=$dir/kubeconfig
CLUSTER_DOMAIN=$CLUSTER_DOMAIN
POD_CIDR=$(cluster_cidr)
SERVICE_CIDR=$SERVICE_CIDR
PVS=$PVS
NODES=$NODES
EOF
    stage "storage created"
    echo "$NODES node(s) ready in $(elapsed) s: KUBECONFIG=$dir/kubeconfig (apiserver https://$NODE_IP:$API_PORT, DNS $NODE_IP, StorageClass $STORAGE_CLASS, $PVS PVs per node); see $dir/cluster.env and $dir/nodes"
}

# launch_kubelet <cluster dir> <i>: node i's kubelet (its start, and restart-node's).
launch_kubelet() {
    local dir="$1" i="$2" nd="${N_DIR[$2]}"
    launch "$nd" kubelet "$BIN/kubelet" \
        --config="$nd/kubelet/config.yaml" \
        --kubeconfig="$dir/kubeconfig" \
        --root-dir="$nd/kubelet" \
        --cert-dir="$nd/kubelet/pki" \
        --hostname-override="${N_NAME[i]}" \
        --node-ip="${N_IP[i]}" \
        --node-labels="topology.kubernetes.io/zone=${N_ZONE[i]}"
}

# ----------------------------------------------------------------- stop ----

# stop_pids <pid...>: SIGTERM, then SIGKILL after STOP_TIMEOUT.
stop_pids() {
    local pid deadline
    (($#)) || return 0
    kill -TERM "$@" 2>/dev/null || true
    deadline=$((SECONDS + STOP_TIMEOUT))
    for pid in "$@"; do
        while alive "$pid" && ((SECONDS < deadline)); do sleep 0.1; done
        if alive "$pid"; then
            log "PID $pid did not exit after SIGTERM; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
        fi
    done
}

# stop_components <dir>... -- <names...>: those components of each directory, all at once.
stop_components() {
    local dirs=() d name pid pids=()
    while [[ "$1" != -- ]]; do dirs+=("$1"); shift; done
    shift
    for d in "${dirs[@]}"; do
        for name in "$@"; do
            if pid="$(pid_of "$d" "$name")"; then pids+=("$pid"); fi
            rm -f "$d/$name.pid"
        done
    done
    stop_pids "${pids[@]}"
}

# container_pids <cgroup root> <containerd socket>: the processes under the
# node's cgroup root (every hierarchy), and the shims of that containerd.
container_pids() {
    local cg="$1" sock="$2" p h
    for h in /sys/fs/cgroup/*/"$cg"; do
        [[ -d "$h" ]] && find "$h" -name cgroup.procs -exec cat {} + 2>/dev/null
    done
    for p in /proc/[0-9]*; do
        [[ "$(readlink "$p/exe" 2>/dev/null)" == */containerd-shim-runc-v2 ]] || continue
        tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -qF -- "-address $sock " && echo "${p#/proc/}"
    done
    return 0
}

# descendants <pid...>: the live descendants of those processes.
descendants() {
    local p stat rest ppid changed=1
    local -A parent=() found=()
    for p in "$@"; do found[$p]=1; done
    for p in /proc/[0-9]*; do
        p="${p#/proc/}"
        { read -r stat <"/proc/$p/stat"; } 2>/dev/null || continue
        rest="${stat##*) }"
        [[ "${rest:0:1}" == Z ]] && continue
        rest="${rest#* }"
        parent[$p]="${rest%% *}"
    done
    while ((changed)); do
        changed=0
        for p in "${!parent[@]}"; do
            [[ -n "${found[$p]:-}" ]] && continue
            if [[ -n "${found[${parent[$p]}]:-}" ]]; then found[$p]=1; changed=1; echo "$p"; fi
        done
    done
}

# node_pids <i>: every live process of node i: its kubelet and containerd,
# its shims and its containers, and all their descendants (CNI plugins,
# mount helpers, a runc not yet in the container's cgroup).
node_pids() {
    local i="$1" nd="${N_DIR[$1]}" pids=() pid name
    for name in kubelet containerd; do
        if pid="$(pid_of "$nd" "$name")"; then pids+=("$pid"); fi
    done
    mapfile -t -O "${#pids[@]}" pids < <(container_pids "${N_CG[i]}" "$nd/containerd/containerd.sock" |
        { grep -x '[0-9][0-9]*' || true; })
    ((${#pids[@]})) || return 0
    { printf '%s\n' "${pids[@]}"; descendants "${pids[@]}"; } | while read -r pid; do
        if alive "$pid"; then echo "$pid"; fi
    done | sort -un
}

cmd_kill_node() {
    (($# == 2)) || die "usage: $0 kill-node <dir> <node name or index>"
    local dir i pids round killed=0
    [[ -d "$1" ]] || die "no cluster in $1"
    dir="$(cd "$1" && pwd)"
    load_nodes "$dir"
    i="$(node_index "$2")" || die "no node $2 in $dir/nodes"
    # Its pod network goes first, as when a machine dies: no FIN or RST from its dying
    # processes reaches anyone, and connections to its pods' addresses now time out
    # (dropped) instead of being refused by the kernel of their still-mounted network
    # namespaces. Spark's driver, for one, then learns of its executors' deaths only
    # from the API server (the pods' deletion) or its heartbeat timeout.
    ip link set "${N_BRIDGE[i]}" down 2>/dev/null || true
    ip route replace blackhole "${N_CIDR[i]}"
    # Several rounds: a process may fork between listing and killing.
    for ((round = 0; round < 20; round++)); do
        pids="$(node_pids "$i" | xargs)"
        [[ -z "$pids" ]] && break
        # shellcheck disable=SC2086
        kill -KILL $pids 2>/dev/null || true
        killed=$((killed + $(wc -w <<<"$pids")))
        sleep 0.2
    done
    pids="$(node_pids "$i" | xargs)"
    [[ -z "$pids" ]] || die "node ${N_NAME[i]}: still alive after SIGKILL: $pids"
    date +%s.%N >"${N_DIR[i]}/killed"
    echo "node ${N_NAME[i]} killed: $killed process(es) SIGKILLed; its pod range ${N_CIDR[i]} is a blackhole"
}

# restart-node: a killed node comes back, as a machine that rebooted: its pod
# network is reachable again, its containerd and kubelet start on their state
# directories, and the kubelet registers, finds its pods' containers dead and
# cleans them up (the pods the control plane still binds to it are started
# again; those deleted meanwhile are not).
cmd_restart_node() {
    (($# == 2)) || die "usage: $0 restart-node <dir> <node name or index>"
    local dir i nd name deadline
    [[ -d "$1" ]] || die "no cluster in $1"
    dir="$(cd "$1" && pwd)"
    load_nodes "$dir"
    i="$(node_index "$2")" || die "no node $2 in $dir/nodes"
    nd="${N_DIR[i]}"
    [[ -f "$nd/killed" ]] || die "node ${N_NAME[i]} was not killed (kill-node) or is back already"
    [[ -z "$(node_pids "$i")" ]] || die "node ${N_NAME[i]} still has processes: $(node_pids "$i" | xargs)"
    T0="$(date +%s.%N)"
    ip route del blackhole "${N_CIDR[i]}" 2>/dev/null || true
    ip link set "${N_BRIDGE[i]}" up 2>/dev/null || true
    for name in containerd kubelet; do
        [[ -f "$nd/$name.log" ]] && mv -f "$nd/$name.log" "$nd/$name.log.killed"
    done
    launch "$nd" containerd /usr/bin/containerd --config "$nd/containerd/config.toml"
    deadline=$((SECONDS + READY_TIMEOUT))
    until ctr --address "$nd/containerd/containerd.sock" version >/dev/null 2>&1; do
        pid_of "$nd" containerd >/dev/null || fail "$nd" containerd "containerd of ${N_NAME[i]} exited on restart"
        ((SECONDS < deadline)) || fail "$nd" containerd "containerd of ${N_NAME[i]} not serving after ${READY_TIMEOUT}s"
        sleep 0.2
    done
    launch_kubelet "$dir" "$i"
    until kubectl_in "$dir" wait --for=condition=Ready "node/${N_NAME[i]}" --timeout=1s >/dev/null 2>&1; do
        pid_of "$nd" kubelet >/dev/null || fail "$nd" kubelet "the kubelet of ${N_NAME[i]} exited on restart"
        ((SECONDS < deadline)) || fail "$nd" kubelet "node ${N_NAME[i]} not Ready after ${READY_TIMEOUT}s"
        sleep 0.5
    done
    rm -f "$nd/killed"
    echo "node ${N_NAME[i]} restarted and Ready in $(elapsed) s"
}

cmd_stop() {
    (($# == 1)) || die "usage: $0 stop <dir>"
    # During a failed start, fail passes the failing node's directory.
    local dir="${CLUSTER_DIR:-$1}" pids mnt h i cg nds=() pid rms=()
    [[ -d "$dir" ]] || return 0
    T0="$(date +%s.%N)"
    dir="$(cd "$dir" && pwd)"
    load_nodes "$dir"
    for ((i = 1; i <= NODES; i++)); do nds+=("${N_DIR[i]}"); done
    # A start that failed: its image imports (subshells and their ctr), by PID.
    for pid in "${IMPORT_PIDS[@]}"; do
        if alive "$pid"; then
            # shellcheck disable=SC2046
            kill $(ps -o pid= --ppid "$pid") "$pid" 2>/dev/null || true
        fi
    done
    stop_components "$dir" -- coredns kube-proxy kube-controller-manager kube-scheduler
    stop_components "${nds[@]}" -- kubelet
    # The pods: their processes by PID (SIGKILL: kubelet is gone, nobody
    # waits for a graceful end), then the shims, then containerd.
    pids=""
    for ((i = 1; i <= NODES; i++)); do
        pids+=" $(container_pids "${N_CG[i]}" "${N_DIR[i]}/containerd/containerd.sock" | sort -u | xargs)"
    done
    # shellcheck disable=SC2086
    [[ -z "${pids// /}" ]] || kill -KILL $pids 2>/dev/null || true
    stop_components "${nds[@]}" -- containerd
    sleep 0.2
    pids=""
    for ((i = 1; i <= NODES; i++)); do
        pids+=" $(container_pids "${N_CG[i]}" "${N_DIR[i]}/containerd/containerd.sock" | sort -u | xargs)"
    done
    # shellcheck disable=SC2086
    [[ -z "${pids// /}" ]] || { kill -KILL $pids 2>/dev/null || true; sleep 0.5; }
    stage "pods, nodes and containerd stopped"
    stop_components "$dir" -- kube-apiserver
    stop_components "$dir" -- etcd
    stage "apiserver and etcd stopped"
    # What containerd and kubelet mounted under <dir> (rootfs overlays, shm,
    # pod network namespaces, secret tmpfs), deepest first.
    while read -r mnt; do
        umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || log "could not unmount $mnt"
    done < <(awk -v d="$dir/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r)
    # The nodes' cgroups, deepest first (only empty ones can go).
    for ((i = 1; i <= NODES; i++)); do
        cg="${N_CG[i]}"
        for h in /sys/fs/cgroup/*/"$cg"; do
            [[ -d "$h" ]] && find "$h" -depth -type d -exec rmdir {} + 2>/dev/null
            [[ -d "$h" ]] && log "could not remove cgroup $h"
        done
    done
    # The nodes' image stores (the imported images, unpacked: ~2.4 GB a node),
    # which the next start imports afresh; never across a mount left behind.
    # All nodes at once (~9 s a node alone).
    rms=()
    for ((i = 1; i <= NODES; i++)); do
        if ! awk -v d="${N_DIR[i]}/containerd/" 'index($5, d) == 1 { f = 1 } END { exit !f }' /proc/self/mountinfo; then
            rm -rf --one-file-system "${N_DIR[i]}/containerd/root" "${N_DIR[i]}/containerd/state" &
            rms+=($!)
        fi
    done
    for pid in "${rms[@]}"; do wait "$pid" || log "could not remove all of an image store"; done
    stage "unmounted; image stores removed"
    # The network the nodes added to the namespace: bridges, blackhole routes
    # (kill-node), the addresses of nodes 2.. (node 1's is netns.sh's). Not
    # for a directory whose start never wrote its nodes file: the bridges
    # then are another cluster's, if anyone's.
    [[ -f "$dir/nodes" ]] || return 0
    for ((i = 1; i <= NODES; i++)); do
        ip link del "${N_BRIDGE[i]}" 2>/dev/null || true
        ip route del blackhole "${N_CIDR[i]}" 2>/dev/null || true
        if ((i > 1)); then ip addr del "${N_IP[i]}/32" dev eddy0 2>/dev/null || true; fi
    done
    return 0
}

# ----------------------------------------------------------------- main ----

node_main() {
    local cmd="${1:-}"
    (($#)) && shift
    case "$cmd" in
        build) cmd_build "$@" ;;
        start) cmd_start "$@" ;;
        stop) cmd_stop "$@" ;;
        kill-node) cmd_kill_node "$@" ;;
        restart-node) cmd_restart_node "$@" ;;
        dns) (($# == 1)) || die "usage: $0 dns <name>"; dns_a "$1" ;;
        *) die "usage: $0 build | start <dir> | kill-node <dir> <node> | restart-node <dir> <node> | stop <dir> | dns <name>" ;;
    esac
}

# One line, parsed whole before it runs: a bash reading this file while it is
# rewritten (a checkout, an edit) stops here rather than read on.
node_main "$@"; exit
