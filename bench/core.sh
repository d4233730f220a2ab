#!/bin/sh
# Core benchmark: plain HTTP/1.1 keepalive through ONE proxy worker,
# sluice vs HAProxy vs nginx, same backend, same wrk settings, alternating
# (BASELINE=/path/to/another/sluice adds that binary as sluice-base).
# Run by `make bench-core`. Knobs (environment): see bench/core.py or
# docs/benchmarking.md, section "core".
#
# This wrapper makes sure the tools exist (a fresh Debian machine has none of
# them), builds sluice and the demo backend if they are missing, then hands
# over to bench/core.py.
set -eu
cd "$(dirname "$0")/.."

. bench/deps.sh
bench_install_deps bench/core.sh

BUILD=${BUILD:-build}
if [ -n "${SLUICE:-}" ]; then
	# SLUICE=path names the binary to measure: only the demo backend is built here
	[ -x "$BUILD/demo_backend" ] || make "$BUILD/demo_backend"
elif [ ! -x "$BUILD/sluice" ] || [ ! -x "$BUILD/demo_backend" ]; then
	make "$BUILD/sluice" "$BUILD/demo_backend"
fi

exec "$(py)" bench/core.py "$@"
