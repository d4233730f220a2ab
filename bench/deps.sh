# Sourced by the bench/*.sh wrappers: the tools every scenario needs, from
# Debian's packages when missing (a fresh machine has none of them).
# Callers may set EXTRA_TOOLS="cmd:package ..." for their own needs.

# Debian's python3 (where apt puts matplotlib), not a pyenv/venv shim first in PATH.
py() { if [ -x /usr/bin/python3 ]; then echo /usr/bin/python3; else echo python3; fi; }

bench_install_deps() { # $1 = caller name, for messages
	missing=""
	for pair in wrk:wrk haproxy:haproxy nginx:nginx taskset:util-linux ${EXTRA_TOOLS:-}; do
		command -v "${pair%%:*}" >/dev/null 2>&1 || missing="$missing ${pair#*:}"
	done
	command -v "$(py)" >/dev/null 2>&1 || missing="$missing python3"
	if ! dpkg -s python3-matplotlib >/dev/null 2>&1 ||
	   ! "$(py)" -c 'import matplotlib' >/dev/null 2>&1; then
		missing="$missing python3-matplotlib"
	fi
	[ -n "$missing" ] || return 0
	echo "$1: installing:$missing" >&2
	SUDO=
	[ "$(id -u)" -eq 0 ] || SUDO=sudo
	export DEBIAN_FRONTEND=noninteractive
	# shellcheck disable=SC2086
	$SUDO apt-get install -y $missing ||
		{ $SUDO apt-get update && $SUDO apt-get install -y $missing; } ||
		echo "$1: could not install everything; the scenario says what is missing" >&2
}

# fortio is not packaged by Debian: `go install` the pinned version (later
# versions need a module that cannot be fetched here). Prints the binary's path.
bench_fortio() { # $1 = caller name
	for f in "${FORTIO:-}" "$(command -v fortio 2>/dev/null)" "${GOPATH:-$HOME/go}/bin/fortio"; do
		[ -n "$f" ] && [ -x "$f" ] && { echo "$f"; return 0; }
	done
	if ! command -v go >/dev/null 2>&1; then
		echo "$1: installing: golang-go (for fortio)" >&2
		SUDO=; [ "$(id -u)" -eq 0 ] || SUDO=sudo
		DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y golang-go >&2 || true
	fi
	echo "$1: go install fortio.org/fortio@v1.63.0" >&2
	go install fortio.org/fortio@v1.63.0 >&2 || { echo "$1: fortio could not be installed" >&2; return 1; }
	echo "$(go env GOPATH)/bin/fortio"
}

# Build what a scenario needs into ${BUILD:-build} (BUILD is set and
# exported): `bench_build sluice demo_backend` runs make for them all when any
# one is missing.
bench_build() {
	BUILD=${BUILD:-build}
	export BUILD
	for t in "$@"; do
		[ -x "$BUILD/$t" ] && continue
		# shellcheck disable=SC2046
		make BUILD="$BUILD" $(for x in "$@"; do printf '%s/%s ' "$BUILD" "$x"; done)
		return
	done
}

# Compile the load tool bench/$1.c (it links OpenSSL) into $BUILD when it is
# missing or older than its source.
bench_cc() {
	if [ ! -x "$BUILD/$1" ] || [ "bench/$1.c" -nt "$BUILD/$1" ]; then
		mkdir -p "$BUILD"
		cc -std=c11 -O2 -Wall -Wextra -Werror -D_GNU_SOURCE -o "$BUILD/$1" "bench/$1.c" -lssl -lcrypto
	fi
}
