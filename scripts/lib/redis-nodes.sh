# Shared by the Redis stack scripts redis-sentinel-local.sh and redis-cluster-local.sh (and, for
# require_redis, is_redis, tail_log and q, by redis-local.sh): the redis-server processes of a
# stack's dir, found by their working dir (redis chdirs to its "dir" and rewrites its process
# title), launched, waited for and stopped; redis-cli with a timeout.
#
# Each node runs in a node dir DIR/NAME-PORT of its own, with the files KIND.conf, KIND.pid and
# KIND.log (KIND is redis for a data node, sentinel for a Sentinel). Source this file after
# lib/service.sh (it uses info and die). The caller sets, before calling the functions:
#   DIR            the stack's data dir, absolute and without symlinks (realpath -m)
#   NODE_DIR_RE    what the names of its node dirs match (an extended regex, anchored here),
#                  e.g. 'node-[0-9]+'; every such name ends in -PORT
#   CLI_TIMEOUT    seconds for one redis-cli call (cli), so a stopped (SIGSTOP) node cannot hang us
#   START_TIMEOUT  seconds wait_for and wait_answering wait
#   STOP_TIMEOUT   seconds stop_group waits after SHUTDOWN before SIGKILL
#   me             (service.sh) the script's name in messages
# shellcheck shell=bash

# Dies unless redis-server and redis-cli are installed.
require_redis() {
  command -v redis-server >/dev/null 2>&1 || die "redis-server not found (install it with scripts/deps.sh)"
  command -v redis-cli >/dev/null 2>&1 || die "redis-cli not found (install it with scripts/deps.sh)"
}

# Is PID a live redis-server? (Redis rewrites its process title, so this checks /proc/PID/exe;
# Debian's redis-server is a link to redis-check-rdb.)
is_redis() {
  local pid="$1" exe
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  exe="$(readlink "/proc/$pid/exe" 2>/dev/null)" || return 1
  exe="$(basename -- "${exe% (deleted)}")"
  [[ "$exe" == redis-server* || "$exe" == redis-check-* ]] || return 1
  # a zombie is not running
  [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]
}

