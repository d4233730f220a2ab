#!/bin/sh
# HTTP/2 benchmark (issue 20): h2 over TLS to one proxy worker, HTTP/1.1
# keepalive to the origin, sluice vs HAProxy vs nginx: h2load at 100
# connections x 10 streams and 1,000 x 1 (req/s, CPU µs per request, p50/p99,
# backend connections), and memory per idle h2 connection. Run by
# `make bench-h2`. Knobs (environment): see bench/h2.py or docs/bench/h2.md.
#
# This wrapper makes sure the tools exist (h2load from nghttp2-client, the
# Python h2 library for the h2 check and the idle-connection holder), builds
# sluice if it is missing, raises the open-files limit (1,000 h2load
# connections, as many on the proxy's client side and up to as many to the
# origin), then hands over to bench/h2.py.
set -eu
cd "$(dirname "$0")/.."

. bench/deps.sh
EXTRA_TOOLS="h2load:nghttp2-client openssl:openssl" bench_install_deps bench/h2.sh
if ! "$(py)" -c 'import h2' >/dev/null 2>&1; then
	echo "bench/h2.sh: installing: python3-h2" >&2
	SUDO=; [ "$(id -u)" -eq 0 ] || SUDO=sudo
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y python3-h2 >&2 ||
		echo "bench/h2.sh: could not install python3-h2" >&2
fi

BUILD=${BUILD:-build}; export BUILD
[ -n "${SLUICE:-}" ] || bench_build sluice   # SLUICE=path: that binary, nothing to build

# Every process the script starts inherits this; bench/h2.py says what it
# needs if even the hard limit is too low.
hard=$(ulimit -Hn)
if [ "$hard" = unlimited ] || [ "$hard" -gt 65536 ]; then hard=65536; fi
[ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -ge "$hard" ] || ulimit -n "$hard" || true

exec "$(py)" bench/h2.py "$@"
