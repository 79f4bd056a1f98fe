#!/usr/bin/env bash
# Eddy's container images, built on this machine without Docker and without any container
# registry: buildah builds the repository's Dockerfile (the one `docker build .` uses) on a
# Debian base made with debootstrap from the machine's own apt mirror, and each image is
# exported as an OCI archive that `ctr -n k8s.io images import` takes.
#
#   image.sh build    build what changed (each image is cached by the hash of its inputs) and
#                     write $EDDY_CACHE/images/images.env:
#                       EDDY_IMAGE           eddy:<chart appVersion> (containerd name:
#                                            docker.io/library/eddy:<version>, what the kubelet
#                                            looks up for `image: eddy:<version>`)
#                       EDDY_IMAGE_ARCHIVE   absolute path of its OCI archive
#                       PAUSE_IMAGE          eddy.local/pause:1 (for containerd's sandbox_image)
#                       PAUSE_IMAGE_ARCHIVE  absolute path of its OCI archive
#                       EDDY_IMAGE_ID        id of that image in buildah's store (other clones
#                                            may retag eddy:<version> there)
#                       PAUSE_IMAGE_ID       id of the pause image in buildah's store
#                       BASE_IMAGE           the debootstrap base the Dockerfile was built on
#   image.sh env      print images.env (fails if `build` has not written it)
#
# The three images:
#   base   debootstrap --variant=minbase of Debian bookworm with python3, python3-venv,
#          python-is-python3 and ca-certificates, from the mirror in /etc/apt/sources.list*;
#          its sources.list names that mirror so the Dockerfile's apt-get works, and it trusts
#          the machine's local CAs (/usr/local/share/ca-certificates) so pip and apt work
#          behind the same TLS-inspecting egress the host sits behind. Key: this recipe, the
#          mirror and those CAs. ~2 min cold.
#   pause  a static C pause process (pause.c) in an image FROM scratch. Key: pause.c.
#   eddy   `buildah bud --layers` of the Dockerfile with --build-arg PYTHON_IMAGE=<base>.
#          Key: Dockerfile, .dockerignore, every file the context COPYs, the base's id.
# Nothing changed: `build` takes about a second. Images live in buildah's machine-wide store
# (/var/lib/containers/storage), so a fresh clone on the same machine reuses them and their
# layers; the archives and images.env live in $EDDY_CACHE/images.
#
# Environment:
#   EDDY_CACHE   cache folder (default <repo>/.cache, git-ignored)
#
# Needs root, buildah, debootstrap, gcc with a static libc (libc6-dev).
set -euo pipefail

readonly HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
readonly REPO="$(cd "${HERE}/../.." && pwd)"
readonly OUT="${EDDY_CACHE:-${REPO}/.cache}/images"
readonly LOGS="${OUT}/logs"
readonly ENV_FILE="${OUT}/images.env"
readonly SUITE=bookworm
readonly INCLUDE=python3,python3-venv,python-is-python3,ca-certificates
readonly PAUSE_REF=eddy.local/pause:1
readonly PAUSE_ARCHIVE="${OUT}/pause.oci.tar"
readonly EDDY_ARCHIVE="${OUT}/eddy.oci.tar"
# The files the Dockerfile COPYs (keep in step with it and with .dockerignore).
readonly CONTEXT=(pyproject.toml README.md contract operator runtime examples docker)

die() { echo "image.sh: $*" >&2; exit 1; }

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
}

log() { echo "image.sh: $*" >&2; }

# Run a step with its output in $LOGS/<name>.log; on failure, fail with the log's tail.
run_logged() {
  local name=$1; shift
  if ! "$@" >"${LOGS}/${name}.log" 2>&1; then
    echo "image.sh: ${name} failed: $*" >&2
    echo "--- last lines of ${LOGS}/${name}.log ---" >&2
    tail -n 40 "${LOGS}/${name}.log" >&2
    exit 1
  fi
}

sha() { sha256sum | cut -c1-64; }

exists() { buildah inspect --type image "$1" >/dev/null 2>&1; }

image_id() { buildah inspect --type image --format '{{.FromImageID}}' "$1"; }

# "<uri> <suite>" for every enabled deb source of the machine (one-line and deb822 formats).
apt_sources() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    awk '$1 == "deb" { i = 2; if ($2 ~ /^\[/) { while ($i !~ /\]$/) i++; i++ } print $i, $(i + 1) }' "$f"
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    awk 'BEGIN { RS = ""; FS = "\n" }
      { types = ""; uris = ""; suites = ""; enabled = "yes"
        for (i = 1; i <= NF; i++) {
          if ($i ~ /^#/ || !match($i, /^[A-Za-z-]+:/)) continue
          key = tolower(substr($i, 1, RLENGTH - 1)); val = substr($i, RLENGTH + 1)
          gsub(/^[ \t]+|[ \t]+$/, "", val)
          if (key == "types") types = val; else if (key == "uris") uris = val
          else if (key == "suites") suites = val; else if (key == "enabled") enabled = tolower(val)
        }
        if (enabled == "no" || types !~ /(^| )deb( |$)/) next
        n = split(uris, u, " "); m = split(suites, s, " ")
        for (a = 1; a <= n; a++) for (b = 1; b <= m; b++) print u[a], s[b]
      }' "$f"
  done
}

