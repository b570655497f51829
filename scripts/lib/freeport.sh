#!/usr/bin/env bash
# Free TCP ports on 127.0.0.1.
#
#   scripts/lib/freeport.sh [N]      prints N (default 1) distinct free ports, one per line
#   . scripts/lib/freeport.sh        defines the shell functions below:
#       freeport [N]                 same as running the script
#       port_in_use PORT             exit 0 if something listens on 127.0.0.1:PORT (or it cannot be bound)
#
# The ports come from the kernel (bind to port 0); all N sockets are held open together,
# so they are distinct. Like any free-port helper this is racy: bind soon after.

_freeport_python() {
  if [ -x /usr/bin/python3 ]; then echo /usr/bin/python3
  elif command -v python3 >/dev/null 2>&1; then command -v python3
  else return 1
  fi
}

freeport() {
  local n="${1:-1}" py
  case "$n" in ''|*[!0-9]*) echo "freeport: count must be a number, got '$n'" >&2; return 2 ;; esac
  if py="$(_freeport_python)"; then
    "$py" - "$n" <<'PY'
import socket, sys
n = int(sys.argv[1])
socks = []
for _ in range(n):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print("\n".join(str(s.getsockname()[1]) for s in socks))
for s in socks:
    s.close()
PY
    return
  fi
  # Fallback without python: random ports in the ephemeral range nobody answers on.
  local found=() p i
  for ((i = 0; i < 1000 && ${#found[@]} < n; i++)); do
    p=$((20000 + RANDOM % 30000))
    [[ " ${found[*]} " == *" $p "* ]] && continue
    port_in_use "$p" || found+=("$p")
  done
  ((${#found[@]} == n)) || { echo "freeport: no free port found" >&2; return 1; }
  printf '%s\n' "${found[@]}"
}

port_in_use() {
  local p="$1" py
  if py="$(_freeport_python)"; then
    # SO_REUSEADDR like redis and the JVM set it: only a listener (not TIME_WAIT) counts as in use.
    "$py" - "$p" <<'PY' && return 1 || return 0
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind(("127.0.0.1", int(sys.argv[1])))
except OSError:
    sys.exit(1)
PY
  fi
  (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  freeport "${1:-1}"
fi
