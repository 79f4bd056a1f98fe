#!/usr/bin/env bash
# Real Kubernetes control plane for Eddy's tests, built from Go modules.
#
#   k8s.sh build [part]            build into $EDDY_CACHE/k8s/bin (skips what is up to
#                                  date) the part's binaries, or both parts':
#                                  control-plane: etcd, kube-apiserver, kube-controller-
#                                  manager, kube-scheduler, kubectl, helm, kubeconform, kwok;
#                                  node: kubelet and kube-proxy (infra/cluster/node.sh)
#   k8s.sh start <dir> <port>      certificates, etcd, apiserver on 127.0.0.1:<port>,
#                                  controller-manager and scheduler; writes <dir>/kubeconfig
#                                  and waits until the cluster serves a default namespace
#                                  and ServiceAccount
#   k8s.sh kwok-start <dir> [n]    run kwok and register n (default 2) fake nodes in zones
#                                  zone-a/zone-b whose pods become Running
#   k8s.sh stop <dir>              stop everything started in <dir> (logs are kept)
#
# Each component logs to <dir>/<component>.log and records its PID in
# <dir>/<component>.pid. Versions come from infra/k8s/go.mod and infra/etcd/go.mod
# (binaries) and the *_VERSION variables below (go-installed tools). Go's own
# caches (GOMODCACHE, GOCACHE) are used, so a fresh clone rebuilds quickly.
#
# Environment: EDDY_CACHE (default <repo>/.cache), EDDY_K8S_READY_TIMEOUT (s, 90),
# EDDY_K8S_STOP_TIMEOUT (s before SIGKILL, 10), EDDY_K8S_APISERVER_ARGS (extra
# kube-apiserver flags, e.g. --feature-gates=...).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
EDDY_CACHE="${EDDY_CACHE:-$REPO/.cache}"
BIN="$EDDY_CACHE/k8s/bin"
ETCD_MODULE_DIR="$REPO/infra/etcd"

HELM_VERSION=v3.19.5
KUBECONFORM_VERSION=v0.7.0
KWOK_VERSION=v0.7.0

CONTROL_PLANE_BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
# Only a real node's: most of their packages are the control plane's, compiled already.
NODE_BINARIES=(kubelet kube-proxy)
# Stopped in this order: clients of the apiserver first, etcd last.
COMPONENTS=(kwok kube-scheduler kube-controller-manager kube-apiserver etcd)

# Seconds to wait for the apiserver to become ready, and for a process to exit
# after SIGTERM before it gets SIGKILL.
READY_TIMEOUT="${EDDY_K8S_READY_TIMEOUT:-90}"
STOP_TIMEOUT="${EDDY_K8S_STOP_TIMEOUT:-10}"

