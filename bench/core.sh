#!/bin/sh
# Core benchmark: plain HTTP/1.1 keepalive through ONE proxy worker,
# sluice vs HAProxy vs nginx, same backend, same wrk settings, alternating.
# Run by `make bench-core`. Knobs (environment): see bench/core.py or
# docs/benchmarking.md, section "core".
#
# This wrapper makes sure the tools exist (a fresh Debian machine has none of
# them), builds sluice and the demo backend if they are missing, then hands
# over to bench/core.py.
set -eu
cd "$(dirname "$0")/.."

# Debian's python3 (where apt puts matplotlib), not a pyenv/venv shim first in PATH.
py() { if [ -x /usr/bin/python3 ]; then echo /usr/bin/python3; else echo python3; fi; }

missing=""
command -v wrk >/dev/null 2>&1 || missing="$missing wrk"
command -v haproxy >/dev/null 2>&1 || missing="$missing haproxy"
command -v nginx >/dev/null 2>&1 || missing="$missing nginx"
command -v taskset >/dev/null 2>&1 || missing="$missing util-linux"
command -v "$(py)" >/dev/null 2>&1 || missing="$missing python3"
if ! dpkg -s python3-matplotlib >/dev/null 2>&1 ||
   ! "$(py)" -c 'import matplotlib' >/dev/null 2>&1; then
	missing="$missing python3-matplotlib"
fi
if [ -n "$missing" ]; then
	echo "bench/core.sh: installing:$missing" >&2
	SUDO=
	[ "$(id -u)" -eq 0 ] || SUDO=sudo
	export DEBIAN_FRONTEND=noninteractive
	# shellcheck disable=SC2086
	$SUDO apt-get install -y $missing ||
		{ $SUDO apt-get update && $SUDO apt-get install -y $missing; }
fi

BUILD=${BUILD:-build}
if [ ! -x "$BUILD/sluice" ] || [ ! -x "$BUILD/demo_backend" ]; then
	make "$BUILD/sluice" "$BUILD/demo_backend"
fi

exec "$(py)" bench/core.py "$@"
