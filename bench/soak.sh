#!/bin/sh
# Soak: one sluice (2 workers, waf.lua on) under 30 minutes of mixed traffic
# (keepalive wrk, plain and TLS connection churn, slow senders and readers, a
# flapping backend server), sampled every 5 s: RSS, open descriptors, probe
# latency, errors. Run by `make soak`; not part of `make bench`. Knobs
# (environment): SOAK_SECONDS (1800), SOAK_SAMPLE, SOAK_FLAP; see
# bench/soak.py or docs/bench/soak.md.
#
# This wrapper makes sure the tools exist, builds sluice and the demo
# backend if they are missing, then hands over to bench/soak.py.
set -eu
cd "$(dirname "$0")/.."

. bench/deps.sh
EXTRA_TOOLS="openssl:openssl" bench_install_deps bench/soak.sh

bench_build sluice demo_backend

exec "$(py)" bench/soak.py "$@"
