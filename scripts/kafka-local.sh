#!/usr/bin/env bash
# Runs a real single-node Apache Kafka broker (KRaft, combined broker+controller) for local
# development and tests.
#
#   scripts/kafka-local.sh start|stop|status [--port N] [--dir D]
#
#   start   format the dir if needed, start the broker in the background and return once it
#           answers a metadata request (timeout KAFKA_LOCAL_START_TIMEOUT, default 90 s).
#           Returns 0 at once if the broker of this dir is already running.
#   stop    SIGTERM, wait up to KAFKA_LOCAL_STOP_TIMEOUT (default 30 s), then SIGKILL.
#           Returns 0 when not running.
#   status  prints running/stopped with pid and port; exit 0 when running, 3 when stopped.
#   classpath  prints the broker's classpath (for Kafka's own tools: java -cp "$(...)" <class>).
#
#   --port N   PLAINTEXT port on 127.0.0.1. Default: the port recorded in the dir by an earlier
#              start, else 9092.
#   --dir D    data dir (config, logs, pid file, Kafka log dirs). Default <repo>/run/kafka.
#
# The controller listener uses a second port (port+1 when free, else any free port); it is
# recorded in <dir>/ports.env together with the PLAINTEXT port, so a restart of the same dir
# uses the same config and keeps its data (a formatted dir is never reformatted).
#
# Jars: the pinned Kafka release in scripts/kafka/pom.xml (3.7.1), or the release KAFKA_VERSION
# names (3.x or 4.x, e.g. 4.1.1), resolved by Maven into ~/.m2. The computed classpath is cached
# in <repo>/run/.cache/ (keyed by a hash of the pom and the version) so later starts do not run
# Maven at all. Kafka 3.x logs through log4j 1.x (scripts/kafka/log4j.properties), 4.x through
# log4j2 (scripts/kafka/log4j2.properties).
#
# Files in the dir: server.properties, ports.env, kafka.pid, kafka.log (broker output),
# data/ (log.dirs, KRaft metadata log).
#
# A second listener, SASL_SSL with SCRAM-SHA-256, when KAFKA_LOCAL_SASL_SSL_PORT is set, with
# KAFKA_LOCAL_KEYSTORE (a PKCS12 file holding the broker's certificate and key),
# KAFKA_LOCAL_KEYSTORE_PASSWORD and KAFKA_LOCAL_SCRAM ("user:password", added when the dir is
# formatted). The PLAINTEXT listener stays, for tools.
#
# Environment: KAFKA_VERSION, JAVA (default java), KAFKA_LOCAL_JAVA_OPTS (extra JVM options, appended),
# KAFKA_LOCAL_START_TIMEOUT, KAFKA_LOCAL_STOP_TIMEOUT, KAFKA_LOCAL_CACHE_DIR.
set -euo pipefail

SCRIPT_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)"
REPO_ROOT="$(dirname -- "$SCRIPT_DIR")"
# shellcheck source-path=SCRIPTDIR source=lib/freeport.sh
. "$SCRIPT_DIR/lib/freeport.sh"

POM="$SCRIPT_DIR/kafka/pom.xml"
KAFKA_VERSION="${KAFKA_VERSION:-}"    # empty: the pom's pinned release
if [ -n "$KAFKA_VERSION" ] && ! [[ "$KAFKA_VERSION" =~ ^[34]\.[0-9]+\.[0-9]+$ ]]; then
  echo "kafka-local: error: KAFKA_VERSION '$KAFKA_VERSION' is not a 3.x.y or 4.x.y release" >&2
  exit 1
fi
MVN_ARGS=()
[ -z "$KAFKA_VERSION" ] || MVN_ARGS+=("-Dkafka.version=$KAFKA_VERSION")
if [[ "$KAFKA_VERSION" == 4.* ]]; then
  MVN_ARGS+=(-P kafka4)
  LOG4J="$SCRIPT_DIR/kafka/log4j2.properties"
  LOG_OPT="-Dlog4j2.configurationFile=$LOG4J"
