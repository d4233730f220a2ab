#!/bin/sh
# Inspection cost: the Lua hook off, allow_all.lua and waf.lua, one worker,
# wrk with a random ~500-byte User-Agent. Run by `make bench-inspection`.
# Knobs (environment): see bench/inspection.py or docs/benchmarking.md.
set -eu
cd "$(dirname "$0")/.."

. bench/deps.sh
bench_install_deps bench/inspection.sh

BUILD=${BUILD:-build}
export BUILD
[ -x "$BUILD/sluice" ] || make BUILD="$BUILD" "$BUILD/sluice"

exec "$(py)" bench/inspection.py "$@"
