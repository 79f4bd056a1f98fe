#!/usr/bin/env bash
# A real, one-node Apache Kafka 4.x broker (KRaft, combined broker+controller)
# for Eddy's integration and end-to-end tests, run straight from the jars that
# infra/kafka/pom.xml names.
#
#   kafka.sh fetch                   gather the broker's jars into $EDDY_CACHE/kafka/jars
#                                    and train a class-data-sharing archive for fast starts
#   kafka.sh start <data-dir> <port> format storage and start a broker on $KAFKA_HOST:<port>
#                                    (controller on <port>+1); returns once it serves requests
#   kafka.sh stop <data-dir>         stop the broker started in <data-dir>
#
#   kafka.sh cluster-start <dir> <nodes> <port>
#                                    a cluster of <nodes> combined broker+controller nodes (the
#                                    controller quorum is all of them) in <dir>/node-<i>, node i on
#                                    <port>+2(i-1) (controller one above); returns once every node
#                                    serves requests; prints the bootstrap list
#   kafka.sh cluster-node-start <dir> <i>
#                                    start node i of that cluster again (after `stop <dir>/node-<i>`)
#   kafka.sh cluster-stop <dir>      stop every node of the cluster
#
# Environment:
#   EDDY_CACHE   cache folder (default <repo>/.cache, git-ignored)
#   KAFKA_HEAP   heap options for the broker JVM (default -Xmx1g; -Xmx384m per cluster node)
#   KAFKA_OPTS   extra options for the broker JVM (default none)
#   KAFKA_HOST   address the broker listens on and advertises (default 127.0.0.1;
#                the real-pod tests use the node address inside their network namespace)
#   JAVA         java executable (default: java on PATH)
#   KAFKA_SECURE=1  also listen with SASL_SSL (SCRAM-SHA-512) on <port>+2: a CA and a
#                server certificate for $KAFKA_HOST are made under <data-dir>/tls/
#                (ca.crt is what clients trust), and the SCRAM user is created when
#                the storage is formatted. The PLAINTEXT and controller listeners stay
#                as they are; brokers talk to each other over PLAINTEXT.
#   KAFKA_SCRAM_USER, KAFKA_SCRAM_PASSWORD  that user (default eddy / a random password,
#                written to <data-dir>/tls/scram.password)
#
# <data-dir> ends up holding server.properties, the log dirs (logs/), kafka.pid
# and kafka.log (JVM stdout/stderr and the log4j output). Starting again in the
# same <data-dir> keeps its topics.
set -euo pipefail

readonly HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
readonly REPO="$(cd "${HERE}/../.." && pwd)"
readonly CACHE="${EDDY_CACHE:-${REPO}/.cache}/kafka"
readonly JARS="${CACHE}/jars"
readonly STAMP="${CACHE}/jars.stamp"
readonly POM="${HERE}/pom.xml"
# shellcheck source=../lib/maven-jars.sh
source "${HERE}/../lib/maven-jars.sh"
readonly LOG4J_CONFIG="${HERE}/log4j2.properties"
readonly JAVA="${JAVA:-java}"
readonly HOST="${KAFKA_HOST:-127.0.0.1}"
readonly START_TIMEOUT_S="${KAFKA_START_TIMEOUT_S:-60}"
readonly STOP_TIMEOUT_S=20

die() { echo "kafka.sh: $*" >&2; exit 1; }

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
}

pom_hash() { sha256sum "${POM}" | cut -d' ' -f1; }

