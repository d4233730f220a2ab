#!/bin/sh
# Self-signed ECDSA P-256 and RSA-2048 certificates for localhost, as the
# default config (conf/sluice.yaml) expects them: DIR/ecdsa.{pem,key} and
# DIR/rsa.{pem,key}. Made once; an existing pair is kept.
set -eu
DIR=${1:-conf/tls}
mkdir -p "$DIR"
[ -f "$DIR/ecdsa.pem" ] && [ -f "$DIR/rsa.pem" ] && exit 0
echo "sluice: generating a self-signed ECDSA P-256 and RSA-2048 certificate for localhost in $DIR/"
SAN="subjectAltName=DNS:localhost,IP:127.0.0.1"
umask 077
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 825 \
	-subj /CN=localhost -addext "$SAN" -keyout "$DIR/ecdsa.key" -out "$DIR/ecdsa.pem" 2>/dev/null
openssl req -x509 -newkey rsa:2048 -nodes -days 825 \
	-subj /CN=localhost -addext "$SAN" -keyout "$DIR/rsa.key" -out "$DIR/rsa.pem" 2>/dev/null
