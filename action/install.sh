#!/usr/bin/env bash
# Installs reqkey from this repository: `cargo install --path harness --locked`
# into PREFIX (PREFIX/bin/reqkey), then prints the binary's path on stdout.
# The action's "Install reqkey" step; CI runs it too.
#
#   action/install.sh PREFIX [extra cargo install flags...]
#
# Exits 2, saying why, when cargo is missing or the install fails.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
[ $# -ge 1 ] || { echo "usage: action/install.sh PREFIX [cargo install flags...]" >&2; exit 2; }
prefix="$1"; shift
case "$prefix" in /*) ;; *) prefix="$PWD/$prefix" ;; esac
command -v cargo >/dev/null 2>&1 || {
  echo "install.sh: cargo is missing; install a Rust toolchain first (for example dtolnay/rust-toolchain@stable)" >&2
  exit 2
}
cargo install --path "$repo/harness" --locked --root "$prefix" "$@" >&2 || {
  echo "install.sh: cargo install --path $repo/harness --locked failed" >&2
  exit 2
}
bin="$prefix/bin/reqkey"
[ -x "$bin" ] || { echo "install.sh: $bin is missing after cargo install" >&2; exit 2; }
"$bin" --version >&2
echo "$bin"