# Explicit, sorted classpath: the class-data-sharing archive is only accepted
# by a JVM whose classpath is the one it was dumped with.
classpath() {
  local jars=("${JARS}"/*.jar)
  local IFS=:
  echo "${jars[*]}"
}

# The class-data-sharing (AppCDS) archive holds the broker's classes already
# parsed and verified; it halves the CPU a broker start costs. It is only valid
# for these jars and this JVM, hence both in its name.
cds_archive() {
  local jvm
  jvm="$("${JAVA}" -version 2>&1 | sha256sum | cut -c1-12)"
  echo "${CACHE}/broker-$(pom_hash | cut -c1-12)-${jvm}.jsa"
}

cds_opts() {
  local archive
  archive="$(cds_archive)"
  [[ -f "${archive}" ]] && echo "-XX:SharedArchiveFile=${archive}"
  return 0
}

# --- fetch -------------------------------------------------------------------

cmd_fetch() {
  # Parallel test workers may all call fetch: one gathers, the rest wait.
  maven_jars "${POM}" "${CACHE}" "the broker's jars" || die "no broker jars"
  [[ -f "$(cds_archive)" ]] || train_cds_archive
}

free_port_pair() {
  local port
  for _ in $(seq 50); do
    port=$((20000 + RANDOM % 20000))
    if ! port_open "${port}" && ! port_open $((port + 1)); then
      echo "${port}"
      return 0
    fi
  done
  die "found no two free ports for the training broker"
}

# Starts and stops a throw-away broker whose JVM writes the archive at exit.
# A failure here only costs speed, so it warns instead of failing fetch.
train_cds_archive() {
  local archive dir port
  archive="$(cds_archive)"
  dir="$(mktemp -d "${CACHE}/train.XXXXXX")"
  port="$(free_port_pair)"
  rm -f "${CACHE}"/broker-*.jsa
  if (launch_broker "${dir}" "${port}" "-XX:ArchiveClassesAtExit=${dir}/broker.jsa" >/dev/null) &&
      cmd_stop "${dir}" >/dev/null && [[ -s "${dir}/broker.jsa" ]]; then
    mv "${dir}/broker.jsa" "${archive}"
    rm -rf "${dir}"
  else
    echo "kafka.sh: warning: no class-data-sharing archive; brokers will start more slowly (see ${dir}/kafka.log)" >&2
  fi
}

require_jars() {
  [[ -f "${STAMP}" && -d "${JARS}" ]] || die "no broker jars in ${JARS}; run: $0 fetch"
  [[ "$(cat "${STAMP}")" == "$(pom_hash)" ]] || die "jars in ${JARS} are older than ${POM}; run: $0 fetch"
}

# --- start -------------------------------------------------------------------

# A Kafka Uuid as StorageTool random-uuid prints it: 16 random bytes in
# URL-safe base64 without padding, not starting with '-' and not one of the two
# reserved ids. Made here because each JVM start costs about a second.
random_cluster_id() {
  local id
  while :; do
    id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
    [[ "${id}" != -* && "${id}" != "AAAAAAAAAAAAAAAAAAAAAA" && "${id}" != "AAAAAAAAAAAAAAAAAAAAAQ" ]] && break
  done
  echo "${id}"
}

# A cluster node (cluster-start) sets NODE_ID, VOTERS and REPLICAS; a lone broker leaves them unset.
write_server_properties() {
  local data_dir="$1" port="$2" cport="$3"
  local replicas="${REPLICAS:-1}"
  local internal_min_isr=$((replicas > 1 ? 2 : 1))
  cat >"${data_dir}/server.properties" <<EOF
# Written by infra/kafka/kafka.sh: a combined broker+controller for tests.
process.roles=broker,controller
node.id=${NODE_ID:-1}
controller.quorum.voters=${VOTERS:-1@${HOST}:${cport}}
listeners=PLAINTEXT://${HOST}:${port},CONTROLLER://${HOST}:${cport}
advertised.listeners=PLAINTEXT://${HOST}:${port}
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
log.dirs=${data_dir}/logs

# A replica per node (up to 3); Kafka's own topics survive one lost node of a cluster.
# min.insync.replicas stays 1, so a topic's own setting is what a test sees.
default.replication.factor=${replicas}
min.insync.replicas=1
offsets.topic.replication.factor=${replicas}
transaction.state.log.replication.factor=${replicas}
transaction.state.log.min.isr=${internal_min_isr}
share.coordinator.state.topic.replication.factor=${replicas}
share.coordinator.state.topic.min.isr=${internal_min_isr}
# Few internal partitions: they are created on first use, and fewer is faster.
offsets.topic.num.partitions=4
transaction.state.log.num.partitions=4
share.coordinator.state.topic.num.partitions=4
num.partitions=1

# Eddy creates its topics explicitly; a typo must fail, not make a topic.
auto.create.topics.enable=false
# Consumer groups start at once instead of waiting 3 s for more members.
group.initial.rebalance.delay.ms=0

# Compaction shows up within seconds in tests (topics still need small
# segment.ms / segment.bytes, as only closed segments are cleaned).
log.cleaner.backoff.ms=1000
log.cleaner.threads=1
log.cleaner.dedupe.buffer.size=16777216
EOF
}

scram_user() { echo "${KAFKA_SCRAM_USER:-eddy}"; }

# A CA and a server certificate whose subjectAltName is $HOST, made once per data dir
# (clients keep trusting ca.crt across broker restarts) and again when the host changes.
make_certificates() {
  local tls="$1"
  mkdir -p "${tls}"
  if [[ -f "${tls}/server.pem" && "$(cat "${tls}/host" 2>/dev/null)" == "${HOST}" ]]; then
    return 0
  fi
  local san="IP:${HOST}"
  [[ "${HOST}" =~ ^[0-9.]+$ ]] || san="DNS:${HOST}"
  (
    set -e
    cd "${tls}"
    openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=eddy-test-ca" \
      -keyout ca.key -out ca.crt
    openssl req -newkey rsa:2048 -nodes -subj "/CN=${HOST}" -keyout server.key -out server.csr
    printf 'subjectAltName=%s\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' "${san}" >server.ext
    openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 \
      -extfile server.ext -out server.crt
    # Kafka's PEM keystore: the PKCS#8 key, then the certificate chain.
    openssl pkcs8 -topk8 -nocrypt -in server.key >server.pem
    cat server.crt ca.crt >>server.pem
    chmod 600 ca.key server.key server.pem
  ) >>"${tls}/openssl.log" 2>&1 || die "making certificates in ${tls} failed (see ${tls}/openssl.log)"
  echo "${HOST}" >"${tls}/host"
}

# add_sasl_ssl_listener <data-dir> <port> <cport> <sasl-ssl-port>: the SASL_SSL listener
# (SCRAM-SHA-512 over TLS) beside the PLAINTEXT one, in the server.properties just written.
add_sasl_ssl_listener() {
  local data_dir="$1" port="$2" cport="$3" sport="$4" props="$1/server.properties" tls="$1/tls"
  if [[ -f "${data_dir}/logs/meta.properties" && ! -f "${tls}/scram.password" ]]; then
    die "${data_dir} was formatted without a SCRAM user; start KAFKA_SECURE=1 brokers in a fresh data dir"
  fi
  if port_open "${sport}"; then die "port ${sport} on ${HOST} is already in use"; fi
  make_certificates "${tls}"
  if [[ ! -f "${tls}/scram.password" ]]; then
    (umask 077; echo "${KAFKA_SCRAM_PASSWORD:-$(head -c 18 /dev/urandom | base64 | tr '+/' '-_')}" \
      >"${tls}/scram.password")
  fi
  sed -i \
    -e "s|^listeners=.*|listeners=PLAINTEXT://${HOST}:${port},CONTROLLER://${HOST}:${cport},SASL_SSL://${HOST}:${sport}|" \
    -e "s|^advertised.listeners=.*|advertised.listeners=PLAINTEXT://${HOST}:${port},SASL_SSL://${HOST}:${sport}|" \
    -e "s|^listener.security.protocol.map=.*|&,SASL_SSL:SASL_SSL|" \
    "${props}"
  cat >>"${props}" <<EOF

# KAFKA_SECURE=1: clients may also connect with SASL_SSL + SCRAM-SHA-512 (user $(scram_user)).
sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
ssl.keystore.type=PEM
ssl.keystore.location=${tls}/server.pem
ssl.client.auth=none
EOF
}

# The pid in <data-dir>/kafka.pid if that process is alive and is a broker
# (a stale file may name a pid the system has since given to another process).
broker_pid() {
  local pidfile="$1/kafka.pid" pid
  [[ -f "${pidfile}" ]] || return 1
  pid="$(cat "${pidfile}")"
  [[ -n "${pid}" ]] && kill -0 "${pid}" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/${pid}/cmdline" 2>/dev/null | grep -q ' kafka\.Kafka ' || return 1
  echo "${pid}"
}

port_open() { (exec 3<>"/dev/tcp/${HOST}/$1") 2>/dev/null; }

fail_start() {
  local data_dir="$1" reason="$2"
  rm -f "${data_dir}/kafka.pid"
  echo "kafka.sh: broker in ${data_dir} did not start: ${reason}" >&2
  echo "---- last 50 lines of ${data_dir}/kafka.log ----" >&2
  tail -n 50 "${data_dir}/kafka.log" >&2 || true
  exit 1
}

cmd_start() {
  [[ $# -eq 2 ]] || usage
  mkdir -p "$1"
  require_jars
  local cds
  cds="$(cds_opts)"
  launch_broker "$(cd "$1" && pwd)" "$2" ${cds:+"${cds}"}
}

# launch_broker <abs-data-dir> <port> [extra JVM options...]
launch_broker() {
  local data_dir="$1" port="$2"
  shift 2
  local jvm_extra=("$@")
  [[ "${port}" =~ ^[0-9]+$ ]] || die "port must be a number, got '${port}'"
  local cport=$((port + 1))
  local pid
  if pid="$(broker_pid "${data_dir}")"; then
    die "a broker is already running in ${data_dir} (pid ${pid})"
  fi
  for p in "${port}" "${cport}"; do
    if port_open "${p}"; then die "port ${p} on ${HOST} is already in use"; fi
  done

  write_server_properties "${data_dir}" "${port}" "${cport}"
  local scram=()
  if [[ "${KAFKA_SECURE:-0}" == 1 ]]; then
    add_sasl_ssl_listener "${data_dir}" "${port}" "${cport}" $((port + 2))
    scram=(--add-scram "SCRAM-SHA-512=[name=$(scram_user),password=$(cat "${data_dir}/tls/scram.password")]")
  fi
  local log="${data_dir}/kafka.log" cp
  cp="$(classpath)"
  local log4j=(-Dlog4j2.configurationFile="${LOG4J_CONFIG}" -Deddy.kafka.log="${log}")

  # Format once; a restart in the same data dir keeps its cluster and topics.
  # The tool JVM is short-lived: C1 only and the serial collector start fastest.
  if [[ ! -f "${data_dir}/logs/meta.properties" ]]; then
    # shellcheck disable=SC2046  # cds_opts is zero or one word
    if ! "${JAVA}" -XX:TieredStopAtLevel=1 -XX:+UseSerialGC $(cds_opts) -cp "${cp}" "${log4j[@]}" \
        kafka.tools.StorageTool format -t "${CLUSTER_ID:-$(random_cluster_id)}" \
        -c "${data_dir}/server.properties" --ignore-formatted "${scram[@]}" >>"${log}" 2>&1; then
      fail_start "${data_dir}" "storage format failed"
    fi
  fi

  # Only lines after this mark count for readiness: the log is kept across restarts.
  local mark
  mark="$(wc -l <"${log}")"
  # setsid: the broker outlives this script and is not hit by the caller's
  # Ctrl-C; setsid and nohup exec, so $! is the JVM's own pid. Its temporary files
  # stay in its data dir, not /tmp: lz4-java unpacks its native library into
  # java.io.tmpdir, and a copy may outlive the JVM.
  mkdir -p "${data_dir}/tmp"
  # shellcheck disable=SC2086  # KAFKA_HEAP and KAFKA_OPTS are lists of options
  setsid nohup "${JAVA}" ${KAFKA_HEAP:--Xmx1g} -server \
    -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35 \
    -XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true -Djava.io.tmpdir="${data_dir}/tmp" \
    "${jvm_extra[@]}" ${KAFKA_OPTS:-} "${log4j[@]}" -cp "${cp}" \
    kafka.Kafka "${data_dir}/server.properties" >>"${log}" 2>&1 </dev/null &
  pid=$!
  echo "${pid}" >"${data_dir}/kafka.pid"

  # Ready = this run logged "Kafka Server started" (the broker is unfenced and
  # its listener enabled) and the client port accepts connections.
  local deadline=$((SECONDS + START_TIMEOUT_S)) started=0
  while ((SECONDS < deadline)); do
    kill -0 "${pid}" 2>/dev/null || fail_start "${data_dir}" "process ${pid} exited"
    # grep reads a process substitution, not a pipe: its early exit must not fail the test.
    if ((started == 0)) && grep -q "Kafka Server started" < <(tail -n +"$((mark + 1))" "${log}"); then
      started=1
    fi
    if ((started == 1)) && port_open "${port}"; then
      if [[ "${KAFKA_SECURE:-0}" == 1 ]]; then
        port_open $((port + 2)) || fail_start "${data_dir}" "SASL_SSL port $((port + 2)) not open"
        echo "kafka.sh: SASL_SSL (SCRAM-SHA-512, user $(scram_user)) on ${HOST}:$((port + 2)), CA ${data_dir}/tls/ca.crt"
      fi
      echo "kafka.sh: broker ready on ${HOST}:${port} (pid ${pid}, data ${data_dir})"
      return 0
    fi
    sleep 0.1
  done
  kill -KILL "${pid}" 2>/dev/null || true
  fail_start "${data_dir}" "not ready after ${START_TIMEOUT_S}s (killed pid ${pid})"
}

# --- stop --------------------------------------------------------------------

cmd_stop() {
  [[ $# -eq 1 ]] || usage
  local data_dir="$1" pid
  if ! pid="$(broker_pid "${data_dir}")"; then
    rm -f "${data_dir}/kafka.pid"
    echo "kafka.sh: no broker running in ${data_dir}"
    return 0
  fi
  kill -TERM "${pid}" 2>/dev/null || true
  local deadline=$((SECONDS + STOP_TIMEOUT_S))
  while kill -0 "${pid}" 2>/dev/null && ((SECONDS < deadline)); do
    sleep 0.1
  done
  if kill -0 "${pid}" 2>/dev/null; then
    echo "kafka.sh: broker pid ${pid} still alive after ${STOP_TIMEOUT_S}s, killing" >&2
    kill -KILL "${pid}" 2>/dev/null || true
    while kill -0 "${pid}" 2>/dev/null; do sleep 0.1; done
  fi
  rm -f "${data_dir}/kafka.pid"
  echo "kafka.sh: broker stopped (pid ${pid})"
}

# --- cluster -----------------------------------------------------------------

# <dir>/cluster.env holds what every (re)start of a node needs: size, first port, cluster id.
cluster_env() { echo "$1/cluster.env"; }

# launch_cluster_node <abs-dir> <i>: node i with its cluster's voters, in the background of the caller.
launch_cluster_node() {
  local dir="$1" i="$2" nodes base cluster_id voters="" j cds
  # shellcheck disable=SC1090
  source "$(cluster_env "${dir}")"
  nodes="${NODES}" base="${BASE_PORT}" cluster_id="${CLUSTER}"
  ((i >= 1 && i <= nodes)) || die "node ${i} is not one of 1..${nodes}"
  for ((j = 1; j <= nodes; j++)); do
    voters+="${voters:+,}${j}@${HOST}:$((base + 2 * (j - 1) + 1))"
  done
  mkdir -p "${dir}/node-${i}"
  cds="$(cds_opts)"
  NODE_ID="${i}" VOTERS="${voters}" REPLICAS="$((nodes < 3 ? nodes : 3))" CLUSTER_ID="${cluster_id}" \
    KAFKA_HEAP="${KAFKA_HEAP:--Xms128m -Xmx384m}" \
    launch_broker "${dir}/node-${i}" "$((base + 2 * (i - 1)))" ${cds:+"${cds}"}
}

cmd_cluster_start() {
  [[ $# -eq 3 ]] || usage
  local nodes="$2" base="$3" dir i failed=0
  [[ "${nodes}" =~ ^[1-9][0-9]*$ && "${base}" =~ ^[0-9]+$ ]] || die "nodes and port must be numbers"
  mkdir -p "$1"
  dir="$(cd "$1" && pwd)"
  require_jars
  [[ -f "$(cluster_env "${dir}")" ]] && die "a cluster was already made in ${dir}; use cluster-node-start"
  printf 'NODES=%s\nBASE_PORT=%s\nCLUSTER=%s\n' "${nodes}" "${base}" "$(random_cluster_id)" \
    >"$(cluster_env "${dir}")"
  # All at once: a node's broker is ready only once a majority of the controllers runs.
  local pids=()
  for ((i = 1; i <= nodes; i++)); do
    launch_cluster_node "${dir}" "${i}" &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "${pid}" || failed=1; done
  if ((failed)); then
    cmd_cluster_stop "${dir}" >&2
    die "the cluster in ${dir} did not start (see the messages above)"
  fi
  local bootstrap=""
  for ((i = 1; i <= nodes; i++)); do bootstrap+="${bootstrap:+,}${HOST}:$((base + 2 * (i - 1)))"; done
  echo "${bootstrap}"
}

cmd_cluster_node_start() {
  [[ $# -eq 2 ]] || usage
  [[ -f "$(cluster_env "$1")" ]] || die "no cluster in $1 (run cluster-start first)"
  require_jars
  launch_cluster_node "$(cd "$1" && pwd)" "$2"
}

# All at once: stopped one by one, the last nodes wait for a controller quorum that is gone.
cmd_cluster_stop() {
  [[ $# -eq 1 ]] || usage
  local node pids=()
  for node in "$1"/node-*; do
    [[ -d "${node}" ]] || continue
    cmd_stop "${node}" &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "${pid}" || true; done
}

# --- main --------------------------------------------------------------------

[[ $# -ge 1 ]] || usage
cmd="$1"
shift
case "${cmd}" in
  fetch) [[ $# -eq 0 ]] || usage; cmd_fetch ;;
  start) cmd_start "$@" ;;
  stop) cmd_stop "$@" ;;
  cluster-start) cmd_cluster_start "$@" ;;
  cluster-node-start) cmd_cluster_node_start "$@" ;;
  cluster-stop) cmd_cluster_stop "$@" ;;
  *) usage ;;
esac