# The first mirror of that suite. awk reads to the end: an early `exit` would kill a later writer
# with SIGPIPE, and pipefail would fail the build at random.
mirror_for() { apt_sources | awk -v s="$1" '$2 == s && !found { print $1; found = 1 }'; }

local_cas() { find /usr/local/share/ca-certificates -name '*.crt' -type f 2>/dev/null | sort; }

# --- base ---------------------------------------------------------------------------------

MIRROR=""
SECURITY=""

# Recipe of the base image; its text (declare -f) is part of the base's cache key.
make_base() {
  local ref=$1 c mnt
  c="$(buildah from --name "eddy-base-$$" scratch)"
  mnt="$(buildah mount "$c")"
  # debootstrap mounts /proc and /sys in the target; leave nothing mounted if it fails.
  trap 'umount -l "'"$mnt"'/proc" "'"$mnt"'/sys" 2>/dev/null; buildah umount "'"$c"'" >/dev/null 2>&1; buildah rm "'"$c"'" >/dev/null 2>&1' EXIT
  run_logged base-debootstrap debootstrap --variant=minbase --include="${INCLUDE}" "${SUITE}" "$mnt" "${MIRROR}"
  {
    echo "deb ${MIRROR} ${SUITE} main"
    echo "deb ${MIRROR} ${SUITE}-updates main"
    if [ -n "${SECURITY}" ]; then echo "deb ${SECURITY} ${SUITE}-security main"; fi
  } >"$mnt/etc/apt/sources.list"
  local ca
  while read -r ca; do
    [ -n "$ca" ] && install -m 644 "$ca" "$mnt/usr/local/share/ca-certificates/"
  done < <(local_cas)
  run_logged base-ca chroot "$mnt" update-ca-certificates
  # The runtime (buildah RUN, the kubelet) provides resolv.conf; the image carries no host's.
  : >"$mnt/etc/resolv.conf"
  echo eddy-base >"$mnt/etc/hostname"
  rm -rf "$mnt"/var/lib/apt/lists/* "$mnt"/var/cache/apt/*.bin "$mnt"/var/cache/apt/archives/*.deb \
    "$mnt"/var/log/*.log "$mnt"/var/log/apt/* "$mnt"/tmp/* "$mnt"/root/.bash_history
  buildah umount "$c" >/dev/null
  buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env LANG=C.UTF-8 --cmd '["python3"]' --label "org.opencontainers.image.title=eddy-base" "$c"
  run_logged base-commit buildah commit --rm "$c" "$ref"
  trap - EXIT
}

base_key() {
  {
    declare -f make_base
    echo "${SUITE} ${INCLUDE} ${MIRROR} ${SECURITY}"
    local ca
    while read -r ca; do [ -n "$ca" ] && sha256sum "$ca"; done < <(local_cas)
  } | sha
}

# --- pause --------------------------------------------------------------------------------

make_pause() {
  local tag=$1 tmp c
  tmp="$(mktemp -d "${OUT}/pause.XXXXXX")"
  run_logged pause-gcc gcc -static -Os -s -Wall -Wextra -Werror -o "${tmp}/pause" "${HERE}/pause.c"
  c="$(buildah from --name "eddy-pause-$$" scratch)"
  run_logged pause-copy buildah copy --chmod 755 "$c" "${tmp}/pause" /pause
  rm -rf "$tmp"
  buildah config --entrypoint '["/pause"]' --cmd '' --user 65535:65535 \
    --label "org.opencontainers.image.title=eddy-pause" "$c"
  run_logged pause-commit buildah commit --rm "$c" "$tag"
  buildah tag "$tag" "${PAUSE_REF}"
}

pause_key() { { declare -f make_pause; cat "${HERE}/pause.c"; } | sha; }

# --- eddy ---------------------------------------------------------------------------------

make_eddy() {
  local tag=$1 base=$2 ref=$3
  run_logged eddy-build buildah bud --layers --pull=never --network host --format oci \
    -f "${REPO}/Dockerfile" --build-arg "PYTHON_IMAGE=${base}" -t "$tag" -t "$ref" "${REPO}"
}

# Every file of the build context, by content and mode (git's view when this is a checkout).
context_files() {
  cd "${REPO}"
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -co --exclude-standard -- "${CONTEXT[@]}"
  else
    find "${CONTEXT[@]}" -type f ! -path '*/__pycache__/*' ! -name '*.pyc' ! -path '*.egg-info/*'
  fi | LC_ALL=C sort -u | while read -r f; do [ -f "$f" ] && echo "$f"; done
}

eddy_key() {
  local base_id=$1
  (
    cd "${REPO}"
    declare -f make_eddy
    echo "base ${base_id}"
    sha256sum Dockerfile .dockerignore
    context_files | while read -r f; do
      printf '%s %s\n' "$(stat -c %a "$f")" "$(sha256sum "$f")"
    done
  ) | sha
}

# Each source change leaves an image of ~0.7 GB of its own; keep the newest few (other clones on
# this machine may be on an older commit), drop the rest. Layers other images use stay.
readonly KEEP_EDDY_IMAGES=3
prune_eddy() {
  local name
  buildah images --format '{{.CreatedAtRaw}}|{{.Name}}:{{.Tag}}' 2>/dev/null \
    | grep -F '|eddy.local/eddy:src-' | LC_ALL=C sort -r | tail -n +$((KEEP_EDDY_IMAGES + 1)) | cut -d'|' -f2 \
    | while read -r name; do
      buildah rmi "$name" >/dev/null 2>&1 && log "eddy: removed old ${name}" || true
    done
}

# --- export -------------------------------------------------------------------------------

# The OCI archive of an image, named <ref> inside (ctr import keeps that name); a stamp beside it
# holds the id of the image it was written from.
export_archive() {
  local name=$1 image=$2 ref=$3 archive=$4 id
  id="$(image_id "$image")"
  if [ -f "$archive" ] && [ "$(cat "${archive}.id" 2>/dev/null)" = "$id" ]; then
    return 0
  fi
  rm -f "$archive" "${archive}.id" "${archive}.tmp"
  run_logged "${name}-export" buildah push --quiet "$image" "oci-archive:${archive}.tmp:${ref}"
  mv "${archive}.tmp" "$archive"
  echo "$id" >"${archive}.id"
  log "${name}: wrote ${archive} ($(du -m "$archive" | cut -f1) MB)"
}

# --- build --------------------------------------------------------------------------------

timed() {
  local what=$1 start=$SECONDS; shift
  "$@"
  log "${what}: $((SECONDS - start)) s"
}

build() {
  command -v buildah >/dev/null || die "buildah not found (apt-get install buildah)"
  command -v debootstrap >/dev/null || die "debootstrap not found (apt-get install debootstrap)"
  [ "$(id -u)" = 0 ] || die "needs root (buildah's machine-wide store, debootstrap)"
  mkdir -p "${LOGS}"
  exec 9>"${OUT}/.lock"
  flock 9

  local version
  version="$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' "${REPO}/charts/eddy-operator/Chart.yaml")"
  [ -n "$version" ] || die "no appVersion in charts/eddy-operator/Chart.yaml"
  local eddy_short="eddy:${version}" eddy_ref="docker.io/library/eddy:${version}"

  MIRROR="$(mirror_for "${SUITE}")"
  SECURITY="$(mirror_for "${SUITE}-security")"
  [ -n "${MIRROR}" ] || die "no '${SUITE}' deb source in /etc/apt/sources.list*"

  local base_ref="eddy.local/base:$(base_key | cut -c1-16)"
  if exists "$base_ref"; then
    log "base: cached ${base_ref}"
  else
    log "base: debootstrap ${SUITE} into ${base_ref} (~2 min)"
    timed base make_base "$base_ref"
  fi

  local pause_tag="eddy.local/pause:src-$(pause_key | cut -c1-16)"
  if exists "$pause_tag"; then
    log "pause: cached ${pause_tag}"
    [ "$(image_id "$pause_tag")" = "$(image_id "${PAUSE_REF}" 2>/dev/null)" ] || buildah tag "$pause_tag" "${PAUSE_REF}"
  else
    timed pause make_pause "$pause_tag"
  fi

  local eddy_tag="eddy.local/eddy:src-$(eddy_key "$(image_id "$base_ref")" | cut -c1-16)"
  if exists "$eddy_tag"; then
    log "eddy: cached ${eddy_tag}"
    [ "$(image_id "$eddy_tag")" = "$(image_id "$eddy_ref" 2>/dev/null)" ] || buildah tag "$eddy_tag" "$eddy_ref"
  else
    log "eddy: buildah bud of the Dockerfile on ${base_ref} (log: ${LOGS}/eddy-build.log)"
    timed eddy make_eddy "$eddy_tag" "$base_ref" "$eddy_ref"
    prune_eddy
  fi

  timed export-pause export_archive pause "$pause_tag" "${PAUSE_REF}" "${PAUSE_ARCHIVE}"
  timed export-eddy export_archive eddy "$eddy_tag" "$eddy_ref" "${EDDY_ARCHIVE}"

  cat >"${ENV_FILE}.tmp" <<EOF
EDDY_IMAGE=${eddy_short}
EDDY_IMAGE_ARCHIVE=${EDDY_ARCHIVE}
PAUSE_IMAGE=${PAUSE_REF}
PAUSE_IMAGE_ARCHIVE=${PAUSE_ARCHIVE}
EDDY_IMAGE_ID=$(image_id "$eddy_tag")
PAUSE_IMAGE_ID=$(image_id "$pause_tag")
BASE_IMAGE=${base_ref}
EOF
  mv "${ENV_FILE}.tmp" "${ENV_FILE}"
  cat "${ENV_FILE}"
}

case "${1:-}" in
  build) build ;;
  env) [ -f "${ENV_FILE}" ] || die "no ${ENV_FILE}: run infra/image/image.sh build"; cat "${ENV_FILE}" ;;
  *) usage ;;
esac
