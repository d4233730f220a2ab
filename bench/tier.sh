#!/bin/sh
# Tier benchmark (issue 23): 1 vs 2 sluice instances (one worker each, on
# 127.0.0.2 and 127.0.0.3) behind HAProxy in TCP mode with PROXY v2, TLS
# churn, TLS resumption with a shared ticket key, and plain keepalive; the
# CPU each instance spends per request with one and with two instances; and
# the cost of a rate limit per request (none, store: local, store: redis).
# Run by `make bench-tier`. Knobs (environment): see bench/tier.py or
# docs/bench/tier.md.
#
# This wrapper makes sure the tools exist (a fresh Debian machine has none of
# them: wrk, haproxy, openssl, redis-server), builds sluice and the demo
# backend if they are missing, then hands over to bench/tier.py.
set -eu
cd "$(dirname "$0")/.."

. bench/deps.sh
EXTRA_TOOLS="openssl:openssl redis-server:redis-server" bench_install_deps bench/tier.sh

BUILD=${BUILD:-build}; export BUILD
if [ -n "${SLUICE:-}" ]; then
	bench_build demo_backend     # SLUICE=path: that binary, only the origin to build
else
	bench_build sluice demo_backend
fi

exec "$(py)" bench/tier.py "$@"