else
  LOG4J="$SCRIPT_DIR/kafka/log4j.properties"
  LOG_OPT="-Dlog4j.configuration=file:$LOG4J"
fi
CACHE_DIR="${KAFKA_LOCAL_CACHE_DIR:-$REPO_ROOT/run/.cache}"
JAVA="${JAVA:-java}"
START_TIMEOUT="${KAFKA_LOCAL_START_TIMEOUT:-90}"
STOP_TIMEOUT="${KAFKA_LOCAL_STOP_TIMEOUT:-30}"
DEFAULT_PORT=9092
NODE_ID=1
SPORT="${KAFKA_LOCAL_SASL_SSL_PORT:-}"
if [ -n "$SPORT" ]; then
  for v in KAFKA_LOCAL_KEYSTORE KAFKA_LOCAL_KEYSTORE_PASSWORD KAFKA_LOCAL_SCRAM; do
    [ -n "${!v:-}" ] || { echo "kafka-local: error: KAFKA_LOCAL_SASL_SSL_PORT needs $v" >&2; exit 1; }
  done
fi

me="kafka-local"
DEFAULT_DIR="$REPO_ROOT/run/kafka"
# shellcheck source-path=SCRIPTDIR source=lib/service.sh
. "$SCRIPT_DIR/lib/service.sh"
print_classpath=0
if [ "${1:-}" = classpath ]; then   # not a service verb: the other verbs' options still parse
  print_classpath=1
  shift
  set -- status "$@"
fi
service_parse_args "$@"

