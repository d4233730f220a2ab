#!/bin/sh
# Inspection cost: the WAF-latency experiment (siege, 250 users, random ~500-byte
# User-Agent) and the inspection-percentiles experiment (fortio at fixed QPS for
# 10/70/125/250 connections), sluice's Lua hook (allow_all.lua, waf.lua) vs the
# same scripts in HAProxy's Lua (bench/haproxy/sluice_hook.lua). Run by
# `make bench-inspection`. Knobs (environment): see bench/inspection.py or
# docs/bench/inspection.md.
set -eu
cd "$(dirname "$0")/.."

. bench/deps.sh
EXTRA_TOOLS="siege:siege ${EXTRA_TOOLS:-}" bench_install_deps bench/inspection.sh
FORTIO=$(bench_fortio bench/inspection.sh)
export FORTIO

bench_build sluice

exec "$(py)" bench/inspection.py "$@"
