#!/bin/sh
# TLS benchmark: TLS termination through ONE proxy worker, sluice (AWS-LC
# build, the default, and OpenSSL 3 build) vs HAProxy vs nginx on the same
# certificates: full and resumed handshakes, keepalive, memory per idle TLS
# connection, signing limits. Run by `make bench-tls`. Knobs (environment):
# see bench/tls.py or docs/bench/tls.md.
#
# This wrapper makes sure the tools exist (a fresh Debian machine has none of
# them), builds the sluice variants that are missing, then hands over to
# bench/tls.py.
set -eu
cd "$(dirname "$0")/.."

. bench/deps.sh
EXTRA_TOOLS="openssl:openssl" bench_install_deps bench/tls.sh

# The sluice builds: build/ holds the default TLS library (AWS-LC),
# build-openssl/ the OpenSSL 3 one (see the Makefile); an AWS-LC build left
# in build-awslc/ counts too. Build whichever is missing. `sluice -V` says
# "tls <library> ...".
have_lib() { # $1 = OpenSSL | AWS-LC
	for b in build build-openssl build-awslc; do
		[ -x "$b/sluice" ] && "$b/sluice" -V 2>/dev/null | grep -qi "^tls $1" && return 0
	done
	return 1
}
have_lib OpenSSL || make TLS=openssl all
# AWS-LC is built from the aws-lc-sys crate, which needs cargo: without it
# the run goes on and bench/tls.py reports sluice-awslc as left out.
have_lib AWS-LC || make TLS=awslc all || echo "bench/tls.sh: make TLS=awslc all failed: no sluice-awslc" >&2

# The Connection: close cases' client (bench/tlsload.c, on AWS-LC): without
# it the run falls back to wrk and says so.
[ "${CLIENT:-tlsload}" != tlsload ] ||
	env -u BUILD -u MAKEFLAGS -u MAKELEVEL make -s build/tlsload ||
	echo "$0: make build/tlsload failed: wrk drives every case" >&2

exec "$(py)" bench/tls.py "$@"