if [ -n "$opt_port" ]; then
  valid_port "$opt_port" || die "invalid --port '$opt_port' (want 1-65535)"
  opt_port=$((10#$opt_port))
fi
[ -n "$opt_dir" ] || opt_dir="$DEFAULT_DIR"
DIR="$(realpath -m -- "$opt_dir")"

PORTS_FILE="$DIR/ports.env"
PROPS="$DIR/server.properties"
PIDFILE="$DIR/kafka.pid"
LOGFILE="$DIR/kafka.log"
DATA="$DIR/data"

# ---------------------------------------------------------------- helpers
recorded() {  # recorded KEY -> value from ports.env, empty when absent
  [ -f "$PORTS_FILE" ] || return 0
  sed -n "s/^$1=\([0-9]*\)\$/\1/p" "$PORTS_FILE" | tail -n 1
}

# Is PID our broker (a live kafka.Kafka started with this dir's server.properties)?
is_our_broker() {
  local pid="$1" cmd
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  [ -r "/proc/$pid/cmdline" ] || return 1
  cmd="$(tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null)" || return 1
  grep -qxF 'kafka.Kafka' <<<"$cmd" && grep -qxF "$PROPS" <<<"$cmd"
}

# Prints the broker pid of this dir when it runs (pid file first, then a process scan in
# case the pid file was lost).
find_pid() {
  local pid
  if [ -f "$PIDFILE" ]; then
    pid="$(tr -dc '0-9' <"$PIDFILE")"
    if is_our_broker "$pid"; then echo "$pid"; return 0; fi
  fi
  for pid in $(pgrep -f 'kafka\.Kafka' 2>/dev/null || true); do
    if is_our_broker "$pid"; then echo "$pid"; return 0; fi
  done
  return 1
}

tail_log() {
  if [ -f "$LOGFILE" ]; then
    echo "---- last lines of $LOGFILE ----" >&2
    tail -n "${1:-40}" "$LOGFILE" >&2
    echo "----" >&2
  fi
}

# The Kafka release of classpath $1: the version in its kafka_<scala>-<version>.jar.
version_of() { tr ':' '\n' <<<"$1" | sed -n 's|.*/kafka_[0-9.]*-\([0-9][0-9.]*\)\.jar$|\1|p' | head -n 1; }

need() { command -v "$1" >/dev/null 2>&1 || die "'$1' not found in PATH ($2)"; }

# Prints the broker classpath, resolving it with Maven only when the cache is missing/stale.
classpath() {
  local hash cpfile tmp
  hash="$( (cat "$POM"; echo "$KAFKA_VERSION") | sha256sum | cut -c1-16)"
  cpfile="$CACHE_DIR/kafka-classpath-$hash.txt"
  cp_valid() {
    [ -s "$cpfile" ] || return 1
    local entry
    while IFS= read -r -d : entry; do
      [ -z "$entry" ] || [ -f "$entry" ] || return 1
    done < <(tr -d '\n' <"$cpfile"; printf ':')
  }
  if cp_valid; then cat "$cpfile"; return 0; fi

  need mvn "install it with scripts/deps.sh"
  mkdir -p "$CACHE_DIR" || die "cannot create cache dir $CACHE_DIR"
  # Serialise concurrent starts so only one runs Maven.
  exec 9>"$CACHE_DIR/.kafka-classpath.lock"
  flock 9
  if ! cp_valid; then
    info "resolving Kafka jars with Maven (first run only; cached in ~/.m2)..." >&2
    tmp="$cpfile.tmp.$$"
    if ! mvn -q -B -Dstyle.color=never -f "$POM" "${MVN_ARGS[@]}" dependency:build-classpath \
        -Dmdep.includeScope=runtime -Dmdep.outputFile="$tmp" >"$CACHE_DIR/mvn.log" 2>&1; then
      rm -f "$tmp"
      echo "---- $CACHE_DIR/mvn.log ----" >&2; tail -n 40 "$CACHE_DIR/mvn.log" >&2
      flock -u 9
      die "Maven could not resolve the Kafka jars (see above)"
    fi
    mv -f "$tmp" "$cpfile"
  fi
  flock -u 9
  exec 9>&-
  cp_valid || die "classpath in $cpfile names missing jars"
  cat "$cpfile"
}

# A Kafka Uuid: 16 random bytes, base64url without padding (22 chars). Python is quicker than
# a JVM start; `StorageTool random-uuid` is the fallback.
new_cluster_id() {
  local py
  if py="$(_freeport_python)"; then
    "$py" -c 'import base64, uuid
while True:
    s = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    if not s.startswith("-"):
        print(s); break'
  else
    "$JAVA" -cp "$1" "$LOG_OPT" kafka.tools.StorageTool random-uuid 2>>"$LOGFILE"
  fi
}

write_props() {
  cat >"$PROPS" <<EOF
# Generated by scripts/kafka-local.sh on every start; edits are overwritten.
# Single-node KRaft test broker (combined broker + controller).
process.roles=broker,controller
node.id=$NODE_ID
controller.quorum.voters=$NODE_ID@127.0.0.1:$CPORT
listeners=PLAINTEXT://127.0.0.1:$PORT,CONTROLLER://127.0.0.1:$CPORT${SPORT:+,SASL_SSL://127.0.0.1:$SPORT}
advertised.listeners=PLAINTEXT://127.0.0.1:$PORT${SPORT:+,SASL_SSL://127.0.0.1:$SPORT}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL

log.dirs=$DATA

# Everything single-replica and small so a fresh broker is usable at once.
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=true
delete.topic.enable=true
log.message.timestamp.type=CreateTime

# After an unclean exit (SIGKILL) the restarted broker cannot re-register until the old
# registration's session expires (default 9 s, plus back-off); shorter keeps such restarts quick.
broker.heartbeat.interval.ms=1000
broker.session.timeout.ms=5000

# Small machine: few threads.
num.network.threads=2
num.io.threads=2
num.recovery.threads.per.data.dir=1
background.threads=2
log.cleaner.threads=1
log.cleaner.dedupe.buffer.size=8388608

log.retention.hours=168
log.segment.bytes=67108864
EOF
  [ -n "$SPORT" ] || return 0
  cat >>"$PROPS" <<EOF

# SASL_SSL listener: SCRAM-SHA-256 users (added at format), the broker's certificate.
sasl.enabled.mechanisms=SCRAM-SHA-256
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
ssl.keystore.type=PKCS12
ssl.keystore.location=$KAFKA_LOCAL_KEYSTORE
ssl.keystore.password=$KAFKA_LOCAL_KEYSTORE_PASSWORD
ssl.key.password=$KAFKA_LOCAL_KEYSTORE_PASSWORD
EOF
}

# ---------------------------------------------------------------- commands
cmd_status() {
  local pid port cport
  port="$(recorded PORT)"; port="${port:-${opt_port:-$DEFAULT_PORT}}"
  cport="$(recorded CONTROLLER_PORT)"
  if pid="$(find_pid)"; then
    echo "kafka running (pid $pid, port $port${cport:+, controller port $cport}, dir $DIR)"
    exit 0
  fi
  echo "kafka stopped (port $port, dir $DIR)"
  exit 3
}

cmd_stop() {
  local pid i
  if ! pid="$(find_pid)"; then
    rm -f "$PIDFILE"
    info "not running (dir $DIR)"
    return 0
  fi
  info "stopping broker (pid $pid)..."
  echo "=== $(date '+%F %T') kafka-local: stop, SIGTERM to pid $pid" >>"$LOGFILE" 2>/dev/null || true
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < STOP_TIMEOUT * 10; i++)); do
    is_our_broker "$pid" || break
    sleep 0.1
  done
  if is_our_broker "$pid"; then
    info "broker did not exit within ${STOP_TIMEOUT}s; sending SIGKILL"
    echo "=== $(date '+%F %T') kafka-local: no exit after ${STOP_TIMEOUT}s, SIGKILL to pid $pid" >>"$LOGFILE" 2>/dev/null || true
    kill -KILL "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do is_our_broker "$pid" || break; sleep 0.1; done
    is_our_broker "$pid" && die "pid $pid survived SIGKILL"
  fi
  rm -f "$PIDFILE"
  echo "=== $(date '+%F %T') kafka-local: stopped" >>"$LOGFILE" 2>/dev/null || true
  info "stopped"
}

