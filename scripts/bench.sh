#!/usr/bin/env bash
# make bench: installs what the benchmark needs besides the project's own deps (wrk, the load
# generator; perf, for the profile of the adds), builds, and runs scripts/bench.py, which starts
# its own Redis, Kafka and delayqd.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
missing=()
command -v wrk >/dev/null 2>&1 || missing+=(wrk)
command -v perf >/dev/null 2>&1 || missing+=(linux-perf)
if ((${#missing[@]})); then
  echo "bench: installing ${missing[*]}" >&2
  sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
make -s all
exec python3 -u scripts/bench.py "$@"
