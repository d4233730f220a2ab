#!/bin/sh
# TLS benchmark: TLS termination through ONE proxy worker, sluice (OpenSSL 3
# build and BoringSSL build) vs HAProxy vs nginx on the same certificates:
# full and resumed handshakes, keepalive, memory per idle TLS connection,
# signing limits. Run by `make bench-tls`. Knobs (environment): see
# bench/tls.py or docs/benchmarking.md, section "tls".
#
# This wrapper makes sure the tools exist (a fresh Debian machine has none of
# them), builds both sluice variants if they are missing, then hands over to
# bench/tls.py.
set -eu
cd "$(dirname "$0")/.."

. bench/deps.sh
EXTRA_TOOLS="openssl:openssl bssl-tool:android-boringssl" bench_install_deps bench/tls.sh

# Both sluice builds: build/ holds the default TLS library, build-<other>/ the
# other one (see the Makefile). Build whichever is missing.
have_lib() { # $1 = OpenSSL | BoringSSL
	for b in build build-openssl build-boringssl; do
		[ -x "$b/sluice" ] && "$b/sluice" -V 2>/dev/null | grep -q "^TLS $1" && return 0
	done
	return 1
}
have_lib OpenSSL || make TLS=openssl all
have_lib BoringSSL || make TLS=boringssl all

exec "$(py)" bench/tls.py "$@"
