#!/usr/bin/env bash
# Runs a local Redis high-availability stack for tests and for trying delayqd by hand: one
# master, one replica (two with --replicas 2) and three Sentinels (redis-server of the Debian
# package; a Sentinel is `redis-server --sentinel`), all on free ports on 127.0.0.1.
#
#   scripts/redis-sentinel-local.sh start|stop|status [--dir D] [--master-name NAME] [--replicas N]
#
#   start   start the master, then the replicas, wait until each replica reports
#           master_link_status:up, then start the Sentinels and wait until each of them knows
#           every replica (link ok) and the two other Sentinels, so that a failover works at
#           once (timeout REDIS_SENTINEL_LOCAL_START_TIMEOUT per step, default 30 s). Prints the
#           stack as key=value lines:
#             dir=D  master_name=NAME  master=PORT  replica=PORT  replicas=PORT[,PORT]
#             sentinels=PORT,PORT,PORT
#           ("master" is the current master as the Sentinels see it, "replicas" the other data
#           nodes and "replica" the first of them). When all processes of the dir run already
#           (five, six with two replicas), only prints them; when some run, stops them and
#           starts the whole stack again.
#   stop    stop the Sentinels, then the replicas, then the master (`redis-cli shutdown`,
#           which writes the AOF out), each given up to REDIS_SENTINEL_LOCAL_STOP_TIMEOUT
#           (default 15 s) before SIGKILL; also stops any other redis-server running in a
#           node dir of D (a node a test restarted by hand). Returns 0 when nothing runs.
#   status  prints each process with its pid and role; exit 0 when all processes of the
#           recorded stack run, 3 otherwise.
#
#   --dir D             data dir. Default <repo>/run/redis-sentinel.
#   --master-name NAME  the name the Sentinels monitor the master under. Default: the name
#                       recorded in the dir by an earlier start, else "delayq".
#   --replicas N        start only: how many replicas of the master, 1 or 2. Default: the number
#                       recorded in the dir by an earlier start, else 1. A stack that runs with
#                       another number must be stopped first.
#
# Ports: a start reuses the ports recorded in the dir when they are all free (a client
# configured by hand keeps working across stop/start; a replica added by --replicas 2 gets a
# fresh port), else takes fresh free ports for the whole stack. There is no fixed port. A stop
# records which data node is the master at that moment, so the next start makes it the master
# again and the data written since a failover is kept. A start with fewer replicas than
# recorded drops the last recorded replica and removes its node dir.
#
# Sentinel settings: quorum 2, down-after-milliseconds 1000, failover-timeout 10000 (short, for
# tests), parallel-syncs 1, resolve-hostnames no, announce-ip 127.0.0.1; no auth-pass (the data
# nodes have no password). Data nodes: appendonly yes, appendfsync everysec (as
# scripts/redis-local.sh), no RDB snapshots, replication without the 5 s diskless-sync delay.
# Sentinel rewrites the config files while it runs; start regenerates them.
#
# Files in the dir:
#   ports            a "master N" line, one "replica N" line per replica and three
#                    "sentinel N" lines
#   master-name      the monitored name
#   redis-N/         one per data node: redis.conf, redis.pid, redis.log, appendonlydir/
#   sentinel-N/      one per Sentinel: sentinel.conf, sentinel.pid, sentinel.log
# A data node killed by a test can be started again with `redis-server D/redis-N/redis.conf`.
set -euo pipefail

SCRIPT_DIR="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)"
REPO_ROOT="$(dirname -- "$SCRIPT_DIR")"
# shellcheck source-path=SCRIPTDIR source=lib/freeport.sh
. "$SCRIPT_DIR/lib/freeport.sh"

START_TIMEOUT="${REDIS_SENTINEL_LOCAL_START_TIMEOUT:-30}"
STOP_TIMEOUT="${REDIS_SENTINEL_LOCAL_STOP_TIMEOUT:-15}"
DEFAULT_MASTER_NAME=delayq
QUORUM=2                   # of 3 Sentinels: one may be down and a failover still happens
DOWN_AFTER_MS=1000         # short, for tests (Redis's default is 30000)
FAILOVER_TIMEOUT_MS=10000  # short, for tests (Redis's default is 180000)
MAX_REPLICAS=2
START_ATTEMPTS=3           # a free port can be taken before redis binds it; retry on fresh ports
CLI_TIMEOUT=5              # seconds for one redis-cli call, so a stopped (SIGSTOP) node cannot hang us

