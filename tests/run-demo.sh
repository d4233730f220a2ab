#!/bin/sh
# `make run`: the bundled demo backend on 127.0.0.1:9000 (16 threads, like a
# small WebLogic/Tomcat pool) with sluice in front of it: HTTP on :8080,
# HTTPS on :8443 with a self-signed ECDSA P-256 + RSA-2048 pair made on the
# first run (conf/tls/, not committed), and the admin dashboard on :9901.
# Ctrl-C stops both.
set -eu
BUILD=${1:-build}
CONF=${SLUICE_CONF:-conf/sluice.yaml}
sh conf/make-demo-certs.sh conf/tls
"$BUILD/demo_backend" --listen 127.0.0.1:9000 --threads 16 --backlog 64 --service-ms 2 --keepalive-ms 60000 --quiet &
backend=$!
trap 'kill $backend 2>/dev/null; wait $backend 2>/dev/null || true' EXIT INT TERM
"$BUILD/sluice" -t -c "$CONF"
echo "sluice: serving http://127.0.0.1:8080/ and https://localhost:8443/ (self-signed: curl -k)"
echo "sluice: dashboard on http://127.0.0.1:9901/ (metrics: /metrics, status: /status)"
echo "sluice: demo backend on http://127.0.0.1:9000/, config $CONF; Ctrl-C to stop"
"$BUILD/sluice" -c "$CONF"
