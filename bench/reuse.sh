#!/bin/sh
# Reuse benchmark: keepalive req/s and backend connection reuse with
# header-only identity (X-Forwarded-For) vs PROXY v2 identity, 1,000 clients
# from distinct 127.x source addresses, sluice vs HAProxy send-proxy-v2, one
# proxy worker. Run by `make bench-reuse`. Knobs (environment): see
# bench/reuse.py or docs/bench/reuse.md.
#
# This wrapper makes sure the tools exist (a fresh Debian machine has none of
# them), builds sluice and the srcload client if they are missing, raises the
# open-files limit, then hands over to bench/reuse.py.
set -eu
cd "$(dirname "$0")/.."

. bench/deps.sh
bench_install_deps bench/reuse.sh

bench_build sluice srcload

# 1,000 client connections, as many backend connections, and the proxy's and
# the backend's own: raise the open-files limit (to the hard limit if 65536
# is above it).
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

exec "$(py)" bench/reuse.py "$@"