cmd_start() {
  local pid cp id rec_port rec_cport out start_s i
  need "$JAVA" "Java 17 is needed; install it with scripts/deps.sh"
  need kcat "install it with scripts/deps.sh"
  [ -f "$POM" ] || die "missing $POM"
  [ -f "$LOG4J" ] || die "missing $LOG4J"

  rec_port="$(recorded PORT)"; rec_cport="$(recorded CONTROLLER_PORT)"
  if pid="$(find_pid)"; then
    if [ -n "$opt_port" ] && [ -n "$rec_port" ] && [ "$opt_port" != "$rec_port" ]; then
      die "broker of $DIR is already running on port $rec_port (pid $pid), not on $opt_port; stop it first"
    fi
    info "already running (pid $pid, port ${rec_port:-?}, dir $DIR)"
    return 0
  fi

  mkdir -p "$DIR" "$DATA" || die "cannot create $DIR"
  [ -w "$DIR" ] || die "$DIR is not writable"

  PORT="${opt_port:-${rec_port:-$DEFAULT_PORT}}"
  CPORT="$rec_cport"
  if [ -z "$CPORT" ] || [ "$CPORT" = "$PORT" ]; then
    CPORT=$((PORT + 1))
    if ((CPORT > 65535)) || port_in_use "$CPORT"; then
      CPORT="$(freeport 2 | grep -vx "$PORT" | head -n 1)"
    fi
  fi
  port_in_use "$PORT" && die "port $PORT on 127.0.0.1 is already in use (another broker? try: ss -ltnp 'sport = :$PORT'); pick another with --port"
  port_in_use "$CPORT" && die "controller port $CPORT (recorded in $PORTS_FILE) is already in use on 127.0.0.1"
  printf 'PORT=%s\nCONTROLLER_PORT=%s\n' "$PORT" "$CPORT" >"$PORTS_FILE"
  write_props

  cp="$(classpath)"
  local jvm=(
    -Xmx512m -Xms256m
    -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:+ExplicitGCInvokesConcurrent
    -XX:TieredStopAtLevel=1
    -XX:+ExitOnOutOfMemoryError
    -Djava.awt.headless=true
    "$LOG_OPT"
    -Dkafka.logs.dir="$DIR"
  )
  # shellcheck disable=SC2206  # word splitting of user-supplied options is intended
  [ -n "${KAFKA_LOCAL_JAVA_OPTS:-}" ] && jvm+=(${KAFKA_LOCAL_JAVA_OPTS})

  # Keep the log from growing without bound across many restarts.
  if [ -f "$LOGFILE" ] && [ "$(stat -c %s "$LOGFILE")" -gt $((20 * 1024 * 1024)) ]; then
    mv -f "$LOGFILE" "$LOGFILE.1"
  fi

  if [ ! -f "$DATA/meta.properties" ]; then
    id="$(new_cluster_id "$cp")" || { tail_log; die "could not generate a cluster id"; }
    [[ "$id" =~ ^[A-Za-z0-9_-]{22}$ ]] || die "unexpected cluster id '$id' from StorageTool random-uuid"
    info "formatting $DATA (cluster id $id)"
    echo "=== $(date '+%F %T') kafka-local: format, cluster id $id" >>"$LOGFILE"
    scram=()
    if [ -n "$SPORT" ]; then
      scram=(--add-scram "SCRAM-SHA-256=[name=${KAFKA_LOCAL_SCRAM%%:*},password=${KAFKA_LOCAL_SCRAM#*:}]")
    fi
    "$JAVA" -Xmx256m -cp "$cp" "$LOG_OPT" \
      kafka.tools.StorageTool format -t "$id" -c "$PROPS" "${scram[@]}" >>"$LOGFILE" 2>&1 \
      || { tail_log; die "kafka.tools.StorageTool format failed"; }
  fi

  echo "=== $(date '+%F %T') kafka-local: start, port $PORT, controller port $CPORT" >>"$LOGFILE"
  rm -f "$PIDFILE"
  # setsid: own session, no controlling terminal; the inner shell writes its pid and execs java,
  # so the pid file holds the java pid.
  # shellcheck disable=SC2016  # $$ and "$@" are for the inner shell
  nohup setsid bash -c 'echo $$ >"$1"; shift; exec "$@"' kafka-local "$PIDFILE" \
    "$JAVA" "${jvm[@]}" -cp "$cp" kafka.Kafka "$PROPS" >>"$LOGFILE" 2>&1 </dev/null &
  for ((i = 0; i < 100; i++)); do [ -s "$PIDFILE" ] && break; sleep 0.05; done
  pid="$(tr -dc '0-9' <"$PIDFILE" 2>/dev/null || true)"
  [ -n "$pid" ] || die "broker did not start (no pid file $PIDFILE)"
  info "started broker (pid $pid, port $PORT, dir $DIR); waiting until it answers..."

  start_s=$SECONDS
  while :; do
    if ! is_our_broker "$pid"; then
      rm -f "$PIDFILE"
      tail_log 60
      die "broker exited during start-up (see $LOGFILE)"
    fi
    if out="$(kcat -b "127.0.0.1:$PORT" -L -m 2 2>/dev/null)" \
        && grep -q "broker $NODE_ID at 127.0.0.1:$PORT" <<<"$out"; then
      break
    fi
    if ((SECONDS - start_s >= START_TIMEOUT)); then
      tail_log 60
      info "broker did not answer on 127.0.0.1:$PORT within ${START_TIMEOUT}s; stopping it" >&2
      cmd_stop >&2 || true
      die "start timed out (see $LOGFILE)"
    fi
    sleep 0.5
  done
  info "ready on 127.0.0.1:$PORT after $((SECONDS - start_s))s (pid $pid, Kafka $(version_of "$cp"))"
}

if ((print_classpath)); then
  classpath
  exit 0
fi
case "$verb" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
esac
