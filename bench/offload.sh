#!/bin/sh
# Offload benchmark: users without keepalive (and TLS without session reuse)
# against a thread-per-request app server (Tomcat 10, demo_backend), direct
# vs through sluice, HAProxy and nginx. Run by `make bench-offload`. Knobs
# (environment): see bench/offload.py or docs/bench/offload.md.
#
# This wrapper makes sure the tools exist (Tomcat 10 and a JDK come from
# Debian's tomcat10 package), builds sluice, demo_backend and the load client
# bench/userload.c into $BUILD if missing or older than their sources, then
# hands over to bench/offload.py.
set -eu
cd "$(dirname "$0")/.."

. bench/deps.sh
EXTRA_TOOLS="openssl:openssl java:default-jre-headless cc:gcc" bench_install_deps bench/offload.sh
if [ ! -x /usr/share/tomcat10/bin/catalina.sh ]; then
	echo "bench/offload.sh: installing: tomcat10" >&2
	SUDO=; [ "$(id -u)" -eq 0 ] || SUDO=sudo
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y tomcat10 ||
		echo "bench/offload.sh: could not install tomcat10" >&2
fi
if [ ! -f /usr/include/openssl/ssl.h ]; then
	echo "bench/offload.sh: installing: libssl-dev (for bench/userload.c)" >&2
	SUDO=; [ "$(id -u)" -eq 0 ] || SUDO=sudo
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y libssl-dev ||
		echo "bench/offload.sh: could not install libssl-dev" >&2
fi

bench_build sluice demo_backend
bench_cc userload

exec "$(py)" bench/offload.py "$@"
