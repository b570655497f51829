#!/usr/bin/env bash
# Runs the unit tests, then the integration tests with pytest in TEST_WORKERS processes (4), each
# with its own Redis and Kafka on free ports in a temp dir, stopped on exit. Ends with one line:
# "N passed, N failed", and ", N skipped" when a test could not judge the build (resident memory
# under the sanitizers). JUnit XML of the integration tests: $BUILD/integration.xml.
# Extra arguments go to pytest; several -k are joined with "or":
#   scripts/test.sh -k test_delivery -k test_api       scripts/test.sh test/integration/test_api.py
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}

count() {   # "<label>: N passed, M failed" -> "N M"
  grep -oE '[0-9]+ passed, [0-9]+ failed' | tail -n 1 | awk '{ print $1, $3 }'
}

unit_out=$("$BUILD/unit" 2>&1); unit_rc=$?
printf '%s\n' "$unit_out" | grep -v '^ok ' || true
read -r up uf <<<"$(printf '%s\n' "$unit_out" | count)"
up=${up:-0}; uf=${uf:-1}
((unit_rc == 0 || uf > 0)) || uf=1

args=() k=()
while (($#)); do
  if [ "$1" = -k ] && (($# > 1)); then k+=("$2"); shift 2; else args+=("$1"); shift; fi
done
if ((${#k[@]})); then
  expr=${k[0]}
  for e in "${k[@]:1}"; do expr+=" or $e"; done
  args+=(-k "$expr")
fi
workers=${TEST_WORKERS:-4}
((workers > 1)) && args+=(-n "$workers" --dist worksteal)
DELAYQD="$PWD/$BUILD/delayqd" .venv/bin/python -m pytest test/integration -v --junitxml="$BUILD/integration.xml" \
  "${args[@]}" | tee "${TMPDIR:-/tmp}/delayq-it.$$"
it_rc=${PIPESTATUS[0]}
read -r ip if_ <<<"$(count <"${TMPDIR:-/tmp}/delayq-it.$$")"
skipped=$(grep -oE '[0-9]+ skipped' "${TMPDIR:-/tmp}/delayq-it.$$" | tail -n 1 | awk '{ print $1 }')
rm -f "${TMPDIR:-/tmp}/delayq-it.$$"
ip=${ip:-0}; if_=${if_:-1}
((it_rc == 0 || if_ > 0)) || if_=1

passed=$((up + ip)); failed=$((uf + if_))
echo "$passed passed, $failed failed${skipped:+, $skipped skipped}"
((failed == 0))
