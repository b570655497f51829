#!/usr/bin/env bash
# make bench: installs what the benchmark needs (wrk besides the project's own deps), builds,
# and runs scripts/bench.py, which starts its own Redis, Kafka and delayqd.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
if ! command -v wrk >/dev/null 2>&1; then
  echo "bench: installing wrk" >&2
  sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends wrk >/dev/null
fi
make -s all
exec python3 -u scripts/bench.py "$@"
