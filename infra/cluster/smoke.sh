#!/usr/bin/env bash
# By-hand check of the one-node cluster; run inside the namespace:
#
#   infra/cluster/netns.sh infra/cluster/smoke.sh [dir]
#
# Starts the node in <dir> (default: a new /tmp/eddy-smoke.XXXXXX, removed
# afterwards when the check passes) and checks: no route out; CoreDNS answers
# kubernetes.default.svc.cluster.local from the namespace; a pod of the
# Eddy image (else the pause image) runs, resolves and reaches the apiserver
# through kubernetes.default.svc with its token; `kubectl logs` and
# `kubectl exec` work; a ClusterIP Service answers from the namespace and
# by name from a pod; a claim on eddy-local binds when pod A uses it, and
# pod B with the same claim reads the file pod A wrote (both as uid 185 with
# fsGroup 185). Then stops everything and checks that the namespace is as it
# was before the start: nothing mounted under <dir>, no process of the nodes,
# no cgroup of theirs, the same links, addresses and routes.
#
# EDDY_NODES=3 infra/cluster/netns.sh infra/cluster/smoke.sh runs the same
# checks on three nodes (pods land where the scheduler puts them).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
EDDY_CACHE="${EDDY_CACHE:-$REPO/.cache}"
NODE="$HERE/node.sh"
KUBECTL="$EDDY_CACHE/k8s/bin/kubectl"

[[ "${EDDY_NETNS:-}" == 1 ]] || { echo "run me as: $HERE/netns.sh $0" >&2; exit 2; }

