#!/usr/bin/env bash
# Installs every Debian package that the build, the tests and the local stack need, and the
# test tools from PyPI (pytest, pytest-xdist, schemathesis: test/requirements.txt) into .venv/.
# Idempotent: when everything is present it only checks, and returns in well under a second.
set -euo pipefail

pkgs=(
  build-essential pkg-config
  librdkafka-dev libhiredis-dev libmsgpack-dev libjansson-dev libmicrohttpd-dev libconfig-dev
  libgnutls28-dev               # HTTPS: the certificate callback (libmicrohttpd's TLS library)
  openssl                       # tests make their own CA and certificates
  stunnel4                      # Redis over TLS: hiredis 0.14 has none (docs/operations.md)
  libcurl4-gnutls-dev           # callbacks: the HTTP client (GnuTLS, as libmicrohttpd); the tests drive the API with it too
  redis-server redis-tools      # local Redis and redis-cli (tests, claims script)
  kcat                          # a real Kafka client for tests and the README examples
  maven default-jre-headless    # fetches and runs the pinned Apache Kafka broker
  tzdata                        # schedules: the IANA time zones (TZif files) delayqd reads itself
  chromium chromium-driver python3-selenium   # the console's browser test (test_console.py)
  python3-yaml                  # the build turns docs/openapi.yaml into the JSON delayqd serves
  faketime                      # tests run an instance whose clock is off (libfaketime)
  python3-venv                  # .venv/: the test tools, pinned (Debian's pytest is too old)
  curl procps iproute2 python3
)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
# default-jre-headless may be absent where a JDK 17 was installed another way; java is what matters.
if command -v java >/dev/null 2>&1; then
  missing=("${missing[@]/default-jre-headless/}")
fi
missing=($(printf '%s\n' "${missing[@]}" | grep -v '^$' || true))
if ((${#missing[@]} > 0)); then
  echo "deps: installing ${missing[*]}" >&2
  sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The test tools, exactly the pinned versions, in a venv of Debian's python3 that also sees
# Debian's packages (python3-selenium, python3-yaml). Made again when the pins change.
venv=.venv
req=test/requirements.txt
cd "$(dirname "$0")/.."
if ! cmp -s "$req" "$venv/.requirements" 2>/dev/null; then
  echo "deps: installing $(grep -c '==' "$req") test packages from PyPI into $venv" >&2
  rm -rf "$venv"
  /usr/bin/python3 -m venv --system-site-packages "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check --only-binary=:all: -r "$req"
  cp "$req" "$venv/.requirements"
fi
