#!/usr/bin/env bash
# Runs a local Redis Cluster for tests and for trying delayqd by hand: N masters with one
# replica each (2N redis-server processes of the Debian package; with --replicas 0, N), all on
# free ports on 127.0.0.1.
#
#   scripts/redis-cluster-local.sh start|stop|status [--dir D] [--masters N] [--replicas R]
#
#   start   start the data nodes, make them a cluster (`redis-cli --cluster create
#           --cluster-replicas R`; with fewer than 3 masters, which redis-cli refuses, by
#           CLUSTER ADDSLOTSRANGE / MEET / REPLICATE), then wait until every node reports
#           cluster_state:ok, knows all the nodes and maps all 16384 slots in CLUSTER SLOTS, and
#           every replica has its master link up (timeout REDIS_CLUSTER_LOCAL_START_TIMEOUT per
#           step, default 60 s). Prints the cluster as key=value lines:
#             dir=D  nodes=PORT,...  masters=PORT,...  replicas=PORT,...
#           ("nodes" all data ports in the order of the ports file; "masters" and "replicas"
#           as the cluster reports the roles now, failed nodes left out). When all nodes of the
#           dir run already, waits until the cluster is ok and only prints it; when some run,
#           stops them and starts the cluster again.
#   stop    stop every redis-server running in a node dir of D, also a node a test restarted
#           by hand: replicas first, then masters (`redis-cli shutdown`, which writes the AOF
#           out), each given up to REDIS_CLUSTER_LOCAL_STOP_TIMEOUT (default 15 s) before
#           SIGKILL. Returns 0 when nothing runs.
#   status  prints each node with its pid, ports and role; exit 0 when all nodes run and each
#           reports cluster_state:ok, 3 otherwise.
#
#   --dir D       data dir. Default <repo>/run/redis-cluster.
#   --masters N   start only: number of masters, 1 to 5 (each gets one replica). Default: the
#                 number recorded in the dir by an earlier start, else 3. A cluster that runs
#                 with another number must be stopped first. With 1 or 2 masters the cluster
#                 works but cannot fail over on its own (a replica needs the votes of a majority
#                 of all masters).
#   --replicas R  start only: replicas per master, 1 (the default) or 0 (a cluster that
#                 cannot fail over, for comparing a cluster with one server that has no
#                 replica either). Default: as recorded in the dir, else 1.
#
# Restart of a stopped dir: when the dir holds a cluster that was created completely, with
# the same number of masters, and all its recorded ports (data and bus) are free, start reuses
# the ports and each node's nodes.conf and AOF: the cluster comes back with its data, node ids,
# slots and current roles (after a failover the promoted replica stays the master). Otherwise
# (first start, --masters changed, a recorded port taken, an earlier start that failed) start
# wipes the node dirs and creates a fresh, empty cluster on fresh free ports. A reused cluster
# that does not become ok in time is stopped and left as it is; remove D to start afresh.
#
# Node settings: cluster-enabled yes, an explicit cluster-port (the bus port, a free port too:
# port+10000 may exceed 65535 or be taken), cluster-announce-ip 127.0.0.1,
# cluster-node-timeout 2000 (short, for tests; Redis's default is 15000), appendonly yes,
# appendfsync everysec (as scripts/redis-local.sh), no RDB snapshots, replication without the
# 5 s diskless-sync delay. redis.conf is regenerated on every start; Redis rewrites nodes.conf.
#
# Files in the dir:
#   ports        one "node PORT BUSPORT" line per data node
#   created      present once the cluster of these ports was created and became ok
#   create.log   output of the last cluster creation
#   node-PORT/   one per data node: redis.conf, redis.pid, redis.log, nodes.conf, appendonlydir/
# A node killed by a test can be started again with `redis-server D/node-PORT/redis.conf`; it
# rejoins the cluster (a master replaced meanwhile comes back as a replica of its successor).
set -euo pipefail

