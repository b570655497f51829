#!/usr/bin/env bash
# Partition-group leases of a delayq cluster, for operators. Needs only redis-cli and the
# config file (its redis and delay sections are read from the usual `key = value;` lines).
#
#   scripts/claims.sh [-c CONF] list [-v]                 one line per group: owner, lease
#                                                         left, alive or dead, pending, next due;
#                                                         -v adds a line per partition
#   scripts/claims.sh [-c CONF] release GROUP             ask the owner to hand GROUP back
#                                                         gracefully; wait until it has
#   scripts/claims.sh [-c CONF] force-release GROUP [--force]
#                                                         remove a dead owner's lease; refused
#                                                         while the owner is alive unless --force
# CONF defaults to conf/delayq.conf. Exit: 0 done, 1 error, 2 usage.
set -euo pipefail
ROOT="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd -P)"
me=claims
die() { echo "$me: error: $*" >&2; exit 1; }
usage() { sed -n '4,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

conf="$ROOT/conf/delayq.conf"
if [ "${1:-}" = "-c" ]; then
  (($# >= 2)) || usage
  conf="$2"; shift 2
fi
cmd="${1:-}"; [ -n "$cmd" ] || usage; shift
[ -r "$conf" ] || die "cannot read config file '$conf'"
command -v redis-cli >/dev/null || die "redis-cli is not installed (scripts/deps.sh installs it)"

# section.key=value for every scalar setting; lists are kept as their bracketed text.
settings=$(awk '
  { sub(/#.*/, ""); sub(/\/\/.*/, ""); text = text $0 " " }
  END {
    gsub(/\/\*([^*]|\*+[^*\/])*\*+\//, "", text)
    n = length(text); sect = ""; i = 1
    while (i <= n) {
      rest = substr(text, i)
      if (match(rest, /^[ \t]*[A-Za-z_][A-Za-z0-9_-]*[ \t]*[:=][ \t]*\{/)) {
        hdr = substr(rest, 1, RLENGTH); sub(/[ \t]*[:=].*/, "", hdr); gsub(/[ \t]/, "", hdr)
        sect = hdr; i += RLENGTH; continue
      }
      if (match(rest, /^[ \t]*\}[ \t]*;?/)) { sect = ""; i += RLENGTH; continue }
      if (match(rest, /^[ \t]*[A-Za-z_][A-Za-z0-9_-]*[ \t]*[:=][ \t]*/)) {
        key = substr(rest, 1, RLENGTH); sub(/[ \t]*[:=].*/, "", key); gsub(/[ \t]/, "", key)
        i += RLENGTH; rest = substr(text, i)
        if (match(rest, /^"([^"\\]|\\.)*"/)) { val = substr(rest, 2, RLENGTH - 2) }
        else if (match(rest, /^[(\[]/)) {
          depth = 0; j = 1
          do { c = substr(rest, j, 1); if (c ~ /[(\[]/) depth++; if (c ~ /[)\]]/) depth--; j++ } while (depth > 0 && j <= length(rest))
          val = substr(rest, 1, j - 1); RLENGTH = j - 1
        } else { match(rest, /^[^;,)]*/); val = substr(rest, 1, RLENGTH); gsub(/[ \t]+$/, "", val) }
        i += RLENGTH
        print (sect == "" ? "" : sect ".") key "=" val
        continue
      }
      i++
    }
  }' "$conf") || die "cannot parse '$conf'"
get() { printf '%s\n' "$settings" | sed -n "s/^$1=//p" | tail -n 1; }
# A secret into REPLY: the key's own value, or the content of its _file twin (as delayqd reads
# it: one trailing line end dropped).
secret() {
  local file
  REPLY=$(get "$1") file=$(get "$1_file")
  if [ -n "$file" ]; then
    [ -f "$file" ] && [ -r "$file" ] || die "$1_file: cannot read '$file'"
    REPLY=$(cat "$file"; printf x); REPLY=${REPLY%x}; REPLY=${REPLY%$'\n'}; REPLY=${REPLY%$'\r'}
  fi
}

host=$(get redis.host); host=${host:-127.0.0.1}
port=$(get redis.port); port=${port:-6379}
username=$(get redis.username)
secret redis.password; password=$REPLY
db=$(get redis.db); db=${db:-0}
prefix=$(get redis.prefix); prefix=${prefix-dq:}
partitions=$(get delay.partitions); partitions=${partitions:-8}
ttl=$(get delay.claim_ttl_ms); ttl=${ttl:-10000}
groups_text=$(get delay.partition_groups)
[[ "$port" =~ ^[0-9]+$ && "$partitions" =~ ^[0-9]+$ && "$ttl" =~ ^[0-9]+$ ]] ||
  die "$conf: redis.port, delay.partitions and delay.claim_ttl_ms must be numbers"

# One line per group: its partition numbers, space-separated.
if [ -n "$groups_text" ]; then
  group_lines=$(printf '%s' "$groups_text" | tr -d '( )' | sed 's/\],\[/\n/g; s/[][]//g' | tr ',' ' ')
else
  group_lines=$(seq -s ' ' 0 $((partitions - 1)))
fi
ngroups=$(printf '%s\n' "$group_lines" | grep -c .)

# With redis.sentinels, the master is the one the first Sentinel that answers names.
sentinels=$(get redis.sentinels | tr -d '[]" ' | tr ',' ' ')
if [ -n "$sentinels" ]; then
  name=$(get redis.master_name); secret redis.sentinel_password; spass=$REPLY; found=
  for s in $sentinels; do
    sargs=(-h "${s%:*}" -p "${s##*:}" --raw)
    [ -z "$spass" ] || sargs+=(-a "$spass" --no-auth-warning)
    addr=$(timeout 2 redis-cli "${sargs[@]}" SENTINEL get-master-addr-by-name "$name" 2>/dev/null) || continue
    [ "$(printf '%s\n' "$addr" | grep -c .)" = 2 ] || continue
    host=$(printf '%s\n' "$addr" | sed -n 1p); port=$(printf '%s\n' "$addr" | sed -n 2p); found=1
    break
  done
  [ -n "$found" ] || die "no Sentinel of redis.sentinels ($sentinels) names master '$name'"
fi

rcli() {
  local args=(-h "$host" -p "$port" -n "$db" --raw "${follow[@]}")
  [ -z "$username" ] || args+=(--user "$username")
  [ -z "$password" ] || args+=(-a "$password" --no-auth-warning)
  redis-cli "${args[@]}" "$@"
}

# With redis.cluster, the first seed node that answers; redis-cli -c follows its redirections
# (the keys read here share the hash tag {ctl}: one slot, one master).
follow=()
seeds=$(get redis.cluster | tr -d '[]" ' | tr ',' ' ')
if [ -n "$seeds" ]; then
  follow=(-c); found=
  for s in $seeds; do
    host=${s%:*}; port=${s##*:}
    [ "$(rcli PING 2>/dev/null)" = PONG ] && { found=1; break; }
  done
  [ -n "$found" ] || die "no node of redis.cluster ($seeds) answers"
fi
pong=$(rcli PING 2>&1) || true
[ "$pong" = PONG ] || die "Redis at $host:$port does not answer: $pong"

check_group() {
  [[ "${1:-}" =~ ^[0-9]+$ ]] && (($1 < ngroups)) || die "unknown group '${1:-}' (groups are 0 to $((ngroups - 1)) in $conf)"
}
owner_of() { rcli GET "${prefix}{ctl}:claim:$1"; }
alive() {   # the owner's heartbeat is in the live set and not past
  local score now
  score=$(rcli ZSCORE "${prefix}{ctl}:instances" "$1")
  now=$(($(date +%s%3N)))
  [ -n "$score" ] && (( ${score%.*} > now ))
}

# The status an owner publishes for group $1, one line per partition:
# "<topic>/<partition> <committed> <end> <head due ms>".
status_of() {
  rcli HGETALL "${prefix}{ctl}:status:$1" | paste - - | while read -r field v1 v2 v3; do
    case "$field" in ""|owner|updated_ms) continue ;; esac
    printf '%s %s %s %s\n' "$field" "$v1" "$v2" "$v3"
  done
}

# "HH:MM:SSZ" of epoch ms $1, or "-" for a negative one.
clock_of() { if (($1 >= 0)); then date -u -d "@$(($1 / 1000))" +%H:%M:%SZ; else echo -; fi; }

list() {
  local verbose=${1:-} g=0 owner left state rows pending due
  printf '%-5s %-12s %-44s %-8s %-5s %-8s %s\n' GROUP PARTITIONS OWNER LEASE STATE PENDING NEXT_DUE
  while read -r parts; do
    owner=$(owner_of $g); left=$(rcli PTTL "${prefix}{ctl}:claim:$g")
    if [ -z "$owner" ]; then state=free; owner=-; left=-
    else
      alive "$owner" && state=alive || state=dead
      left="$((left / 1000)).$(((left % 1000) / 100))s"
    fi
    rows=$(status_of $g)
    # pending: messages in the group's delay-topic partitions past its committed offsets (due
    # or not); next due: the earliest head the owner holds
    read -r pending due < <(printf '%s\n' "$rows" | awk '
      NF == 4 { n++; if ($2 >= 0 && $3 >= $2) pending += $3 - $2; if ($4 >= 0 && (due == "" || $4 < due)) due = $4 }
      END { print (n ? pending + 0 : "-"), (due == "" ? -1 : due) }')
    printf '%-5s %-12s %-44s %-8s %-5s %-8s %s\n' "$g" "${parts// /,}" "$owner" "$left" "$state" \
      "${pending:--}" "$(clock_of "${due:--1}")"
    if [ "$verbose" = -v ]; then
      printf '%s\n' "$rows" | while read -r field v1 v2 v3; do
        [ -n "$field" ] || continue
        local ppending=-; ((v1 >= 0 && v2 >= v1)) && ppending=$((v2 - v1))
        printf '      %-36s committed=%-9s end=%-9s pending=%-7s head_due=%s\n' "$field" "$v1" "$v2" "$ppending" \
          "$(clock_of "$v3")"
      done
    fi
    g=$((g + 1))
  done <<<"$group_lines"
}

release() {
  local g=$1 owner deadline
  check_group "$g"
  owner=$(owner_of "$g")
  [ -n "$owner" ] || { echo "group $g is free"; return 0; }
  rcli SET "${prefix}{ctl}:release:$g" "claims.sh" EX 60 >/dev/null
  echo "asked $owner to hand back group $g; waiting..."
  deadline=$(( $(date +%s) + ttl / 1000 * 3 + 10 ))
  while [ "$(owner_of "$g")" = "$owner" ]; do
    (( $(date +%s) < deadline )) || die "group $g is still held by $owner"
    sleep 0.2
  done
  echo "group $g handed back by $owner (now: $(owner_of "$g" | sed 's/^$/free/'))"
}

force_release() {
  local g=$1 force=${2:-} owner
  check_group "$g"
  owner=$(owner_of "$g")
  [ -n "$owner" ] || { echo "group $g is free"; return 0; }
  if alive "$owner" && [ "$force" != --force ]; then
    die "owner $owner of group $g is alive; use 'release $g', or --force to remove its lease anyway"
  fi
  # Compare-and-delete: only the lease seen above is removed.
  rcli EVAL "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0" \
    1 "${prefix}{ctl}:claim:$g" "$owner" >/dev/null
  echo "removed the lease of $owner on group $g"
}

case "$cmd" in
  list) (($# == 0)) || [ "$*" = -v ] || usage; list "${1:-}" ;;
  release) (($# == 1)) || usage; release "$1" ;;
  force-release) (($# >= 1 && $# <= 2)) || usage; force_release "$1" "${2:-}" ;;
  -h|--help|help) usage ;;
  *) usage ;;
esac
