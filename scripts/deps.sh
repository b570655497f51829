#!/usr/bin/env bash
# Installs every Debian package that the build, the tests and the local stack need.
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
((${#missing[@]} == 0)) && exit 0

echo "deps: installing ${missing[*]}" >&2
sudo=""
[ "$(id -u)" = 0 ] || sudo=sudo
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
