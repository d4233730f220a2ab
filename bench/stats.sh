#!/bin/sh
# Stats cost: sluice with its statistics vs the same commit built with
# STATS=0 (stats calls compiled out), alternating, keepalive and
# Connection: close, /metrics scraped every second. Run by `make bench-stats`.
# Knobs (environment): see bench/stats.py or docs/benchmarking.md, "stats".
#
# This wrapper makes sure the tools exist, builds both binaries if they are
# missing, then hands over to bench/stats.py.
set -eu
cd "$(dirname "$0")/.."

. bench/deps.sh
bench_install_deps bench/stats.sh

BUILD=${BUILD:-build}
NOSTATS_BUILD=${NOSTATS_BUILD:-build-nostats}
export BUILD NOSTATS_BUILD
[ -x "$BUILD/sluice" ] || make BUILD="$BUILD" "$BUILD/sluice"
[ -x "$NOSTATS_BUILD/sluice" ] || make STATS=0 all

exec "$(py)" bench/stats.py "$@"
