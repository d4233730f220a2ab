#!/bin/sh
# Throughput benchmark: keepalive req/s, latency, proxy CPU per request and
# MB/s for 100 B, 20 KiB and 1 MiB responses, plain and TLS, through one
# proxy worker: sluice vs HAProxy vs nginx vs direct. Run by
# `make bench-throughput`. Knobs (environment): see bench/throughput.py or
# docs/bench/throughput.md.
#
# This wrapper makes sure the tools exist (a fresh Debian machine has none of
# them), builds sluice if it is missing, then hands over to bench/throughput.py.
set -eu
cd "$(dirname "$0")/.."

. bench/deps.sh
EXTRA_TOOLS="openssl:openssl" bench_install_deps bench/throughput.sh

bench_build sluice

exec "$(py)" bench/throughput.py "$@"
