#!/bin/sh
# Build libinjection's checks (the libinjectionrs crate behind a C ABI) as
# the static library $1/libsluice_libinjection.a; the Makefile runs this
# when $1/.stamp is missing or older than this crate. Cargo keeps its build
# in $1/target, so later builds reuse it.
set -e
dir=$1
[ -n "$dir" ] || { echo "usage: $0 DIR" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
PATH="$PATH:$HOME/.cargo/bin"
command -v cargo >/dev/null || { echo "crs/libinjection/build.sh: cargo not found (rustup's or Debian's cargo)" >&2; exit 1; }
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
CARGO_TARGET_DIR="$dir/target" cargo build -q --release --locked --manifest-path "$here/Cargo.toml"
cp "$dir/target/release/libsluice_libinjection.a" "$dir/libsluice_libinjection.a"
touch "$dir/.stamp"
