#!/bin/sh
# Build AWS-LC's static libssl/libcrypto (the aws-lc-sys crate, `ssl`
# feature) into $1 (include/, lib/): `make TLS=awslc` runs this when $1/.stamp
# is missing or older than this crate. Cargo keeps its build in $1/target,
# so later builds reuse it. Needs cargo, cmake, a C compiler and libclang
# (for bindgen); Debian's cmake and libclang-dev are installed when missing.
set -e
dir=$1
[ -n "$dir" ] || { echo "usage: $0 DIR" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
missing=""
for p in cmake libclang-dev; do dpkg -s $p >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
	echo "installing:$missing"
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
fi
PATH="$PATH:$HOME/.cargo/bin"
command -v cargo >/dev/null || { echo "tls/awslc/build.sh: cargo not found (rustup's or Debian's cargo)" >&2; exit 1; }
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
# AWS_LC_SYS_NO_PREFIX: the symbols keep their OpenSSL names.
AWS_LC_SYS_NO_PREFIX=1 SLUICE_AWSLC_DIR="$dir" CARGO_TARGET_DIR="$dir/target" \
	cargo build -q --release --locked --manifest-path "$here/Cargo.toml"
sed -n 's/^#define AWSLC_VERSION_NUMBER_STRING "\(.*\)"/\1/p' "$dir/include/openssl/base.h" > "$dir/version.txt"
test -s "$dir/version.txt" && test -f "$dir/lib/libssl.a" && test -f "$dir/lib/libcrypto.a"
touch "$dir/.stamp"
echo "AWS-LC $(cat "$dir/version.txt") in $dir"
