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

# Debian's python3 (where apt puts matplotlib), not a pyenv/venv shim first in PATH.
py() { if [ -x /usr/bin/python3 ]; then echo /usr/bin/python3; else echo python3; fi; }

missing=""
command -v wrk >/dev/null 2>&1 || missing="$missing wrk"
command -v haproxy >/dev/null 2>&1 || missing="$missing haproxy"
command -v nginx >/dev/null 2>&1 || missing="$missing nginx"
command -v openssl >/dev/null 2>&1 || missing="$missing openssl"
command -v taskset >/dev/null 2>&1 || missing="$missing util-linux"
command -v "$(py)" >/dev/null 2>&1 || missing="$missing python3"
if ! dpkg -s python3-matplotlib >/dev/null 2>&1 ||
   ! "$(py)" -c 'import matplotlib' >/dev/null 2>&1; then
	missing="$missing python3-matplotlib"
fi
# BoringSSL's speed tool (bssl-tool), for the BoringSSL signing limit.
command -v bssl-tool >/dev/null 2>&1 || missing="$missing android-boringssl"
if [ -n "$missing" ]; then
	echo "bench/tls.sh: installing:$missing" >&2
	SUDO=
	[ "$(id -u)" -eq 0 ] || SUDO=sudo
	export DEBIAN_FRONTEND=noninteractive
	# shellcheck disable=SC2086
	$SUDO apt-get install -y $missing ||
		{ $SUDO apt-get update && $SUDO apt-get install -y $missing; } ||
		echo "bench/tls.sh: could not install everything; bench/tls.py says what is missing" >&2
fi

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
