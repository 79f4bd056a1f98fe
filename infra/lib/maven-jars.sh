# Sourced by infra/kafka/kafka.sh and infra/spark/connector.sh: gather the run-time jars a pom
# names into a cache folder, once per pom.
#
#   maven_jars <pom> <cache dir> <what> [<glob that must match>]
#
# The jars land in <cache dir>/jars, stamped with the pom's hash in <cache dir>/jars.stamp.
# Concurrent callers: one gathers, the rest wait (a lock in <cache dir>, held until the caller
# exits). A failed or interrupted fetch never leaves a half-filled jars folder behind a valid
# stamp: jars are gathered into a fresh folder and swapped in.

maven_jars() {
  local pom="$1" cache="$2" what="$3" expect="${4:-}"
  local jars="${cache}/jars" stamp="${cache}/jars.stamp" want tmp
  mkdir -p "${cache}"
  exec 9>"${cache}/fetch.lock"
  flock 9
  want="$(sha256sum "${pom}" | cut -d' ' -f1)"
  if [[ -f "${stamp}" && "$(cat "${stamp}")" == "${want}" && -d "${jars}" ]]; then
    return 0
  fi
  tmp="${cache}/jars.tmp"
  rm -rf "${tmp}"
  # Maven checks the SHA-1 of every artifact it downloads (-C: a mismatch fails); mvn -q still
  # prints colour codes, so its output is shown only on failure.
  if ! mvn -q -B -C -f "${pom}" dependency:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="${tmp}" >"${cache}/fetch.log" 2>&1; then
    cat "${cache}/fetch.log" >&2
    echo "fetching ${what} failed (see above)" >&2
    return 1
  fi
  if [[ -n "${expect}" ]] && ! compgen -G "${tmp}/${expect}" >/dev/null; then
    echo "fetching ${what}: no ${expect} in ${tmp}" >&2
    return 1
  fi
  rm -rf "${jars}"
  mv "${tmp}" "${jars}"
  echo "${want}" >"${stamp}"
}