log() { echo "k8s.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

# ---------------------------------------------------------------- build ----

# module_version <module dir> <module path>: the version go.mod selects.
module_version() {
    (cd "$1" && go list -m -f '{{.Version}}' "$2")
}

# stamp_matches <binary> <stamp>: binary exists and was built from <stamp>.
stamp_matches() {
    [[ -x "$BIN/$1" && -f "$BIN/.$1.stamp" && "$(cat "$BIN/.$1.stamp")" == "$2" ]]
}

write_stamp() { printf '%s' "$2" >"$BIN/.$1.stamp"; }

# The stamp of a module-built binary: what it was built from and with.
module_stamp() {
    local dir="$1"
    echo "$(go env GOVERSION) $(cat "$dir/go.mod" "$dir/go.sum" | sha256sum | cut -c1-16)"
}

# build_kube <command...>: those of k8s.io/kubernetes/cmd that are not up to date.
build_kube() {
    local version stamp name stale=0 ldflags pkgs=()
    version="$(module_version "$HERE" k8s.io/kubernetes)"
    stamp="k8s.io/kubernetes@$version $(module_stamp "$HERE")"
    for name in "$@"; do
        stamp_matches "$name" "$stamp" || stale=1
        pkgs+=("k8s.io/kubernetes/cmd/$name")
    done
    ((stale)) || return 0

    # What hack/lib/version.sh sets, so that `kubectl version` and /version
    # report the release rather than v0.0.0-master.
    local major="${version#v}" minor
    minor="${major#*.}"; minor="${minor%%.*}"; major="${major%%.*}"
    ldflags="-s -w"
    for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
        ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=$major"
        ldflags+=" -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
    done
    log "building $* ($version)"
    # One invocation, so the commands share compiled packages (later builds find them in
    # Go's build cache).
    (cd "$HERE" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$BIN/" "${pkgs[@]}")
    for name in "$@"; do write_stamp "$name" "$stamp"; done
}

build_etcd() {
    local version stamp
    version="$(module_version "$ETCD_MODULE_DIR" go.etcd.io/etcd/server/v3)"
    stamp="go.etcd.io/etcd/server/v3@$version $(module_stamp "$ETCD_MODULE_DIR")"
    stamp_matches etcd "$stamp" && return 0
    log "building etcd ($version)"
    (cd "$ETCD_MODULE_DIR" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" \
        -o "$BIN/etcd" go.etcd.io/etcd/server/v3)
    write_stamp etcd "$stamp"
}

# go_install <binary> <package@version> [extra ldflags]
go_install() {
    local name="$1" pkg="$2" ldflags="-s -w ${3:-}" stamp
    stamp="$pkg $(go env GOVERSION) $(echo "$ldflags" | sha256sum | cut -c1-8)"
    stamp_matches "$name" "$stamp" && return 0
    log "installing $pkg"
    # Outside any module, so that the tool's own go.mod decides its dependencies.
    (cd / && CGO_ENABLED=0 GOBIN="$BIN" go install -trimpath -ldflags "$ldflags" "$pkg")
    write_stamp "$name" "$stamp"
}

cmd_build() {
    local part="${1:-all}"
    [[ "$part" =~ ^(all|control-plane|node)$ ]] || die "build: no part '$part' (control-plane, node)"
    command -v go >/dev/null || die "go is not on PATH"
    mkdir -p "$BIN"
    # Concurrent callers of a part wait for one build of it (`make test` builds it beside the
    # tests, whose control plane waits here for its part, not for the node's after it).
    if [[ "$part" != node ]]; then
        exec 9>"$BIN/.build-control-plane.lock"
        flock 9
        build_control_plane
        exec 9>&-
    fi
    if [[ "$part" != control-plane ]]; then
        exec 9>"$BIN/.build-node.lock"
        flock 9
        build_kube "${NODE_BINARIES[@]}"
        printf '  %-24s %s\n' kubelet "$("$BIN/kubelet" --version)" kube-proxy "$("$BIN/kube-proxy" --version)"
        exec 9>&-
    fi
}

build_control_plane() {
    build_kube "${CONTROL_PLANE_BINARIES[@]}"
    build_etcd
    # As helm's Makefile does: without the Kubernetes version (that of its
    # client-go, 1.34 for helm 3.19) `helm template` assumes v1.20.
    local helm_k8s="-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1"
    helm_k8s+=" -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=34"
    helm_k8s+=" -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1"
    helm_k8s+=" -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=34"
    go_install helm "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" \
        "-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION $helm_k8s"
    go_install kubeconform "github.com/yannh/kubeconform/cmd/kubeconform@$KUBECONFORM_VERSION" \
        "-X main.version=$KUBECONFORM_VERSION"
    go_install kwok "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"

    echo "binaries in $BIN:"
    printf '  %-24s %s\n' \
        etcd "$("$BIN/etcd" --version | head -1)" \
        kube-apiserver "$("$BIN/kube-apiserver" --version)" \
        kube-controller-manager "$("$BIN/kube-controller-manager" --version)" \
        kube-scheduler "$("$BIN/kube-scheduler" --version)" \
        kubectl "$("$BIN/kubectl" version --client | head -1)" \
        helm "$("$BIN/helm" version --short)" \
        kubeconform "$("$BIN/kubeconform" -v)" \
        kwok "$("$BIN/kwok" --version)"
}

# ---------------------------------------------------------------- start ----

require_binaries() {
    local name
    for name in etcd "${CONTROL_PLANE_BINARIES[@]}" "$@"; do
        [[ -x "$BIN/$name" ]] || die "$BIN/$name is missing; run: $0 build"
    done
}

# port_is_free <port>: nothing accepts connections on 127.0.0.1:<port>.
port_is_free() {
    ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# free_port <taken ports...>: a free port picked at random below the kernel's
# ephemeral range, so that it does not collide with ports that callers got
# from bind(0), nor with the neighbours of another cluster starting meanwhile.
free_port() {
    local port taken=" $* " try
    for ((try = 0; try < 200; try++)); do
        port=$((20000 + RANDOM % 12000))
        if [[ "$taken" != *" $port "* ]] && port_is_free "$port"; then
            echo "$port"
            return 0
        fi
    done
    die "no free port found"
}

# make_pki <pki dir> [extra subjectAltNames, e.g. IP:10.200.0.1]: CA,
# apiserver serving cert, admin client cert and the service-account signing
# key; kept when present so a restart reuses them.
make_pki() {
    local pki="$1" extra="${2:+,$2}"
    [[ -f "$pki/admin.crt" ]] && return 0
    mkdir -p "$pki"
    (
        cd "$pki"
        local days=3650 ec="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1"
        # shellcheck disable=SC2086
        openssl req -x509 -nodes $ec -keyout ca.key -out ca.crt -days $days \
            -subj "/CN=eddy-test-ca" \
            -addext "basicConstraints=critical,CA:TRUE" \
            -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature"
        # shellcheck disable=SC2086
        openssl req -nodes $ec -keyout apiserver.key -out apiserver.csr -subj "/CN=kube-apiserver"
        printf '%s\n' \
            "basicConstraints=CA:FALSE" \
            "keyUsage=critical,digitalSignature,keyEncipherment" \
            "extendedKeyUsage=serverAuth" \
            "subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local$extra" \
            >apiserver.ext
        openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
            -out apiserver.crt -days $days -extfile apiserver.ext
        # shellcheck disable=SC2086
        openssl req -nodes $ec -keyout admin.key -out admin.csr -subj "/O=system:masters/CN=eddy-admin"
        printf '%s\n' \
            "basicConstraints=CA:FALSE" \
            "keyUsage=critical,digitalSignature,keyEncipherment" \
            "extendedKeyUsage=clientAuth" >admin.ext
        openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
            -out admin.crt -days $days -extfile admin.ext
        openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out sa.key
        openssl pkey -in sa.key -pubout -out sa.pub
        rm -f ./*.csr ./*.ext
    ) >/dev/null 2>&1 || die "openssl failed to make certificates in $pki"
}

write_kubeconfig() {
    local dir="$1" port="$2" b64="base64 -w0"
    cat >"$dir/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: eddy
  cluster:
    server: https://127.0.0.1:$port
    certificate-authority-data: $($b64 <"$dir/pki/ca.crt")
users:
- name: eddy-admin
  user:
    client-certificate-data: $($b64 <"$dir/pki/admin.crt")
    client-key-data: $($b64 <"$dir/pki/admin.key")
contexts:
- name: eddy
  context:
    cluster: eddy
    user: eddy-admin
current-context: eddy
EOF
    chmod 600 "$dir/kubeconfig"
}

# launch <dir> <component> <command...>: start in the background, detached
# from our stdio so that a caller reading our output is not held open. Returns
# once the child has exec'd the command: until then it is this shell, and
# pid_of, which checks the binary a PID runs, would take the component for
# dead (a wait loop then fails with "exited" and an empty log).
launch() {
    local dir="$1" name="$2" pid i shell
    shift 2
    "$@" </dev/null >"$dir/$name.log" 2>&1 &
    pid=$!
    echo "$pid" >"$dir/$name.pid"
    shell="$(readlink /proc/$$/exe)"
    for ((i = 0; i < 250; i++)); do
        [[ "$(readlink "/proc/$pid/exe" 2>/dev/null)" == "$shell" ]] || return 0
        sleep 0.02
    done
}

# alive <pid>: the process exists and is not a zombie (once the start script
# has exited, its daemons are reaped by whoever adopted them, maybe late).
alive() {
    local stat
    stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
    stat="${stat##*) }"
    [[ "${stat:0:1}" != Z ]]
}

# pid_of <dir> <component>: the recorded PID if that process still runs.
pid_of() {
    local file="$1/$2.pid" pid exe
    [[ -f "$file" ]] || return 1
    pid="$(cat "$file")"
    [[ "$pid" =~ ^[0-9]+$ ]] && alive "$pid" || return 1
    # Guard against a recycled PID: the process must run our binary (the
    # name may carry " (deleted)" if the binary was rebuilt meanwhile).
    exe="$(readlink "/proc/$pid/exe" 2>/dev/null)" || return 1
    [[ "${exe##*/}" == "$2" || "${exe##*/}" == "$2 (deleted)" ]] || return 1
    echo "$pid"
}

# Whether a failure stops what was started: yes while starting the cluster,
# no for kwok-start (the cluster belongs to whoever started it).
STOP_ON_FAIL=0

# fail <dir> <component> <message>: show the component's log tail and exit.
fail() {
    local dir="$1" name="$2"
    log "error: $3"
    if [[ -f "$dir/$name.log" ]]; then
        log "last lines of $dir/$name.log:"
        tail -n 40 "$dir/$name.log" >&2
    fi
    if ((STOP_ON_FAIL)); then cmd_stop "$dir" >/dev/null 2>&1 || true; fi
    exit 1
}

# wait_until <dir> <what> <timeout> <command...>: poll until the command
# succeeds, failing early (with that log) if a started component died.
wait_until() {
    local dir="$1" what="$2" timeout="$3" deadline name
    shift 3
    deadline=$((SECONDS + timeout))
    until "$@" >/dev/null 2>&1; do
        for name in "${COMPONENTS[@]}"; do
            if [[ -f "$dir/$name.pid" ]] && ! pid_of "$dir" "$name" >/dev/null; then
                fail "$dir" "$name" "$name exited while waiting for $what"
            fi
        done
        ((SECONDS < deadline)) || fail "$dir" kube-apiserver "timed out after ${timeout}s waiting for $what"
        sleep 0.2
    done
}

kubectl_in() {
    local dir="$1"
    shift
    "$BIN/kubectl" --kubeconfig "$dir/kubeconfig" --request-timeout=5s "$@"
}

# launch_etcd <dir> <client port> <peer port> [extra flags...]: etcd on 127.0.0.1, without
# fsync (test data; much faster on a busy disk).
launch_etcd() {
    local dir="$1" port="$2" peer="$3"
    shift 3
    launch "$dir" etcd "$BIN/etcd" \
        --name=default \
        --data-dir="$dir/etcd" \
        --listen-client-urls="http://127.0.0.1:$port" \
        --advertise-client-urls="http://127.0.0.1:$port" \
        --listen-peer-urls="http://127.0.0.1:$peer" \
        --initial-advertise-peer-urls="http://127.0.0.1:$peer" \
        --initial-cluster="default=http://127.0.0.1:$peer" \
        --unsafe-no-fsync \
        "$@"
}

# launch_controllers <dir> [extra controller-manager flags...]: controller-manager and scheduler
# against <dir>/kubeconfig. --secure-port=0: no health/metrics endpoints, so that several clusters
# can run side by side without fighting over the default ports.
launch_controllers() {
    local dir="$1" pki="$1/pki"
    shift
    launch "$dir" kube-controller-manager "$BIN/kube-controller-manager" \
        --kubeconfig="$dir/kubeconfig" \
        --controllers='*' \
        --leader-elect=false \
        --secure-port=0 \
        --service-account-private-key-file="$pki/sa.key" \
        --root-ca-file="$pki/ca.crt" \
        --cluster-signing-cert-file="$pki/ca.crt" \
        --cluster-signing-key-file="$pki/ca.key" \
        --profiling=false \
        "$@"
    launch "$dir" kube-scheduler "$BIN/kube-scheduler" \
        --kubeconfig="$dir/kubeconfig" \
        --leader-elect=false \
        --secure-port=0 \
        --profiling=false
}

cmd_start() {
    (($# == 2)) || die "usage: $0 start <dir> <apiserver-port>"
    local dir port etcd_port peer_port name
    mkdir -p "$1"
    dir="$(cd "$1" && pwd)"
    port="$2"
    [[ "$port" =~ ^[0-9]+$ ]] || die "port must be a number: $port"
    require_binaries
    for name in "${COMPONENTS[@]}"; do
        pid_of "$dir" "$name" >/dev/null && die "$name is already running from $dir; stop it first"
    done
    port_is_free "$port" || die "port $port is in use"
    for name in "${COMPONENTS[@]}"; do rm -f "$dir/$name.pid"; done
    STOP_ON_FAIL=1

    make_pki "$dir/pki"
    write_kubeconfig "$dir" "$port"
    local pki="$dir/pki"
    etcd_port="$(free_port "$port")"
    peer_port="$(free_port "$port" "$etcd_port")"

    launch_etcd "$dir" "$etcd_port" "$peer_port"
    # The apiserver only retries etcd noisily; let etcd listen first.
    wait_until "$dir" "etcd on port $etcd_port" "$READY_TIMEOUT" bash -c "exec 3<>/dev/tcp/127.0.0.1/$etcd_port"

    # No endpoint reconciler: the "kubernetes" Service's endpoints would be
    # 127.0.0.1, which validation rejects every 10 s in the log, and nothing
    # in a cluster without real pods can use them anyway.
    # EDDY_K8S_APISERVER_ARGS: extra flags (e.g. --feature-gates=...), split on spaces.
    # shellcheck disable=SC2086 # extra args are meant to be split
    launch "$dir" kube-apiserver "$BIN/kube-apiserver" \
        --bind-address=127.0.0.1 \
        --advertise-address=127.0.0.1 \
        --endpoint-reconciler-type=none \
        --secure-port="$port" \
        --etcd-servers="http://127.0.0.1:$etcd_port" \
        --tls-cert-file="$pki/apiserver.crt" \
        --tls-private-key-file="$pki/apiserver.key" \
        --client-ca-file="$pki/ca.crt" \
        --service-cluster-ip-range=10.0.0.0/24 \
        --allow-privileged=true \
        --authorization-mode=RBAC \
        --service-account-issuer=https://kubernetes.default.svc.cluster.local \
        --service-account-key-file="$pki/sa.pub" \
        --service-account-signing-key-file="$pki/sa.key" \
        --profiling=false \
        ${EDDY_K8S_APISERVER_ARGS:-}

    wait_until "$dir" "the apiserver's /readyz" "$READY_TIMEOUT" kubectl_in "$dir" get --raw /readyz

    # Its clients start once it serves, so that their logs start clean.
    launch_controllers "$dir"

    wait_until "$dir" "the default namespace" "$READY_TIMEOUT" kubectl_in "$dir" get namespace default
    wait_until "$dir" "the default ServiceAccount (controller-manager)" "$READY_TIMEOUT" \
        kubectl_in "$dir" -n default get serviceaccount default
    echo "cluster ready: KUBECONFIG=$dir/kubeconfig (apiserver https://127.0.0.1:$port, etcd :$etcd_port)"
}

# ----------------------------------------------------------------- kwok ----

cmd_kwok_start() {
    (($# >= 1 && $# <= 2)) || die "usage: $0 kwok-start <dir> [nodes]"
    local dir nodes="${2:-2}" i zone zones=(zone-a zone-b)
    dir="$(cd "$1" && pwd)"
    [[ "$nodes" =~ ^[0-9]+$ ]] || die "nodes must be a number: $nodes"
    require_binaries kwok
    [[ -f "$dir/kubeconfig" ]] || die "no cluster in $dir; run: $0 start $dir <port>"
    pid_of "$dir" kwok >/dev/null && die "kwok is already running from $dir"

    # kwok's built-in stages (node-fast, pod-fast) make nodes Ready and their
    # pods Running; it manages only nodes labelled type=kwok. No server
    # address: kwok then opens no port. Node leases keep the fake nodes Ready: without
    # them the node controller marks both NotReady for ~5 s about every 55 s, and every
    # pod on them not ready, which kwok never undoes.
    launch "$dir" kwok "$BIN/kwok" \
        --kubeconfig="$dir/kubeconfig" \
        --node-lease-duration-seconds=40 \
        --manage-all-nodes=false \
        --manage-nodes-with-label-selector=type=kwok \
        --cidr=10.244.0.0/16 \
        --node-ip=10.243.0.1

    for ((i = 0; i < nodes; i++)); do
        zone="${zones[i % ${#zones[@]}]}"
        kubectl_in "$dir" apply -f - >/dev/null <<EOF || fail "$dir" kwok "could not create node kwok-node-$i"
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-$i
  labels:
    type: kwok
    kubernetes.io/hostname: kwok-node-$i
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    kubernetes.io/role: agent
    node-role.kubernetes.io/agent: ""
    topology.kubernetes.io/zone: $zone
  annotations:
    node.alpha.kubernetes.io/ttl: "0"
    kwok.x-k8s.io/node: fake
status:
  allocatable:
    cpu: "32"
    memory: 256Gi
    pods: "110"
  capacity:
    cpu: "32"
    memory: 256Gi
    pods: "110"
EOF
    done
    if ((nodes > 0)); then
        wait_until "$dir" "$nodes kwok node(s) Ready" "$READY_TIMEOUT" \
            kubectl_in "$dir" wait --for=condition=Ready node -l type=kwok --timeout=1s
    fi
    echo "kwok running with $nodes node(s)"
}

# ----------------------------------------------------------------- stop ----

cmd_stop() {
    (($# == 1)) || die "usage: $0 stop <dir>"
    local dir="$1" name pid deadline group
    [[ -d "$dir" ]] || return 0
    # Everything but etcd at once, then etcd, so the apiserver can shut down cleanly.
    for group in "kwok kube-scheduler kube-controller-manager kube-apiserver" etcd; do
        local pids=()
        for name in $group; do
            if pid="$(pid_of "$dir" "$name")"; then
                kill -TERM "$pid" 2>/dev/null || true
                pids+=("$pid")
            fi
            rm -f "$dir/$name.pid"
        done
        deadline=$((SECONDS + STOP_TIMEOUT))
        for pid in "${pids[@]}"; do
            while alive "$pid" && ((SECONDS < deadline)); do sleep 0.1; done
            if alive "$pid"; then
                log "PID $pid did not exit after SIGTERM; sending SIGKILL"
                kill -KILL "$pid" 2>/dev/null || true
            fi
        done
    done
}

# ----------------------------------------------------------------- main ----

main() {
    local cmd="${1:-}"
    (($#)) && shift
    case "$cmd" in
        build) cmd_build "$@" ;;
        start) cmd_start "$@" ;;
        kwok-start) cmd_kwok_start "$@" ;;
        stop) cmd_stop "$@" ;;
        *) die "usage: $0 build | start <dir> <port> | kwok-start <dir> [nodes] | stop <dir>" ;;
    esac
}

# Sourced (by ../cluster/node.sh) for its functions: no command then.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    main "$@"
fi
