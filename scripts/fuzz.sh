#!/usr/bin/env bash
# Runs the libFuzzer targets of test/fuzz: replays every regression and the seed corpus, then
# fuzzes each target for FUZZ_SECONDS (default 300). Installs clang, its fuzzer runtime and the
# libraries of the pure modules when missing; when all is there it only checks, in about a second.
#   bash scripts/fuzz.sh                   every target, 5 minutes each
#   FUZZ_SECONDS=30 bash scripts/fuzz.sh   a quick pass
#   FUZZ_JOBS=2 bash scripts/fuzz.sh       two targets at a time
set -euo pipefail
cd "$(dirname "$0")/.."

# The pure modules need only these; the network libraries and the local stack do not matter here.
pkgs=(make pkg-config clang libjansson-dev libmsgpack-dev libconfig-dev)

# The fuzzer runtime (libclang_rt.fuzzer) is only a Recommends of clang on Debian, so a
# --no-install-recommends install has clang without it: check by linking a fuzz target.
fuzzer_links() {
  local tmp ok=1
  command -v clang >/dev/null 2>&1 || return 1
  tmp=$(mktemp -d)
  printf '%s\n' '#include <stddef.h>' '#include <stdint.h>' \
    'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);' \
    'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }' \
    > "$tmp/t.c"
  if clang -fsanitize=fuzzer,address,undefined -o "$tmp/t" "$tmp/t.c" >/dev/null 2>&1; then
    ok=0
  fi
  rm -rf "$tmp"
  return $ok
}

missing_pkgs() {
  local p
  for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || echo "$p"
  done
}

install() {
  echo "fuzz: installing $*" >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

sudo=""
[ "$(id -u)" = 0 ] || sudo=sudo
missing=$(missing_pkgs)
if [ -n "$missing" ] || ! fuzzer_links; then
  $sudo apt-get update -qq
  # shellcheck disable=SC2086 # one package per word
  [ -z "$missing" ] || install $missing
  fuzzer_links || install "libclang-rt-$(clang -dumpversion | cut -d. -f1)-dev"
  fuzzer_links || { echo "fuzz: clang cannot link a libFuzzer target" >&2; exit 1; }
fi

# -k: a crash in one target does not keep the others from running.
exec make -k -j"${FUZZ_JOBS:-1}" -f Makefile fuzz-run FUZZ_SECONDS="${FUZZ_SECONDS:-300}"