SCRIPT_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)"
REPO_ROOT="$(dirname -- "$SCRIPT_DIR")"
# shellcheck source-path=SCRIPTDIR source=lib/freeport.sh
. "$SCRIPT_DIR/lib/freeport.sh"

START_TIMEOUT="${REDIS_CLUSTER_LOCAL_START_TIMEOUT:-60}"
STOP_TIMEOUT="${REDIS_CLUSTER_LOCAL_STOP_TIMEOUT:-15}"
DEFAULT_MASTERS=3
MAX_MASTERS=5
NODE_TIMEOUT_MS=2000       # short, for tests (Redis's default is 15000)
SLOTS=16384
START_ATTEMPTS=3           # a free port can be taken before redis binds it; retry on fresh ports
CLI_TIMEOUT=5              # seconds for one redis-cli call, so a stopped (SIGSTOP) node cannot hang us

me="redis-cluster-local"
DEFAULT_DIR="$REPO_ROOT/run/redis-cluster"
# shellcheck source-path=SCRIPTDIR source=lib/service.sh
. "$SCRIPT_DIR/lib/service.sh"
# shellcheck source-path=SCRIPTDIR source=lib/redis-nodes.sh
. "$SCRIPT_DIR/lib/redis-nodes.sh"
NODE_DIR_RE='node-[0-9]+'

# Replaces the usage of service.sh: this stack has no --port but a --masters.
usage() {
  cat <<EOF
usage: $(basename -- "$0") start|stop|status [--dir D] [--masters N] [--replicas R]
  defaults: --dir $DEFAULT_DIR
            --masters <recorded in dir, else $DEFAULT_MASTERS> (1 to $MAX_MASTERS; start only)
            --replicas <recorded in dir, else 1> (replicas per master, 0 or 1; start only)
EOF
}

