#!/usr/bin/env bash
# The Debian packages the real-pod cluster and the image build need: the container runtime,
# CNI plugins, netfilter tools, buildah and debootstrap, and a static libc for the pause image.
# Installs only what is missing (apt-get update first, as root); a machine that has them all
# returns at once. dpkg is told to start no service on the host while it installs (a temporary
# /usr/sbin/policy-rc.d, removed afterwards): containerd runs only inside the test namespace.
set -euo pipefail

PACKAGES=(containerd runc containernetworking-plugins iptables conntrack socat
          buildah fuse-overlayfs debootstrap gcc libc6-dev)

# One run at a time (`make test` may start two: apt takes one lock and fails the other); the one
# that waited finds the packages installed.
cache="${EDDY_CACHE:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/.cache}"
mkdir -p "$cache"
exec 9>"$cache/.packages.lock"
flock 9

missing=()
for pkg in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
((${#missing[@]})) || exit 0

[[ $EUID -eq 0 ]] || { echo "packages.sh: installing ${missing[*]} needs root" >&2; exit 1; }
echo "packages.sh: installing ${missing[*]}" >&2
policy=/usr/sbin/policy-rc.d
made_policy=0
if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    made_policy=1
fi
cleanup() { if ((made_policy)); then rm -f "$policy"; fi; }
trap cleanup EXIT
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