me="redis-sentinel-local"
DEFAULT_DIR="$REPO_ROOT/run/redis-sentinel"
# shellcheck source-path=SCRIPTDIR source=lib/service.sh
. "$SCRIPT_DIR/lib/service.sh"
# shellcheck source-path=SCRIPTDIR source=lib/redis-nodes.sh
. "$SCRIPT_DIR/lib/redis-nodes.sh"
NODE_DIR_RE='(redis|sentinel)-[0-9]+'

# Replaces the usage of service.sh: this stack has no --port but a --master-name and --replicas.
usage() {
  cat <<EOF
usage: $(basename -- "$0") start|stop|status [--dir D] [--master-name NAME] [--replicas N]
  defaults: --dir $DEFAULT_DIR  --master-name <recorded in dir, else $DEFAULT_MASTER_NAME>
            --replicas <recorded in dir, else 1> (1 to $MAX_REPLICAS; start only)
EOF
}

# --master-name and --replicas are this script's own; service.sh parses the rest.
opt_name=""
opt_replicas=""
args=()
while (($#)); do
  case "$1" in
    --master-name) (($# >= 2)) || die "--master-name needs a value"; opt_name="$2"; shift 2 ;;
    --master-name=*) opt_name="${1#--master-name=}"; shift ;;
    --replicas) (($# >= 2)) || die "--replicas needs a value"; opt_replicas="$2"; shift 2 ;;
    --replicas=*) opt_replicas="${1#--replicas=}"; shift ;;
    --dir) if (($# >= 2)); then args+=("$1" "$2"); shift 2; else args+=("$1"); shift; fi ;;
    *) args+=("$1"); shift ;;
  esac
done
service_parse_args "${args[@]}"
[ -z "$opt_port" ] || die "--port is not supported: the stack takes free ports (see the ports file)"
if [ -n "$opt_name" ] && ! [[ "$opt_name" =~ ^[A-Za-z0-9._-]{1,64}$ ]]; then
  die "invalid --master-name '$opt_name' (want 1-64 of A-Z a-z 0-9 . _ -)"
fi
if [ -n "$opt_replicas" ]; then
  if ! [[ "$opt_replicas" =~ ^[0-9]$ ]] || ((opt_replicas < 1 || opt_replicas > MAX_REPLICAS)); then
    die "invalid --replicas '$opt_replicas' (want 1 to $MAX_REPLICAS)"
  fi
  [ "$verb" = start ] || die "--replicas is an option of start only"
fi
[ -n "$opt_dir" ] || opt_dir="$DEFAULT_DIR"
DIR="$(realpath -m -- "$opt_dir")"

PORTS_FILE="$DIR/ports"
NAME_FILE="$DIR/master-name"

require_redis

# ---------------------------------------------------------------- state of the dir
# Ports of one role in the ports file, one per line (empty when absent).
recorded() { [ -f "$PORTS_FILE" ] && awk -v k="$1" '$1 == k && $2 ~ /^[0-9]+$/ { print $2 }' "$PORTS_FILE" || true; }

recorded_name() { [ -f "$NAME_FILE" ] && tr -dc 'A-Za-z0-9._-' <"$NAME_FILE" || true; }

# The recorded nodes as "kind port" lines: data nodes first, master first.
nodes() {
  local p
  for p in $(recorded master) $(recorded replica); do echo "redis $p"; done
  for p in $(recorded sentinel); do echo "sentinel $p"; done
}

node_dir() { echo "$DIR/$1-$2"; }

# Prints the pid of node KIND PORT when it runs: its pid file, else a redis-server in its dir.
node_pid() { dir_pid "$(node_dir "$1" "$2")" "$1"; }

# The master's port as Sentinel NAME sees it, from the first Sentinel of the dir that answers;
# else the one data node answering ROLE master; else nothing. Asks only nodes of the dir that
# run: whoever else listens on a recorded port may never answer.
current_master() {
  local name="$1" p out masters=()
  for p in $(recorded sentinel); do
    node_pid sentinel "$p" >/dev/null || continue
    out="$(cli "$p" sentinel get-master-addr-by-name "$name" | sed -n 2p)"
    [[ "$out" =~ ^[0-9]+$ ]] && { echo "$out"; return 0; }
  done
  for p in $(recorded master) $(recorded replica); do
    node_pid redis "$p" >/dev/null || continue
    [ "$(role "$p")" = master ] && masters+=("$p")
  done
  ((${#masters[@]} == 1)) && echo "${masters[0]}"
  return 0
}

write_ports() {  # master "replica..." sentinel...  (the replicas' ports as one word)
  local m="$1" r s reps; read -ra reps <<<"$2"; shift 2
  {
    echo "master $m"
    for r in "${reps[@]}"; do echo "replica $r"; done
    for s in "$@"; do echo "sentinel $s"; done
  } >"$PORTS_FILE.tmp"
  mv -f "$PORTS_FILE.tmp" "$PORTS_FILE"
}

# ---------------------------------------------------------------- configs
common_conf() {  # kind port
  local d; d="$(node_dir "$1" "$2")"
  cat <<EOF
# Generated by scripts/redis-sentinel-local.sh on every start; edits are overwritten.
bind 127.0.0.1
port $2
daemonize yes
supervised no
dir $(q "$d")
pidfile $(q "$d/$1.pid")
logfile $(q "$d/$1.log")
loglevel notice
EOF
}

write_redis_conf() {  # port [master-port]
  {
    common_conf redis "$1"
    cat <<EOF
protected-mode yes

EOF
    persistence_conf
    cat <<EOF

# Replication: a replica (re)syncs at once, not after the default 5 s wait for more replicas.
repl-diskless-sync-delay 0
replica-announce-ip 127.0.0.1
EOF
    [ -z "${2-}" ] || echo "replicaof 127.0.0.1 $2"
  } >"$(node_dir redis "$1")/redis.conf"
}

write_sentinel_conf() {  # port master-port name
  {
    common_conf sentinel "$1"
    cat <<EOF
protected-mode no
sentinel resolve-hostnames no
sentinel announce-hostnames no
sentinel announce-ip 127.0.0.1
sentinel monitor $3 127.0.0.1 $2 $QUORUM
sentinel down-after-milliseconds $3 $DOWN_AFTER_MS
sentinel failover-timeout $3 $FAILOVER_TIMEOUT_MS
sentinel parallel-syncs $3 1
EOF
  } >"$(node_dir sentinel "$1")/sentinel.conf"
}

# ---------------------------------------------------------------- start
# Starts node KIND PORT. Returns 0 when it answers, 2 when its port was taken, 1 otherwise.
start_node() {
  local kind="$1" port="$2" d args=()
  d="$(node_dir "$kind" "$port")"
  if [ "$kind" = sentinel ]; then args=(--sentinel); fi
  launch_node "$d" "$kind" "${args[@]}" || return 1
  wait_answering "$d" "$kind" "$port" "port $port was taken before $kind could bind it"
}

replica_linked() { [ "$(info_field "$1" "info replication" master_link_status)" = up ]; }

# SENTINEL replicas/sentinels print flat key/value lines; one block per instance on one line.
sentinel_blocks() {
  cli "$1" sentinel "$2" "$3" |
    awk 'NR % 2 { k = $0; next } k == "name" && NR > 2 { print "" } { printf " %s=%s", k, $0 } END { print "" }'
}

# Does Sentinel PORT know each replica REPLICA... (link ok) and two other healthy Sentinels?
sentinel_ready() {
  local port="$1" name="$2" replica blocks n; shift 2
  blocks="$(sentinel_blocks "$port" replicas "$name")"
  for replica in "$@"; do
    grep " port=$replica " <<<"$blocks" | grep " flags=slave " |
      grep -q " master-link-status=ok " || return 1
  done
  n="$(sentinel_blocks "$port" sentinels "$name" | grep -c " flags=sentinel " || true)"
  ((n == 2))
}

# Prints N free ports, one per line, none of them one of the ports EXCLUDE...
fresh_ports() {
  local n="$1" p got=() k=0; shift
  # freeport holds all its sockets open together: its ports are distinct, and at most $# of
  # them can be excluded.
  mapfile -t got < <(freeport $((n + $#)))
  for p in "${got[@]}"; do
    ((k < n)) || break
    [[ " $* " == *" $p "* ]] && continue
    echo "$p"; k=$((k + 1))
  done
}

# Puts the ports to use in M, R (NREPLICAS of them) and S: the recorded ones when they are all
# free (with a fresh port for a replica more than recorded), else fresh ones (FRESH=1 forces
# that). Data dirs follow their role to the new ports.
choose_ports() {
  local rm p all_free=1 rr=() fresh=()
  rm="$(recorded master)"
  mapfile -t rr < <(recorded replica)
  mapfile -t S < <(recorded sentinel)
  if [ "${FRESH:-0}" = 0 ] && [ -n "$rm" ] && ((${#rr[@]} >= 1 && ${#S[@]} == 3)); then
    R=("${rr[@]:0:NREPLICAS}")
    for p in "$rm" "${R[@]}" "${S[@]}"; do port_in_use "$p" && all_free=0; done
    if ((all_free)); then
      M="$rm"
      if ((${#R[@]} < NREPLICAS)); then
        mapfile -t fresh < <(fresh_ports $((NREPLICAS - ${#R[@]})) "$M" "${rr[@]}" "${S[@]}")
        ((${#R[@]} + ${#fresh[@]} == NREPLICAS)) || die "could not find a free port"
        R+=("${fresh[@]}")
      fi
      move_data_dirs
      return 0
    fi
  fi
  mapfile -t fresh < <(freeport $((NREPLICAS + 4)))
  ((${#fresh[@]} == NREPLICAS + 4)) || die "could not find $((NREPLICAS + 4)) free ports"
  M="${fresh[0]}"; R=("${fresh[@]:1:NREPLICAS}"); S=("${fresh[@]:NREPLICAS+1:3}")
  move_data_dirs
}

# Moves the node dirs of the recorded data nodes to the ports chosen for their role: the
# master's to M, the i-th replica's to R[i]. The dir of a recorded replica the stack no longer
# has (a start with fewer --replicas) is removed, so that no stale dir takes a port's name.
move_data_dirs() {
  local old=() new=("$M" "${R[@]}") i d
  mapfile -t old < <(recorded master; recorded replica)
  for ((i = 0; i < ${#old[@]}; i++)); do
    d="$DIR/redis-${old[i]}"
    [ -d "$d" ] && mv -- "$d" "$DIR/.redis-$i.moving"
  done
  for ((i = 0; i < ${#new[@]}; i++)); do
    [ -d "$DIR/.redis-$i.moving" ] || continue
    rm -rf -- "$DIR/redis-${new[i]}"  # not a recorded node's: all of those were moved away
    mv -- "$DIR/.redis-$i.moving" "$DIR/redis-${new[i]}"
  done
  for ((i = ${#new[@]}; i < ${#old[@]}; i++)); do
    if [ -d "$DIR/.redis-$i.moving" ]; then
      info "dropping replica 127.0.0.1:${old[i]} (--replicas $NREPLICAS); removing its dir"
      rm -rf -- "$DIR/.redis-$i.moving"
    fi
  done
  return 0
}

# One try at the processes on ports M, R, S. Returns as start_node does.
start_all() {
  local p
  rm -rf -- "$DIR"/sentinel-*    # Sentinel state starts afresh, as the data nodes' roles do
  for p in "$M" "${R[@]}"; do mkdir -p "$(node_dir redis "$p")"; done
  write_redis_conf "$M"
  for p in "${R[@]}"; do write_redis_conf "$p" "$M"; done
  for p in "${S[@]}"; do mkdir -p "$(node_dir sentinel "$p")"; write_sentinel_conf "$p" "$M" "$NAME"; done
  write_ports "$M" "${R[*]}" "${S[@]}"

  start_node redis "$M" || return $?
  for p in "${R[@]}"; do start_node redis "$p" || return $?; done
  for p in "${R[@]}"; do
    wait_for replica_linked "$p" ||
      { info "replica $p did not report master_link_status:up"; return 1; }
  done
  for p in "${S[@]}"; do start_node sentinel "$p" || return $?; done
  for p in "${S[@]}"; do
    wait_for sentinel_ready "$p" "$NAME" "${R[@]}" ||
      { info "sentinel $p did not see the replicas and the other sentinels"; return 1; }
  done
}

print_stack() {
  local m reps
  m="$(current_master "$NAME")"; m="${m:-$(recorded master)}"
  reps="$( { recorded master; recorded replica; } | grep -vx "$m" | paste -sd, -)" || true
  echo "dir=$DIR"
  echo "master_name=$NAME"
  echo "master=$m"
  echo "replica=${reps%%,*}"
  echo "replicas=$reps"
  echo "sentinels=$(recorded sentinel | paste -sd, -)"
}

running_count() {
  local kind port n=0
  while read -r kind port; do node_pid "$kind" "$port" >/dev/null && n=$((n + 1)); done < <(nodes)
  echo "$n"
}

# How many replicas the ports file records.
recorded_replicas() { recorded replica | wc -l; }

# Does the ports file record a whole stack: a master, 1 to MAX_REPLICAS replicas, three
# Sentinels?
stack_recorded() {
  local nm nr ns
  nm="$(recorded master | wc -l)"; nr="$(recorded_replicas)"; ns="$(recorded sentinel | wc -l)"
  ((nm == 1 && nr >= 1 && nr <= MAX_REPLICAS && ns == 3))
}

# Do all processes of the recorded stack run?
all_running() { stack_recorded && [ "$(running_count)" = "$(nodes | wc -l)" ]; }

cmd_start() {
  local attempt rc rec_name rec_replicas reps
  rec_name="$(recorded_name)"
  NAME="${opt_name:-${rec_name:-$DEFAULT_MASTER_NAME}}"
  rec_replicas="$(recorded_replicas)"
  ((rec_replicas >= 1 && rec_replicas <= MAX_REPLICAS)) || rec_replicas=1
  NREPLICAS="${opt_replicas:-$rec_replicas}"
  if all_running; then
    [ -z "$opt_name" ] || [ "$opt_name" = "$rec_name" ] ||
      die "the stack of $DIR runs with master name '$rec_name', not '$opt_name'; stop it first"
    ((NREPLICAS == rec_replicas)) ||
      die "the stack of $DIR runs with $rec_replicas replica(s), not $NREPLICAS; stop it first"
    info "already running (dir $DIR)"
    print_stack
    return 0
  fi
  if [ -n "$(dir_processes)" ]; then
    info "partly running; stopping it to start it afresh"
    cmd_stop
  fi
  mkdir -p "$DIR" || die "cannot create $DIR"
  [ -w "$DIR" ] || die "$DIR is not writable"
  echo "$NAME" >"$NAME_FILE"

  FRESH=0
  for ((attempt = 1; attempt <= START_ATTEMPTS; attempt++)); do
    choose_ports
    rc=0; start_all || rc=$?
    ((rc == 0)) && break
    cmd_stop >/dev/null
    ((rc == 2)) || die "start failed (logs in $DIR)"
    FRESH=1
  done
  ((rc == 0)) || die "start failed: ports kept being taken"
  if ((NREPLICAS == 1)); then reps="replica 127.0.0.1:${R[0]}"; else
    reps="replicas $(printf '127.0.0.1:%s ' "${R[@]}")"; reps="${reps% }"
  fi
  info "ready: master 127.0.0.1:$M, $reps, sentinels ${S[*]} (name $NAME, dir $DIR)"
  print_stack
}

# ---------------------------------------------------------------- stop
# Rewrites the ports file so that "master" names the data node that is the master now.
# A replica that is the master now swaps places with the recorded master; the other replicas
# keep their places.
record_roles() {
  local m rm rr=() i
  m="$(current_master "$(recorded_name)")"
  rm="$(recorded master)"; mapfile -t rr < <(recorded replica)
  [ -n "$m" ] || return 0
  for ((i = 0; i < ${#rr[@]}; i++)); do
    if [ "$m" = "${rr[i]}" ]; then
      rr[i]="$rm"
      mapfile -t S < <(recorded sentinel)
      write_ports "$m" "${rr[*]}" "${S[@]}"
      return 0
    fi
  done
}

cmd_stop() {
  local procs
  procs="$(dir_processes)"
  if [ -z "$procs" ]; then
    rm -f "$DIR"/redis-*/redis.pid "$DIR"/sentinel-*/sentinel.pid
    info "not running (dir $DIR)"
    return 0
  fi
  info "stopping the stack of $DIR..."
  record_roles
  # Sentinels first, then replicas, then the master (see stop_nodes).
  stop_nodes <<<"$procs"
  rm -f "$DIR"/redis-*/redis.pid "$DIR"/sentinel-*/sentinel.pid
  info "stopped"
}

# ---------------------------------------------------------------- status
cmd_status() {
  local kind port pid n=0 m name
  name="$(recorded_name)"
  if [ ! -f "$PORTS_FILE" ]; then
    echo "stopped (never started in $DIR)"
    exit 3
  fi
  while read -r kind port; do
    if pid="$(node_pid "$kind" "$port")"; then
      n=$((n + 1))
      if [ "$kind" = sentinel ]; then
        echo "sentinel 127.0.0.1:$port running (pid $pid)"
      else
        echo "redis    127.0.0.1:$port running (pid $pid, role $(role "$port"))"
      fi
    else
      printf '%-8s 127.0.0.1:%s stopped\n' "$kind" "$port"
    fi
  done < <(nodes)
  m="$(current_master "$name")"
  echo "master '$name' is 127.0.0.1:${m:-?} (dir $DIR)"
  stack_recorded && ((n == $(nodes | wc -l))) || exit 3
  exit 0
}

case "$verb" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
esac