# --masters is this script's own; service.sh parses the rest.
opt_masters=""
opt_replicas=""
args=()
while (($#)); do
  case "$1" in
    --masters) (($# >= 2)) || die "--masters needs a value"; opt_masters="$2"; shift 2 ;;
    --masters=*) opt_masters="${1#--masters=}"; shift ;;
    --replicas) (($# >= 2)) || die "--replicas needs a value"; opt_replicas="$2"; shift 2 ;;
    --replicas=*) opt_replicas="${1#--replicas=}"; shift ;;
    --dir) if (($# >= 2)); then args+=("$1" "$2"); shift 2; else args+=("$1"); shift; fi ;;
    *) args+=("$1"); shift ;;
  esac
done
service_parse_args "${args[@]}"
[ -z "$opt_port" ] || die "--port is not supported: the cluster takes free ports (see the ports file)"
if [ -n "$opt_masters" ]; then
  if ! [[ "$opt_masters" =~ ^[0-9]$ ]] || ((opt_masters < 1 || opt_masters > MAX_MASTERS)); then
    die "invalid --masters '$opt_masters' (want 1 to $MAX_MASTERS)"
  fi
  [ "$verb" = start ] || die "--masters is an option of start only"
fi
if [ -n "$opt_replicas" ]; then
  [[ "$opt_replicas" =~ ^[01]$ ]] || die "invalid --replicas '$opt_replicas' (want 0 or 1)"
  [ "$verb" = start ] || die "--replicas is an option of start only"
fi
[ -n "$opt_dir" ] || opt_dir="$DEFAULT_DIR"
DIR="$(realpath -m -- "$opt_dir")"

PORTS_FILE="$DIR/ports"
CREATED_FILE="$DIR/created"
CREATE_LOG="$DIR/create.log"

require_redis

# ---------------------------------------------------------------- state of the dir
# The recorded nodes as "PORT BUSPORT" lines, in the order of the ports file.
recorded_nodes() {
  [ -f "$PORTS_FILE" ] || return 0
  awk '$1 == "node" && $2 ~ /^[0-9]+$/ && $3 ~ /^[0-9]+$/ { print $2, $3 }' "$PORTS_FILE"
}

recorded_ports() { recorded_nodes | awk '{ print $1 }'; }

recorded_count() { recorded_nodes | wc -l; }

# The number of masters the dir's cluster was created with (its ports file's "masters N" line;
# a file without one holds N masters and N replicas).
recorded_masters() {
  [ -f "$PORTS_FILE" ] || { echo 0; return 0; }
  awk '$1 == "masters" && $2 ~ /^[0-9]+$/ { m = $2 } $1 == "node" { n++ }
       END { print (m ? m : int(n / 2)) }' "$PORTS_FILE"
}

node_dir() { echo "$DIR/node-$1"; }

# Prints the pid of the node on PORT when it runs: its pid file, else a redis-server in its dir.
node_pid() { dir_pid "$(node_dir "$1")" redis; }

# The running recorded nodes' ports, one per line.
running_ports() {
  local p
  for p in $(recorded_ports); do node_pid "$p" >/dev/null && echo "$p"; done
  return 0
}

# Do all recorded nodes run (and does the ports file record a whole cluster)?
all_running() {
  local n
  n="$(recorded_count)"
  ((n >= 2 && n % 2 == 0)) && [ "$(running_ports | wc -l)" = "$n" ]
}

# CLUSTER NODES of the first running node that answers, "\r" removed.
cluster_nodes() {
  local p out
  for p in $(running_ports); do
    out="$(cli "$p" cluster nodes | tr -d '\r')" || continue
    [ -n "$out" ] && { echo "$out"; return 0; }
  done
  return 0
}

# The ports of the nodes with role ROLE (master or slave) as the cluster reports them, failed
# nodes left out, in the order of the ports file; comma-separated.
ports_with_role() {
  local want="$1" nodes p
  nodes="$(cluster_nodes)"
  for p in $(recorded_ports); do
    awk -v p="$p" -v want="$want" '{
        addr = $2; sub(/@.*/, "", addr); sub(/.*:/, "", addr)
        if (addr != p) next
        n = split($3, f, ","); ok = 0
        for (i = 1; i <= n; i++) {
          if (f[i] == want) ok = 1
          if (f[i] == "fail" || f[i] == "fail?" || f[i] == "noaddr" || f[i] == "handshake") { ok = 0; break }
        }
        if (ok) { print p; exit }
      }' <<<"$nodes"
  done | paste -sd, -
}

# ---------------------------------------------------------------- config
write_conf() {  # port busport
  local d; d="$(node_dir "$1")"
  {
    cat <<EOF
# Generated by scripts/redis-cluster-local.sh on every start; edits are overwritten.
bind 127.0.0.1
port $1
protected-mode yes
daemonize yes
supervised no
dir $(q "$d")
pidfile $(q "$d/redis.pid")
logfile $(q "$d/redis.log")
loglevel notice

# Cluster: own bus port, short node timeout (for tests).
cluster-enabled yes
cluster-config-file $(q "$d/nodes.conf")
cluster-port $2
cluster-announce-ip 127.0.0.1
cluster-node-timeout $NODE_TIMEOUT_MS

EOF
    persistence_conf
    cat <<EOF

# Replication: a replica (re)syncs at once, not after the default 5 s wait for more replicas.
repl-diskless-sync-delay 0
EOF
  } >"$d/redis.conf"
}

write_ports() {  # "PORT BUSPORT" lines on stdin
  { echo "masters $NMASTERS"; awk '{ print "node", $1, $2 }'; } >"$PORTS_FILE.tmp"
  mv -f "$PORTS_FILE.tmp" "$PORTS_FILE"
}

# ---------------------------------------------------------------- start
# Waits until the node on PORT, launched, answers. Returns as wait_answering.
wait_node() {
  wait_answering "$(node_dir "$1")" redis "$1" "a port of node $1 was taken before redis could bind it"
}

# Launches every recorded node, then waits until each answers. Returns as wait_node.
start_nodes() {
  local port bus
  while read -r port bus; do
    mkdir -p "$(node_dir "$port")"
    write_conf "$port" "$bus"
  done < <(recorded_nodes)
  for port in $(recorded_ports); do launch_node "$(node_dir "$port")" redis || return 1; done
  for port in $(recorded_ports); do
    wait_node "$port" || return $?
  done
}

# How many slots CLUSTER SLOTS of PORT maps, counting each slot once (0 when it does not answer).
slots_mapped() {
  cli "$1" -2 --json cluster slots | grep -oE '\[[0-9]+,[0-9]+,\[' | tr -d '[' |
    awk -F, '{ for (s = $1; s <= $2; s++) seen[s] = 1 } END { print length(seen) + 0 }'
}

# Is node PORT converged: cluster_state:ok, all nodes known, all slots in CLUSTER SLOTS,
# and as a replica its master link up?
node_ok() {
  local port="$1" info r
  info="$(cli "$port" cluster info | tr -d '\r')" || return 1
  grep -qx 'cluster_state:ok' <<<"$info" || return 1
  grep -qx "cluster_known_nodes:$(recorded_count)" <<<"$info" || return 1
  [ "$(slots_mapped "$port")" = "$SLOTS" ] || return 1
  r="$(role "$port")"
  if [ "$r" = slave ]; then
    [ "$(info_field "$port" "info replication" master_link_status)" = up ] || return 1
  else
    [ "$r" = master ] || return 1
  fi
}

cluster_ok() {
  local p
  for p in $(recorded_ports); do node_ok "$p" || return 1; done
}

# Creates the cluster on the freshly started, empty nodes: the first N of the ports file
# become masters as redis-cli chooses (with all nodes on one host, the first N given), each of
# the others a replica.
create_cluster() {
  local ports=() addrs=() p
  mapfile -t ports < <(recorded_ports)
  for p in "${ports[@]}"; do addrs+=("127.0.0.1:$p"); done
  if ((NMASTERS >= 3)); then
    # (its output has colour codes even when not on a terminal; the log gets plain text)
    if ! timeout "$START_TIMEOUT" redis-cli --cluster create "${addrs[@]}" \
        --cluster-replicas "$NREPLICAS" --cluster-yes </dev/null 2>&1 |
        sed 's/\x1b\[[0-9;]*m//g' >"$CREATE_LOG"; then
      tail_log "$CREATE_LOG"
      info "redis-cli --cluster create failed or timed out after ${START_TIMEOUT}s"
      return 1
    fi
    return 0
  fi
  create_cluster_by_hand "${ports[@]}" >"$CREATE_LOG" 2>&1 || {
    tail_log "$CREATE_LOG"
    info "creating the cluster by hand failed"
    return 1
  }
}

# redis-cli --cluster create wants 3 masters at least; with 1 or 2 this does what it does: slots
# split evenly over the masters, distinct config epochs, MEET, then REPLICATE.
create_cluster_by_hand() {
  local ports=("$@") n=$NMASTERS i first last bus id out
  for ((i = 0; i < n; i++)); do
    first=$((i * SLOTS / n)); last=$(((i + 1) * SLOTS / n - 1))
    echo "127.0.0.1:${ports[i]} master, slots $first-$last"
    out="$(cli "${ports[i]}" cluster addslotsrange "$first" "$last")"
    [ "$out" = OK ] || { echo "CLUSTER ADDSLOTSRANGE on ${ports[i]}: $out"; return 1; }
  done
  for ((i = 0; i < ${#ports[@]}; i++)); do
    out="$(cli "${ports[i]}" cluster set-config-epoch $((i + 1)))"
    [ "$out" = OK ] || { echo "CLUSTER SET-CONFIG-EPOCH on ${ports[i]}: $out"; return 1; }
  done
  for ((i = 1; i < ${#ports[@]}; i++)); do
    bus="$(recorded_nodes | awk -v p="${ports[i]}" '$1 == p { print $2 }')"
    out="$(cli "${ports[0]}" cluster meet 127.0.0.1 "${ports[i]}" "$bus")"
    [ "$out" = OK ] || { echo "CLUSTER MEET ${ports[i]} on ${ports[0]}: $out"; return 1; }
  done
  for ((i = 0; i < ${#ports[@]}; i++)); do
    wait_for known_by "${ports[i]}" "${ports[@]}" || { echo "node ${ports[i]} did not meet all nodes"; return 1; }
  done
  for ((i = n; i < ${#ports[@]}; i++)); do
    id="$(cli "${ports[i - n]}" cluster myid)"
    echo "127.0.0.1:${ports[i]} replica of 127.0.0.1:${ports[i - n]} ($id)"
    out="$(cli "${ports[i]}" cluster replicate "$id")"
    [ "$out" = OK ] || { echo "CLUSTER REPLICATE on ${ports[i]}: $out"; return 1; }
  done
}

# Does node PORT know all nodes PORTS... (no handshake pending)?
known_by() {
  local port="$1" nodes p; shift
  nodes="$(cli "$port" cluster nodes | tr -d '\r')" || return 1
  grep -q handshake <<<"$nodes" && return 1
  for p in "$@"; do grep -q " 127.0.0.1:$p@" <<<"$nodes" || return 1; done
}

# May the recorded cluster be started again as it is? Prints why not, when not.
reusable() {
  local port bus n
  n="$(recorded_count)"
  [ -f "$CREATED_FILE" ] || { echo "no complete cluster recorded"; return 1; }
  ((n == NODES)) || { echo "it had $n nodes, not $NODES"; return 1; }
  while read -r port bus; do
    [ -s "$(node_dir "$port")/nodes.conf" ] || { echo "node $port has no nodes.conf"; return 1; }
    port_in_use "$port" && { echo "port $port is taken"; return 1; }
    port_in_use "$bus" && { echo "bus port $bus is taken"; return 1; }
  done < <(recorded_nodes)
  return 0
}

# Prints, for each node that is not converged, what its CLUSTER INFO says.
report_not_ok() {
  local p
  for p in $(recorded_ports); do
    node_ok "$p" && continue
    echo "node $p: $(cli "$p" cluster info | tr -d '\r' |
      grep -E '^cluster_(state|known_nodes|slots_ok):' | paste -sd' ' -)" >&2
  done
  return 0
}

print_cluster() {
  echo "dir=$DIR"
  echo "nodes=$(recorded_ports | paste -sd, -)"
  echo "masters=$(ports_with_role master)"
  echo "replicas=$(ports_with_role slave)"
}

cmd_start() {
  local rec_n rec_masters rec_replicas attempt rc why start_s=$SECONDS
  rec_n="$(recorded_count)"
  rec_masters="$(recorded_masters)"
  rec_replicas=1
  ((rec_masters >= 1 && rec_masters <= MAX_MASTERS)) && rec_replicas=$((rec_n / rec_masters - 1))
  ((rec_masters >= 1 && rec_masters <= MAX_MASTERS && rec_n == rec_masters * (1 + rec_replicas) &&
    rec_replicas <= 1)) || { rec_masters=$DEFAULT_MASTERS; rec_replicas=1; }
  NMASTERS="${opt_masters:-$rec_masters}"
  NREPLICAS="${opt_replicas:-$rec_replicas}"
  NODES=$((NMASTERS * (1 + NREPLICAS)))

  if all_running; then
    ((NODES == rec_n)) ||
      die "the cluster of $DIR runs with $rec_masters masters and $rec_replicas replica(s) each, not $NMASTERS and $NREPLICAS; stop it first"
    wait_for cluster_ok ||
      die "the nodes of $DIR run but the cluster is not ok after ${START_TIMEOUT}s (see status); stop it first"
    info "already running (dir $DIR)"
    print_cluster
    return 0
  fi
  if [ -n "$(dir_processes)" ]; then
    info "partly running; stopping it to start it again"
    cmd_stop
  fi
  mkdir -p "$DIR" || die "cannot create $DIR"
  [ -w "$DIR" ] || die "$DIR is not writable"

  if why="$(reusable)"; then
    info "restarting the recorded cluster of $DIR (ports, nodes.conf and data kept)"
    rc=0; start_nodes || rc=$?
    ((rc == 0)) || { cmd_stop >/dev/null; die "start failed (logs in $DIR/node-*/redis.log)"; }
    if ! wait_for cluster_ok; then
      report_not_ok
      cmd_stop >/dev/null
      die "the restarted cluster did not become ok within ${START_TIMEOUT}s" \
        "(logs in $DIR/node-*/redis.log); remove $DIR to start a fresh cluster"
    fi
  else
    [ ! -f "$PORTS_FILE" ] || info "creating a fresh cluster ($why); the old data of $DIR is dropped"
    for ((attempt = 1; attempt <= START_ATTEMPTS; attempt++)); do
      rm -f "$CREATED_FILE" "$CREATE_LOG"
      rm -rf -- "$DIR"/node-*
      freeport $((2 * NODES)) | paste - - | write_ports
      (($(recorded_count) == NODES)) || die "could not find $((2 * NODES)) free ports"
      rc=0; start_nodes || rc=$?
      ((rc == 0)) && break
      cmd_stop >/dev/null
      ((rc == 2)) || die "start failed (logs in $DIR/node-*/redis.log)"
    done
    ((rc == 0)) || die "start failed: ports kept being taken"
    create_cluster || { cmd_stop >/dev/null; die "start failed (see $CREATE_LOG)"; }
    if ! wait_for cluster_ok; then
      report_not_ok
      cmd_stop >/dev/null
      die "the cluster did not become ok within ${START_TIMEOUT}s (logs in $DIR/node-*/redis.log)"
    fi
    : >"$CREATED_FILE"
  fi
  info "ready: $NMASTERS master(s) with $NREPLICAS replica(s) each, in $((SECONDS - start_s))s (dir $DIR)"
  print_cluster
}

# ---------------------------------------------------------------- stop
cmd_stop() {
  local procs
  procs="$(dir_processes)"
  if [ -z "$procs" ]; then
    rm -f "$DIR"/node-*/redis.pid
    info "not running (dir $DIR)"
    return 0
  fi
  info "stopping the cluster of $DIR..."
  # Replicas before masters (see stop_nodes).
  stop_nodes <<<"$procs"
  rm -f "$DIR"/node-*/redis.pid
  info "stopped"
}

# ---------------------------------------------------------------- status
cmd_status() {
  local port bus pid n=0 ok=0 total r state
  if [ ! -f "$PORTS_FILE" ]; then
    echo "stopped (never started in $DIR)"
    exit 3
  fi
  total="$(recorded_count)"
  while read -r port bus; do
    if pid="$(node_pid "$port")"; then
      n=$((n + 1))
      r="$(role "$port")"; [ "$r" = slave ] && r=replica
      state="$(info_field "$port" "cluster info" cluster_state)"
      [ "$state" = ok ] && ok=$((ok + 1))
      echo "node 127.0.0.1:$port running (pid $pid, bus $bus, role ${r:-?}, cluster_state ${state:-?})"
    else
      echo "node 127.0.0.1:$port stopped (bus $bus)"
    fi
  done < <(recorded_nodes)
  if ((n == 0)); then
    echo "stopped (dir $DIR)"
    exit 3
  fi
  echo "masters=$(ports_with_role master) replicas=$(ports_with_role slave) (dir $DIR)"
  ((n == total && ok == n && total >= 2)) || exit 3
  exit 0
}

case "$verb" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
esac