if (($#)); then DIR="$1"; KEEP=1; else DIR="$(mktemp -d /tmp/eddy-smoke.XXXXXX)"; KEEP=0; fi
T0=$SECONDS
ok() { echo "smoke: ok   [$((SECONDS - T0))s] $*"; }
bad() { echo "smoke: FAIL $*" >&2; exit 1; }
k() { "$KUBECTL" --kubeconfig "$DIR/kubeconfig" --request-timeout=20s "$@"; }

# The namespace's network, to compare before the start and after the stop.
net_state() {
    ip -o link | awk '{ print "link", $2 }'
    ip -o addr | awk '{ print "addr", $2, $4 }'
    ip route | sed 's/^/route /'
}
NET_BEFORE="$(net_state)"

# leftovers: what node.sh stop should have removed, one line each.
leftovers() {
    local p cg h
    awk -v d="$DIR/" 'index($5, d) == 1 { print "mount", $5 }' /proc/self/mountinfo
    for p in /proc/[0-9]*; do
        [[ "${p#/proc/}" == "$$" || "${p#/proc/}" == "$BASHPID" ]] && continue
        tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -qF "$DIR/" && echo "process ${p#/proc/}: $(tr '\0' ' ' <"$p/cmdline" | cut -c1-100)"
    done
    if [[ -f "$DIR/nodes" ]]; then
        for cg in $(awk '{ print $8 }' "$DIR/nodes"); do
            for h in /sys/fs/cgroup/*/"$cg"; do [[ -d "$h" ]] && echo "cgroup $h"; done
        done
    fi
    diff <(echo "$NET_BEFORE") <(net_state) | sed -n 's/^[<>] /network changed: &/p'
    return 0
}

finish() {
    local rc=$? left
    if ((rc)); then
        echo "smoke: pods, events and log tails follow" >&2
        k get pods,pvc,pv -o wide >&2 || true
        k get events --sort-by=.lastTimestamp 2>/dev/null | tail -20 >&2 || true
    fi
    "$NODE" stop "$DIR" || rc=1
    left="$(leftovers)"
    if [[ -n "$left" ]]; then
        echo "smoke: FAIL node.sh stop left these behind:" >&2
        echo "$left" >&2
        rc=1
    else
        echo "smoke: ok   node.sh stop left the namespace as it found it (mounts, processes, cgroups, network)"
    fi
    if ((rc == 0 && !KEEP)); then rm -rf "$DIR"; fi
    ((rc == 0)) && echo "smoke: PASSED in $((SECONDS - T0)) s" || echo "smoke: FAILED (logs in $DIR)" >&2
    exit "$rc"
}
trap finish EXIT

if ip route get 1.1.1.1 >/dev/null 2>&1; then bad "the namespace has a route out"; fi
ok "no route out: $(ip route get 1.1.1.1 2>&1 | head -1)"

"$NODE" start "$DIR"
ok "node started"
# shellcheck disable=SC1091
source "$DIR/cluster.env"

answer="$("$NODE" dns kubernetes.default.svc.cluster.local)"
[[ "$answer" == 10.0.0.1 ]] || bad "CoreDNS answered '$answer' for kubernetes.default.svc.cluster.local"
ok "CoreDNS at $DNS_IP: kubernetes.default.svc.cluster.local -> $answer"

IMAGE="$(sed -n 's/^EDDY_IMAGE=//p' "$EDDY_CACHE/images/images.env")"
if [[ -z "$IMAGE" ]]; then
    # The pause image only sleeps: run it and check it is Running.
    IMAGE="$(sed -n 's/^PAUSE_IMAGE=//p' "$EDDY_CACHE/images/images.env")"
    k run smoke-pause --image="$IMAGE" --image-pull-policy=Never --restart=Never >/dev/null
    k wait --for=condition=Ready pod/smoke-pause --timeout=60s >/dev/null || bad "the pause pod is not Ready"
    ok "a pod of $IMAGE runs (no EDDY_IMAGE: pod checks skipped)"
    exit 0
fi

# --- a pod: DNS, apiserver via kubernetes.default.svc, logs, exec ----------
k apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: smoke-web
  labels: {app: smoke-web}
spec:
  securityContext: {runAsUser: 185, runAsGroup: 185, fsGroup: 185}
  containers:
  - name: web
    image: $IMAGE
    imagePullPolicy: Never
    command: [python3, -m, http.server, "8080", --bind, "0.0.0.0"]
    ports: [{containerPort: 8080}]
    readinessProbe:
      tcpSocket: {port: 8080}
      periodSeconds: 1
---
apiVersion: v1
kind: Service
metadata:
  name: smoke-web
spec:
  selector: {app: smoke-web}
  ports: [{port: 80, targetPort: 8080}]
EOF
k wait --for=condition=Ready pod/smoke-web --timeout=90s >/dev/null || bad "pod smoke-web is not Ready"
ok "pod smoke-web of $IMAGE Ready ($(k get pod smoke-web -o jsonpath='{.status.podIP}'))"

cluster_ip="$(k get svc smoke-web -o jsonpath='{.spec.clusterIP}')"
# kube-proxy programs the Service a moment after the pod is Ready.
for ((try = 0; ; try++)); do
    status="$(python3 -c "import urllib.request; print(urllib.request.urlopen('http://$cluster_ip/', timeout=10).status)" 2>&1)" && break
    ((try < 50)) || bad "ClusterIP $cluster_ip unreachable from the namespace: $status"
    sleep 0.2
done
[[ "$status" == 200 ]] || bad "ClusterIP $cluster_ip answered $status"
answer="$("$NODE" dns smoke-web.default.svc.cluster.local)"
[[ "$answer" == "$cluster_ip" ]] || bad "CoreDNS answered '$answer' for smoke-web.default.svc.cluster.local"
ok "Service smoke-web: ClusterIP $cluster_ip (DNS agrees) answers $status from the namespace"

out="$(k exec smoke-web -- python3 -c '
import json, os, socket, ssl, urllib.request
sa = "/var/run/secrets/kubernetes.io/serviceaccount"
ip = socket.gethostbyname("kubernetes.default.svc.cluster.local")
ctx = ssl.create_default_context(cafile=sa + "/ca.crt")
req = urllib.request.Request("https://kubernetes.default.svc/version",
    headers={"Authorization": "Bearer " + open(sa + "/token").read()})
v = json.load(urllib.request.urlopen(req, context=ctx, timeout=10))["gitVersion"]
web = urllib.request.urlopen("http://smoke-web.default.svc/", timeout=10).status
print(os.getuid(), ip, v, web)
')" || bad "kubectl exec in smoke-web failed: $out"
read -r uid ip version web <<<"$out"
[[ "$uid" == 185 && "$ip" == 10.0.0.1 && "$version" == v1.* && "$web" == 200 ]] || bad "in-pod checks: $out"
ok "kubectl exec: uid $uid; kubernetes.default.svc.cluster.local -> $ip; apiserver $version over https://kubernetes.default.svc with the pod's token; http://smoke-web.default.svc -> $web"

grep -q 'GET / ' < <(k logs smoke-web) || bad "kubectl logs smoke-web shows no request"
ok "kubectl logs: $(k logs smoke-web | tail -1)"

# --- a claim on eddy-local shared by two pods in turn ----------------------
claim_pod() { # claim_pod <name> <shell command>
    cat <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $1
spec:
  restartPolicy: Never
  securityContext: {runAsUser: 185, runAsGroup: 185, fsGroup: 185}
  containers:
  - name: main
    image: $IMAGE
    imagePullPolicy: Never
    command: [sh, -c, "$2"]
    volumeMounts: [{name: data, mountPath: /data}]
  volumes:
  - name: data
    persistentVolumeClaim: {claimName: smoke-data}
EOF
}
k apply -f - >/dev/null <<EOF
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: smoke-data
spec:
  accessModes: [ReadWriteOncePod]
  storageClassName: $STORAGE_CLASS
  resources: {requests: {storage: 1Gi}}
EOF
phase="$(k get pvc smoke-data -o jsonpath='{.status.phase}')"
[[ "$phase" == Pending ]] || bad "claim smoke-data is $phase before any pod uses it (WaitForFirstConsumer)"
claim_pod smoke-writer 'echo written-by-A-$(id -u) > /data/hello && ls -ln /data' | k apply -f - >/dev/null
k wait --for=jsonpath='{.status.phase}'=Succeeded pod/smoke-writer --timeout=90s >/dev/null || bad "pod smoke-writer did not succeed"
k wait --for=jsonpath='{.status.phase}'=Bound pvc/smoke-data --timeout=30s >/dev/null || bad "claim smoke-data not Bound"
pv="$(k get pvc smoke-data -o jsonpath='{.spec.volumeName}')"
ok "claim smoke-data Bound to $pv once pod A used it; pod A: $(k logs smoke-writer | tail -1)"
# ReadWriteOncePod: one pod at a time.
k delete pod smoke-writer --wait=true >/dev/null
claim_pod smoke-reader 'cat /data/hello' | k apply -f - >/dev/null
k wait --for=jsonpath='{.status.phase}'=Succeeded pod/smoke-reader --timeout=90s >/dev/null || bad "pod smoke-reader did not succeed"
got="$(k logs smoke-reader)"
[[ "$got" == written-by-A-185 ]] || bad "pod B read '$got'"
ok "pod B read '$got' from the claim; on the node: $(k get pv "$pv" -o jsonpath='{.spec.local.path}')"

if ip route get 1.1.1.1 >/dev/null 2>&1; then bad "the namespace has a route out now"; fi
ok "still no route out with the node running ($(ip route | wc -l) routes: $(ip route | awk '{print $1}' | xargs))"
