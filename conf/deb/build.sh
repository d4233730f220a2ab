#!/bin/sh
# `make deb`: build OUT/sluice_<version>_<arch>.deb with dpkg-deb from a
# staging tree made by `make install DESTDIR=... PREFIX=/usr`.
# Usage: build.sh BINARY OUTDIR   (run from the repository root)
set -eu
BIN=$1
OUT=$2
VERSION=$(sed -n 's/^#define SLUICE_VERSION "\(.*\)"/\1/p' src/version.h)
ARCH=$(dpkg --print-architecture)
STAGE=$OUT/stage
rm -rf "$STAGE"
mkdir -p "$STAGE"
# The sub-make must not inherit the caller's command-line variables (BUILD, SANITIZE...).
env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory install \
	DESTDIR="$STAGE" PREFIX=/usr INSTALL_BIN="$BIN" >/dev/null
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$STAGE/usr/sbin/sluice"

DOC=$STAGE/usr/share/doc/sluice
cat > "$DOC/copyright" <<COPY
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: sluice
Comment: llhttp is compiled in from Debian's node-llhttp sources (MIT).

Files: *
Copyright: 2026 the sluice authors
License: see the sluice source repository
COPY
printf 'sluice (%s) unstable; urgency=medium\n\n  * Package built with make deb.\n\n -- sluice maintainers <sluice@example.org>  %s\n' \
	"$VERSION" "$(date -R -d @"${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}")" \
	| gzip -9n > "$DOC/changelog.gz"

# Depends: the package of every shared library the binary links (NEEDED),
# at least the version installed here.
needed=$(objdump -p "$BIN" | awk '/NEEDED/{print $2}')
deps=$(ldd "$BIN" | awk '/=> \//{print $1, $3}' | while read -r name lib; do
	echo "$needed" | grep -qxF "$name" || continue
	real=$(readlink -f "$lib")
	for f in "$lib" "$real" "${lib#/usr}" "${real#/usr}" "/usr$lib" "/usr$real"; do
		p=$(dpkg -S "$f" 2>/dev/null | head -1 | cut -d: -f1) && [ -n "$p" ] && { echo "$p"; break; }
	done
done | sort -u | while read -r p; do
	v=$(dpkg-query -W -f='${Version}' "$p" 2>/dev/null | sed 's/-[^-]*$//')
	echo "$p (>= $v)"
done | paste -sd, - | sed 's/,/, /g')
[ -n "$deps" ] || { echo "build.sh: no shared library packages found for $BIN" >&2; exit 1; }

mkdir -p "$STAGE/DEBIAN"
SIZE=$(du -sk --exclude=DEBIAN "$STAGE" | cut -f1)
cat > "$STAGE/DEBIAN/control" <<CTRL
Package: sluice
Version: $VERSION
Architecture: $ARCH
Maintainer: sluice maintainers <sluice@example.org>
Installed-Size: $SIZE
Depends: $deps, openssl, passwd
Recommends: logrotate
Section: httpd
Priority: optional
Homepage: https://localhost/sluice
Description: non-blocking HTTP/1.1 reverse proxy and traffic manager
 sluice sits in front of slow thread-per-request application servers
 (WebLogic, Tomcat, Apache prefork), holds many client connections on one
 event loop per core and funnels their requests into a few pooled keepalive
 connections per backend server, queueing requests when all are busy.
 It terminates TLS, adds client identity headers or PROXY protocol, runs a
 sandboxed Lua inspection hook and exports Prometheus metrics.
CTRL
printf '/etc/sluice/sluice.yaml\n/etc/logrotate.d/sluice\n' > "$STAGE/DEBIAN/conffiles"
install -m 0755 conf/deb/postinst conf/deb/prerm conf/deb/postrm "$STAGE/DEBIAN/"
(cd "$STAGE" && find . -type f ! -path './DEBIAN/*' ! -path './etc/*' -printf '%P\n' | sort | xargs md5sum) > "$STAGE/DEBIAN/md5sums"
chmod 0644 "$STAGE/DEBIAN/control" "$STAGE/DEBIAN/conffiles" "$STAGE/DEBIAN/md5sums"
DEB=$OUT/sluice_${VERSION}_${ARCH}.deb
dpkg-deb --root-owner-group -Zxz --build "$STAGE" "$DEB" >/dev/null
rm -rf "$STAGE"
echo "$DEB"
