#!/bin/sh
# CRS cost: sluice running the OWASP Core Rule Set through its own engine
# (lua/crs.lua) vs Apache 2.4 + ModSecurity 2.9 with the same CRS 3.3.4 files,
# at paranoia 1 and 2, in proxy CPU per request at a fixed offered rate and
# crs_replay's engine-only time (part 1), latency percentiles under fortio
# (part 2), memory and configuration-load time (part 3). Run by
# `make bench-crs`. Knobs (environment): see bench/crs.py or
# docs/bench/inspection.md.
set -eu
cd "$(dirname "$0")/.."

. bench/deps.sh
bench_install_deps bench/crs.sh
for p in apache2 libapache2-mod-security2 modsecurity-crs; do
	dpkg -s "$p" >/dev/null 2>&1 && continue
	echo "bench/crs.sh: installing: apache2 libapache2-mod-security2 modsecurity-crs" >&2
	SUDO=; [ "$(id -u)" -eq 0 ] || SUDO=sudo
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends \
		apache2 libapache2-mod-security2 modsecurity-crs >&2 || true
	break
done

case ",${PARTS:-fortio}," in
*,fortio,*)
	FORTIO=$(bench_fortio bench/crs.sh) || FORTIO=
	export FORTIO ;;
esac

bench_build sluice crs_replay

exec "$(py)" bench/crs.py "$@"
