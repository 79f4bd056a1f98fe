#!/usr/bin/env bash
# A real one-node Kubernetes cluster (kubelet + containerd + runc, CNI
# bridge, kube-proxy, CoreDNS, static local PersistentVolumes), run inside the
# network namespace that netns.sh makes: pod and Service addresses never
# leave it.
#
#   node.sh build          build CoreDNS (infra/coredns/go.mod) into
#                          $EDDY_CACHE/k8s/bin (skipped when up to date); the
#                          Kubernetes binaries come from ../k8s/k8s.sh build
#   node.sh start <dir>    start everything (run inside netns.sh), wait until
#                          the node is Ready and CoreDNS answers, create the
#                          StorageClass and the PersistentVolumes
#   node.sh stop <dir>     stop pods, node and control plane (etcd last),
#                          unmount what they mounted under <dir> and remove
#                          the node's cgroups; logs are kept
#   node.sh dns <name>     the A records CoreDNS ($EDDY_NODE_IP:53) serves for
#                          <name>, one per line (fails without an answer)
#
#   infra/cluster/netns.sh sh -c 'infra/cluster/node.sh start /tmp/n && ... ;
#                                 infra/cluster/node.sh stop /tmp/n'
#
# Layout of <dir>:
#   kubeconfig        admin kubeconfig, server https://$EDDY_NODE_IP:$EDDY_NODE_API_PORT
#   cluster.env       NODE_IP, NODE_NAME, DNS_IP, API_URL, STORAGE_CLASS,
#                     KUBECONFIG, CLUSTER_DOMAIN, POD_CIDR, SERVICE_CIDR, PVS
#   images.log        the image import
#   <name>.log/.pid   per component: etcd kube-apiserver kube-controller-manager
#                     kube-scheduler containerd kubelet kube-proxy coredns
#   pki/              CA, apiserver cert (SANs: 127.0.0.1, node IP, 10.0.0.1,
#                     kubernetes.default.svc...), admin client cert
#   containerd/       config.toml, root, state, containerd.sock
#   cni/              the bridge conflist; cni-ipam/ host-local's leases
#   kubelet/          kubelet root dir and config; pod-logs/ container logs
#   volumes/pv-NN     backing directories of the local PersistentVolumes
#
# Storage: StorageClass "eddy-local" (kubernetes.io/no-provisioner,
# WaitForFirstConsumer, the default class) and EDDY_NODE_PVS (12) static
# `local` PersistentVolumes eddy-pv-NN of EDDY_NODE_PV_SIZE (2Gi), ReadWriteOncePod
# (what Spark 4 asks for its on-demand claims: one pod at a time writes a store),
# reclaim policy Retain, with node affinity to the node, on <dir>/volumes/pv-NN
# (owner 185:185, mode 2775: pods run as uid 185 with fsGroup 185). A claim
# binds when its first pod is scheduled; a deleted claim leaves its volume
# Released (Retain), so each run of a cluster has EDDY_NODE_PVS bindings.
#
# Addresses: node $EDDY_NODE_IP (10.200.0.1; netns.sh puts it on eddy0),
# pods 10.244.0.0/24 (bridge cni0, gateway 10.244.0.1), Services 10.0.0.0/24
# (kubernetes = 10.0.0.1, endpoint the node IP), cluster DNS = CoreDNS as a
# process on $EDDY_NODE_IP:53 (zones cluster.local, in-addr.arpa, ip6.arpa;
# nothing forwarded: there is no upstream). Ports in the namespace: etcd
# 127.0.0.1:2379/2380, apiserver 0.0.0.0:6443, kubelet 10250 (healthz
# 127.0.0.1:10248), kube-proxy 127.0.0.1:10249/10256, CoreDNS ready 127.0.0.1:8181.
#
# Images: every *_ARCHIVE in $EDDY_CACHE/images/images.env (written by
# infra/image/image.sh build) is imported into containerd's k8s.io namespace;
# PAUSE_IMAGE is the sandbox image. Pods must use imagePullPolicy Never or
# IfNotPresent (there is no registry).
#
# Environment: EDDY_CACHE (<repo>/.cache), EDDY_NODE_IP (10.200.0.1),
# EDDY_NODE_API_PORT (6443), EDDY_NODE_NAME (eddy-node), EDDY_NODE_PVS (12),
# EDDY_NODE_PV_SIZE (2Gi), EDDY_K8S_READY_TIMEOUT (s, 90),
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
PVS="${EDDY_NODE_PVS:-12}"
PV_SIZE="${EDDY_NODE_PV_SIZE:-2Gi}"
POD_CIDR=10.244.0.0/24
SERVICE_CIDR=10.0.0.0/24
CLUSTER_DOMAIN=cluster.local
STORAGE_CLASS=eddy-local
ZONE=zone-a
POD_UID=185

