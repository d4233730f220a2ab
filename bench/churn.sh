#!/bin/sh
# Churn benchmark: connection churn with TLS offload — Connection: close on
# every request (a new TCP connection and a full TLS handshake each), TLS 1.2
# and 1.3, ECDSA P-256 vs RSA-2048, PROXY v2 to the backend, 1 and 2 workers,
# and an open-loop ramp of the connection rate to the knee; each sluice build
# (AWS-LC, the default, and OpenSSL 3) vs HAProxy vs nginx. Run by
# `make bench-churn`.
# Knobs (environment): see bench/churn.py or docs/bench/churn.md.
#
# This wrapper makes sure the tools exist (a fresh Debian machine has none of
# them), builds the sluice variants the targets need when they are missing,
# then hands over to bench/churn.py.
set -eu
cd "$(dirname "$0")/.."

. bench/deps.sh
EXTRA_TOOLS="openssl:openssl h2load:nghttp2-client" bench_install_deps bench/churn.sh

BUILD=${BUILD:-build}

# Is target $1 in TARGETS (bench/churn.py's default when unset) or RAMP_TARGETS?
wants() {
	case ",${TARGETS:-sluice-awslc,sluice-openssl,haproxy,nginx},${RAMP_TARGETS:-}," in
	*",$1,"*) return 0 ;;
	esac
	return 1
}

# Is there a sluice built with $1 (OpenSSL | AWS-LC) where
# bench/churn.py looks? `sluice -V` says "tls <library> ...".
have_lib() {
	for b in ${SLUICE:-} "$BUILD/sluice" build/sluice build-openssl/sluice build-awslc/sluice; do
		[ -x "$b" ] && "$b" -V 2>/dev/null | grep -qi "^tls $1" && return 0
	done
	return 1
}

# Target "sluice" is one binary, SLUICE or $BUILD/sluice.
if wants sluice && [ -z "${SLUICE:-}" ]; then
	BUILD=$BUILD bench_build sluice
fi
# Each sluice-<lib> target: its own build, made here when none is found. The
# Makefile picks the build directory from TLS (build/ for the default library,
# AWS-LC; build-openssl/ for OpenSSL), so BUILD and a parent make's variables
# are kept away from it. AWS-LC is built from the aws-lc-sys crate, which needs
# cargo: without it the run goes on, and the report says sluice-awslc was
# left out.
for v in awslc:AWS-LC:SLUICE_AWSLC openssl:OpenSSL:SLUICE_OPENSSL; do
	lib=${v%%:*}
	rest=${v#*:}
	name=${rest%%:*}
	var=${rest#*:}
	wants "sluice-$lib" || continue
	eval "given=\${$var:-}"
	[ -z "$given" ] || continue
	have_lib "$name" && continue
	echo "bench/churn.sh: no sluice built with $name: make TLS=$lib all" >&2
	env -u BUILD -u MAKEFLAGS -u MAKELEVEL make TLS="$lib" all ||
		echo "bench/churn.sh: make TLS=$lib all failed: sluice-$lib is left out of the run" >&2
done

# The cases' and the ramp's client (bench/tlsload.c, on AWS-LC): without it
# the run falls back to wrk and h2load and says so.
[ "${CLIENT:-tlsload}" != tlsload ] && [ "${RAMP_CLIENT:-tlsload}" != tlsload ] ||
	env -u BUILD -u MAKEFLAGS -u MAKELEVEL make -s build/tlsload ||
	echo "$0: make build/tlsload failed: wrk and h2load drive the run" >&2

export BUILD
exec "$(py)" bench/churn.py "$@"
