#!/bin/sh
# Persistence and routing cost: instructions per keepalive request counted by
# valgrind's callgrind, for N content routes and each session persistence type
# in sluice and HAProxy's equivalents, in the same run; converted to CPU µs
# with a factor measured natively in the same run. Run by
# `make bench-persist`. Knobs (environment): see bench/persist.py or
# docs/bench/persist.md.
#
# This wrapper makes sure the tools exist (valgrind besides the usual ones),
# builds sluice and the demo backend if they are missing, then hands over to
# bench/persist.py.
set -eu
cd "$(dirname "$0")/.."

. bench/deps.sh
EXTRA_TOOLS="valgrind:valgrind" bench_install_deps bench/persist.sh

bench_build sluice demo_backend

exec "$(py)" bench/persist.py "$@"