# Every redis-server of DIR as "pid cwd" lines: one whose working dir is a node dir of DIR. (One
# find reads the working dirs of all redis-servers: other stacks may run many of them.)
dir_processes() {
  local pid cwd proc paths=()
  for pid in $(pgrep -x redis-server 2>/dev/null || true); do paths+=("/proc/$pid/cwd"); done
  ((${#paths[@]})) || return 0
  while read -r proc cwd; do
    pid="${proc#/proc/}"
    [ "${cwd%/*}" = "$DIR" ] && [[ "${cwd##*/}" =~ ^($NODE_DIR_RE)$ ]] &&
      is_redis "$pid" && echo "$pid $cwd"
  done < <(find "${paths[@]}" -maxdepth 0 -printf '%h %l\n' 2>/dev/null || true)
  return 0
}

# Prints the pid of the node KIND of node dir D when it runs: its pid file, else a redis-server
# in D.
dir_pid() {
  local d="$1" kind="$2" pid
  if [ -f "$d/$kind.pid" ]; then
    pid="$(tr -dc '0-9' <"$d/$kind.pid")"
    if is_redis "$pid" && [ "$(readlink "/proc/$pid/cwd" 2>/dev/null)" = "$d" ]; then
      echo "$pid"; return 0
    fi
  fi
  pid="$(dir_processes | awk -v d="$d" '$2 == d { print $1; exit }')"
  [ -n "$pid" ] && echo "$pid"
}

cli() { local port="$1"; shift; timeout "$CLI_TIMEOUT" redis-cli -h 127.0.0.1 -p "$port" "$@" 2>/dev/null; }

# One field of INFO SECTION or CLUSTER INFO: info_field PORT "info replication" FIELD
info_field() {
  local port="$1" cmd fld="$3"
  read -ra cmd <<<"$2"
  cli "$port" "${cmd[@]}" | tr -d '\r' | sed -n "s/^$fld://p"
}

role() { cli "$1" role | head -n 1; }

# Shows the last N (default 20) lines of log FILE on stderr: tail_log FILE [N]
tail_log() {
  if [ -f "$1" ]; then
    echo "---- last lines of $1 ----" >&2
    tail -n "${2:-20}" "$1" >&2
    echo "----" >&2
  fi
}

# redis.conf values are quoted strings; escape backslashes and double quotes.
q() { local s="${1//\\/\\\\}"; printf '"%s"' "${s//\"/\\\"}"; }

# Prints the persistence settings of a data node's redis.conf (the same in every stack).
persistence_conf() {
  cat <<'EOF'
# Persistence: AOF only, fsync once a second; no RDB snapshots.
save ""
appendonly yes
appendfilename "appendonly.aof"
appenddirname "appendonlydir"
appendfsync everysec
aof-use-rdb-preamble yes
EOF
}

# Waits until PRED ARGS... succeeds; fails after START_TIMEOUT seconds.
wait_for() {
  local start_s=$SECONDS
  until "$@"; do
    ((SECONDS - start_s < START_TIMEOUT)) || return 1
    sleep 0.1
  done
}

# Launches the configured node KIND of node dir D (redis-server D/KIND.conf ARGS...); it
# daemonizes at once. Notes in D/.log-mark how long its log was, for wait_answering.
launch_node() {
  local d="$1" kind="$2" out; shift 2
  rm -f "$d/$kind.pid"
  : >>"$d/$kind.log"
  wc -l <"$d/$kind.log" >"$d/.log-mark"
  out="$(redis-server "$d/$kind.conf" "$@" 2>&1)" || { echo "$out" >&2; return 1; }
}

# Does the server on PORT answer as the process of node KIND of D (not someone else's)?
answers_as_node() {
  local pid
  pid="$(dir_pid "$1" "$2")" || return 1
  [ "$(info_field "$3" "info server" process_id)" = "$pid" ]
}

# Waits until the node KIND of D that launch_node launched answers on PORT. Returns 0 when it
# does, 2 when one of its ports was taken (says TAKEN, a message), 1 otherwise.
wait_answering() {
  local d="$1" kind="$2" port="$3" taken="$4" log="$1/$2.log" mark start_s=$SECONDS
  mark="$(cat "$d/.log-mark" 2>/dev/null || echo 0)"
  # Daemonized: the server forks and may die after that (a port taken meanwhile, a bad config);
  # it chdirs to its dir before forking, so once no process runs there, it has died.
  until answers_as_node "$d" "$kind" "$port"; do
    if ! dir_pid "$d" "$kind" >/dev/null; then
      sleep 0.1  # let the log be written out
      if tail -n +"$((mark + 1))" "$log" | grep -q 'Address already in use'; then
        info "$taken"
        return 2
      fi
      tail_log "$log"
      info "$kind on 127.0.0.1:$port exited during start-up"
      return 1
    fi
    if ((SECONDS - start_s >= START_TIMEOUT)); then
      tail_log "$log"
      info "$kind on 127.0.0.1:$port did not answer within ${START_TIMEOUT}s"
      return 1
    fi
    sleep 0.05
  done
}

# Sends SHUTDOWN to each "pid cwd" line of stdin, then waits; SIGKILL after STOP_TIMEOUT.
stop_group() {
  local pid cwd port pids=() i p alive
  while read -r pid cwd; do
    [ -n "$pid" ] || continue
    port="${cwd##*-}"
    if ! cli "$port" shutdown >/dev/null; then kill -TERM "$pid" 2>/dev/null || true; fi
    pids+=("$pid")
  done
  ((${#pids[@]})) || return 0
  for ((i = 0; i < STOP_TIMEOUT * 10; i++)); do
    alive=0
    for p in "${pids[@]}"; do is_redis "$p" && alive=1; done
    ((alive)) || return 0
    sleep 0.1
  done
  for p in "${pids[@]}"; do
    if is_redis "$p"; then
      info "pid $p did not exit within ${STOP_TIMEOUT}s; sending SIGKILL"
      kill -KILL "$p" 2>/dev/null || true
    fi
  done
  for ((i = 0; i < 50; i++)); do
    alive=0
    for p in "${pids[@]}"; do is_redis "$p" && alive=1; done
    ((alive)) || return 0
    sleep 0.1
  done
  die "a redis-server of $DIR survived SIGKILL"
}

# Stops the "pid cwd" lines of stdin (as dir_processes prints them) group by group: the
# Sentinels (node dirs sentinel-*) first, so that none starts a failover while the data nodes
# stop; then the replicas, so that no master waits for lagging replicas on shutdown; then the
# rest.
stop_nodes() {
  local pid cwd sentinels="" replicas="" others=""
  while read -r pid cwd; do
    case "${cwd##*/}" in
      sentinel-*) sentinels+="$pid $cwd"$'\n' ;;
      *) if [ "$(role "${cwd##*-}")" = slave ]; then replicas+="$pid $cwd"$'\n'; else others+="$pid $cwd"$'\n'; fi ;;
    esac
  done
  stop_group <<<"$sentinels"
  stop_group <<<"$replicas"
  stop_group <<<"$others"
}
