#!/bin/sh
# Churn benchmark: connection churn with TLS offload — Connection: close on
# every request (a new TCP connection and a full TLS handshake each), TLS 1.2
# and 1.3, ECDSA P-256 vs RSA-2048, PROXY v2 to the backend, 1 and 2 workers;
# sluice vs HAProxy vs nginx. Run by `make bench-churn`. Knobs (environment):
# see bench/churn.py or docs/bench/churn.md.
#
# This wrapper makes sure the tools exist (a fresh Debian machine has none of
# them), builds sluice if it is missing, then hands over to bench/churn.py.
set -eu
cd "$(dirname "$0")/.."

. bench/deps.sh
EXTRA_TOOLS="openssl:openssl" bench_install_deps bench/churn.sh

BUILD=${BUILD:-build}; export BUILD
[ -n "${SLUICE:-}" ] || bench_build sluice   # SLUICE=path: that binary, nothing to build

exec "$(py)" bench/churn.py "$@"