# Started in this order; wait_until watches them all.
IMPORT_PID=
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler containerd kubelet kube-proxy coredns)

log() { echo "node.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

# ---------------------------------------------------------------- build ----

cmd_build() {
    command -v go >/dev/null || die "go is not on PATH"
    mkdir -p "$BIN"
    exec 9>"$BIN/.build.lock"
    flock 9
    local version stamp start=$SECONDS
    version="$(module_version "$COREDNS_MODULE_DIR" github.com/coredns/coredns)"
    stamp="github.com/coredns/coredns@$version $(module_stamp "$COREDNS_MODULE_DIR")"
    if ! stamp_matches coredns "$stamp"; then
        log "building coredns ($version)"
        (cd "$COREDNS_MODULE_DIR" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" \
            -o "$BIN/coredns" github.com/coredns/coredns)
        write_stamp coredns "$stamp"
        log "built coredns in $((SECONDS - start)) s"
    fi
    echo "  coredns                  $("$BIN/coredns" -version | head -1)"
}

# ---------------------------------------------------------------- start ----

# images_env <key>: a value from images.env (empty when absent).
images_env() {
    sed -n "s/^$1=//p" "$EDDY_CACHE/images/images.env" | tail -1
}

# cgroup_name <dir>: the node's cgroup root, one per <dir>, so that two nodes
# on one host never clean up each other's pod cgroups.
cgroup_name() {
    echo "eddy-node-$(echo "$1" | sha256sum | cut -c1-10)"
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

write_configs() {
    local dir="$1" pki="$1/pki" cg="$2" pause="$3"
    mkdir -p "$dir/containerd" "$dir/cni" "$dir/cni-ipam" "$dir/kubelet" "$dir/pod-logs"

    cat >"$dir/containerd/config.toml" <<EOF
version = 2
root = "$dir/containerd/root"
state = "$dir/containerd/state"
oom_score = 0

[grpc]
  address = "$dir/containerd/containerd.sock"

[ttrpc]
  address = "$dir/containerd/containerd.sock.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "$dir/containerd/opt"

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
    conf_dir = "$dir/cni"
    max_conf_num = 1
EOF

    # containerd brings up each pod's loopback itself (with /usr/lib/cni/loopback).
    cat >"$dir/cni/10-eddy.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "eddy",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "$POD_CIDR"}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": "$dir/cni-ipam"
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF

    echo "nameserver $NODE_IP" >"$dir/resolv.conf"

    cat >"$dir/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 0.0.0.0
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: "$pki/ca.crt"}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: "unix://$dir/containerd/containerd.sock"
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
resolvConf: "$dir/resolv.conf"
podLogsDir: "$dir/pod-logs"
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
syncFrequency: 10s
shutdownGracePeriod: 0s
EOF

    cat >"$dir/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: "$dir/kubeconfig"
hostnameOverride: "$NODE_NAME"
mode: iptables
clusterCIDR: "$POD_CIDR"
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
    local dir="$1" i name
    mkdir -p "$dir/volumes"
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
        for ((i = 0; i < PVS; i++)); do
            name="$(printf 'pv-%02d' "$i")"
            mkdir -p "$dir/volumes/$name"
            chown "$POD_UID:$POD_UID" "$dir/volumes/$name"
            chmod 2775 "$dir/volumes/$name"
            cat <<EOF
---
apiVersion: v1
kind: PersistentVolume
metadata:
  name: eddy-$name
  labels:
    eddy.local/volume: "true"
spec:
  capacity:
    storage: $PV_SIZE
  accessModes: [ReadWriteOncePod]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: $STORAGE_CLASS
  volumeMode: Filesystem
  local:
    path: $dir/volumes/$name
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions:
        - key: kubernetes.io/hostname
          operator: In
          values: [$NODE_NAME]
EOF
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

cmd_start() {
    (($# == 1)) || die "usage: $0 start <dir>"
    local dir name cg pause archive key etcd_port=2379 peer_port=2380
    T0="$(date +%s.%N)"
    mkdir -p "$1"
    dir="$(cd "$1" && pwd)"
    [[ "$(ip -o -4 addr show to "$NODE_IP/32")" == *"$NODE_IP"* ]] ||
        die "no interface has $NODE_IP: run inside infra/cluster/netns.sh"
    if ip route get 1.1.1.1 >/dev/null 2>&1; then
        die "this network namespace has a route out; run inside infra/cluster/netns.sh"
    fi
    require_binaries coredns
    [[ -f "$EDDY_CACHE/images/images.env" ]] || die "$EDDY_CACHE/images/images.env is missing; run: infra/image/image.sh build"
    pause="$(images_env PAUSE_IMAGE)"
    [[ -n "$pause" ]] || die "no PAUSE_IMAGE in $EDDY_CACHE/images/images.env"
    for name in "${COMPONENTS[@]}"; do
        pid_of "$dir" "$name" >/dev/null && die "$name is already running from $dir; stop it first"
    done
    for name in "${COMPONENTS[@]}"; do rm -f "$dir/$name.pid"; done
    STOP_ON_FAIL=1

    make_pki "$dir/pki" "IP:$NODE_IP,DNS:$NODE_NAME"
    write_node_kubeconfig "$dir"
    cg="$(cgroup_name "$dir")"
    make_cgroups "$cg"
    # netns.sh removes them if the command ends without node.sh stop.
    if [[ -d /run/eddy-netns ]]; then echo "$cg" >>/run/eddy-netns/cgroups; fi
    write_configs "$dir" "$cg" "$pause"
    local pki="$dir/pki"

    launch_etcd "$dir" "$etcd_port" "$peer_port" --listen-metrics-urls=""
    # containerd starts meanwhile; it needs nothing from the control plane.
    launch "$dir" containerd /usr/bin/containerd --config "$dir/containerd/config.toml"
    wait_until "$dir" "etcd on port $etcd_port" "$READY_TIMEOUT" bash -c "exec 3<>/dev/tcp/127.0.0.1/$etcd_port"
    stage "etcd listening"

    # shellcheck disable=SC2086 # extra args are meant to be split
    launch "$dir" kube-apiserver "$BIN/kube-apiserver" \
        --bind-address=0.0.0.0 \
        --advertise-address="$NODE_IP" \
        --secure-port="$API_PORT" \
        --etcd-servers="http://127.0.0.1:$etcd_port" \
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

    wait_until "$dir" "containerd's socket" "$READY_TIMEOUT" \
        ctr --address "$dir/containerd/containerd.sock" version
    stage "containerd serving; importing images in the background"
    # The import (~30 s for a 0.5 GB image) overlaps the rest of the start-up;
    # start waits for it before it reports the node ready.
    (
        for key in $(sed -n 's/^\([A-Z_]*_ARCHIVE\)=.*/\1/p' "$EDDY_CACHE/images/images.env"); do
            archive="$(images_env "$key")"
            [[ -f "$archive" ]] || { echo "$key=$archive: no such file"; exit 1; }
            ctr --address "$dir/containerd/containerd.sock" -n k8s.io images import "$archive" ||
                { echo "could not import $archive"; exit 1; }
        done
    ) </dev/null >>"$dir/images.log" 2>&1 &
    IMPORT_PID=$!

    wait_until "$dir" "the apiserver's /readyz" "$READY_TIMEOUT" kubectl_in "$dir" get --raw /readyz
    stage "apiserver ready"

    launch_controllers "$dir" \
        --allocate-node-cidrs=true \
        --cluster-cidr="$POD_CIDR" \
        --node-cidr-mask-size=24 \
        --service-cluster-ip-range="$SERVICE_CIDR" \
        --use-service-account-credentials=true
    launch "$dir" kubelet "$BIN/kubelet" \
        --config="$dir/kubelet/config.yaml" \
        --kubeconfig="$dir/kubeconfig" \
        --root-dir="$dir/kubelet" \
        --cert-dir="$dir/kubelet/pki" \
        --hostname-override="$NODE_NAME" \
        --node-ip="$NODE_IP" \
        --node-labels="topology.kubernetes.io/zone=$ZONE"
    launch "$dir" kube-proxy "$BIN/kube-proxy" --config="$dir/kube-proxy.yaml"
    launch "$dir" coredns "$BIN/coredns" -conf "$dir/Corefile"

    wait_until "$dir" "node $NODE_NAME Ready" "$READY_TIMEOUT" \
        kubectl_in "$dir" wait --for=condition=Ready "node/$NODE_NAME" --timeout=1s
    stage "node $NODE_NAME Ready"
    wait_until "$dir" "CoreDNS to answer kubernetes.default.svc.$CLUSTER_DOMAIN" "$READY_TIMEOUT" \
        dns_a "kubernetes.default.svc.$CLUSTER_DOMAIN"
    stage "CoreDNS answers"
    wait "$IMPORT_PID" || fail "$dir" images "the image import failed"
    # Not `ctr ... | grep -q`: grep stops at the match, ctr dies of SIGPIPE and pipefail fails it.
    grep -qxF "$pause" < <(ctr --address "$dir/containerd/containerd.sock" -n k8s.io images ls -q) ||
        fail "$dir" images "the pause image $pause is not in containerd after the import"
    stage "images imported"
    wait_until "$dir" "the default ServiceAccount (controller-manager)" "$READY_TIMEOUT" \
        kubectl_in "$dir" -n default get serviceaccount default
    create_storage "$dir"

    for name in "${COMPONENTS[@]}"; do
        pid_of "$dir" "$name" >/dev/null || fail "$dir" "$name" "$name exited during start-up"
    done
    cat >"$dir/cluster.env" <<EOF
NODE_IP=$NODE_IP
NODE_NAME=$NODE_NAME
DNS_IP=$NODE_IP
API_URL=https://$NODE_IP:$API_PORT
STORAGE_CLASS=$STORAGE_CLASS
KUBECONFIG=$dir/kubeconfig
CLUSTER_DOMAIN=$CLUSTER_DOMAIN
POD_CIDR=$POD_CIDR
SERVICE_CIDR=$SERVICE_CIDR
PVS=$PVS
EOF
    stage "storage created"
    echo "node ready in $(elapsed) s: KUBECONFIG=$dir/kubeconfig (apiserver https://$NODE_IP:$API_PORT, DNS $NODE_IP, StorageClass $STORAGE_CLASS, $PVS PVs); see $dir/cluster.env"
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

# stop_components <dir> <names...>
stop_components() {
    local dir="$1" name pid pids=()
    shift
    for name in "$@"; do
        if pid="$(pid_of "$dir" "$name")"; then pids+=("$pid"); fi
        rm -f "$dir/$name.pid"
    done
    stop_pids "${pids[@]}"
}

# The PIDs of the containers under the node's cgroup root, and of the shims
# of this containerd.
container_pids() {
    local cg="$1" sock="$2" p
    [[ -d /sys/fs/cgroup/pids/$cg ]] &&
        find "/sys/fs/cgroup/pids/$cg" -name cgroup.procs -exec cat {} + 2>/dev/null
    for p in /proc/[0-9]*; do
        [[ "$(readlink "$p/exe" 2>/dev/null)" == */containerd-shim-runc-v2 ]] || continue
        tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -qF -- "-address $sock " && echo "${p#/proc/}"
    done
    return 0
}

cmd_stop() {
    (($# == 1)) || die "usage: $0 stop <dir>"
    local dir="$1" cg pids mnt h
    [[ -d "$dir" ]] || return 0
    dir="$(cd "$dir" && pwd)"
    cg="$(cgroup_name "$dir")"
    # A start that failed: its image import (a subshell and its ctr), by PID.
    if [[ -n "${IMPORT_PID:-}" ]] && alive "$IMPORT_PID"; then
        # shellcheck disable=SC2046
        kill $(ps -o pid= --ppid "$IMPORT_PID") "$IMPORT_PID" 2>/dev/null || true
    fi
    stop_components "$dir" coredns kube-proxy kubelet kube-controller-manager kube-scheduler
    # The pods: their processes by PID (SIGKILL: kubelet is gone, nobody
    # waits for a graceful end), then the shims, then containerd.
    # shellcheck disable=SC2046
    pids="$(container_pids "$cg" "$dir/containerd/containerd.sock" | sort -u | xargs)"
    # shellcheck disable=SC2086
    [[ -z "$pids" ]] || kill -KILL $pids 2>/dev/null || true
    stop_components "$dir" containerd
    sleep 0.2
    pids="$(container_pids "$cg" "$dir/containerd/containerd.sock" | sort -u | xargs)"
    # shellcheck disable=SC2086
    [[ -z "$pids" ]] || { kill -KILL $pids 2>/dev/null || true; sleep 0.5; }
    stop_components "$dir" kube-apiserver
    stop_components "$dir" etcd
    # What containerd and kubelet mounted under <dir> (rootfs overlays, shm,
    # pod network namespaces, secret tmpfs), deepest first.
    while read -r mnt; do
        umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || log "could not unmount $mnt"
    done < <(awk -v d="$dir/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r)
    # The node's cgroups, deepest first (only empty ones can go).
    for h in /sys/fs/cgroup/*/"$cg"; do
        [[ -d "$h" ]] && find "$h" -depth -type d -exec rmdir {} + 2>/dev/null
        [[ -d "$h" ]] && log "could not remove cgroup $h"
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
        dns) (($# == 1)) || die "usage: $0 dns <name>"; dns_a "$1" ;;
        *) die "usage: $0 build | start <dir> | stop <dir> | dns <name>" ;;
    esac
}

node_main "$@"
