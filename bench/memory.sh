#!/bin/sh
# Memory benchmark: RSS/PSS per open connection (idle plain, idle TLS,
# active) up to 10,000 connections, and RSS vs request rate with the WAF on,
# sluice vs HAProxy vs nginx, one worker each. Run by `make bench-memory`.
# Knobs (environment): see bench/memory.py or docs/bench/memory.md.
#
# This wrapper makes sure the tools exist, builds sluice and the connection
# holder (bench/connhold.c) if they are missing or stale, finds fortio, then
# hands over to bench/memory.py.
set -eu
cd "$(dirname "$0")/.."

. bench/deps.sh
EXTRA_TOOLS="openssl:openssl cc:gcc" bench_install_deps bench/memory.sh
# connhold links OpenSSL 3 (its headers come with libssl-dev).
if [ ! -f /usr/include/openssl/ssl.h ]; then
	SUDO=; [ "$(id -u)" -eq 0 ] || SUDO=sudo
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y libssl-dev || true
fi

BUILD=${BUILD:-build}; export BUILD
[ -n "${SLUICE:-}" ] || bench_build sluice   # SLUICE=path: that binary, nothing to build
bench_cc connhold

case ",${PARTS:-conns,waf}," in
*,waf,*) FORTIO=$(bench_fortio bench/memory.sh) || FORTIO=; export FORTIO ;;
esac

exec "$(py)" bench/memory.py "$@"
