#!/usr/bin/env bash
# Installs reqkey from this repository into PREFIX (PREFIX/bin/reqkey) and
# prints the binary's path on stdout. The action's "Install reqkey" step; CI
# runs it too.
#
#   action/install.sh PREFIX [extra cargo install flags...]
#   action/install.sh --source-key            # prints the key of this source
#
# A build is reused, not redone: PREFIX/source-key records the key of the
# source it was built from (a sha256 over Cargo.lock, every Cargo.toml,
# every .rs file, spec/ and scenarios/, and the flags), and when it matches
# this checkout's, PREFIX/bin/reqkey is used as it is (no cargo needed). The
# action keeps PREFIX in the GitHub Actions cache under that key, so only
# the first run of a given reqkey version builds (about 9 minutes); the
# others restore the binary in seconds.
#
# Otherwise `cargo install --path harness --locked` builds a release binary
# without debug info (stripped: about 20 MB instead of 109 MB).
#
# Exits 2, saying why, when cargo is missing or the install fails.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"

source_key() {  # source_key [flags...]
  (
    cd "$repo"
    {
      printf 'flags:%s\n' "$*"
      find Cargo.lock Cargo.toml spec scenarios -type f 2>/dev/null
      find . -path ./target -prune -o -path ./.git -prune -o -path ./adapters -prune \
        -o -path ./clients -prune -o \( -name '*.rs' -o -name Cargo.toml \) -type f -print
    } | LC_ALL=C sort -u | while IFS= read -r f; do
      case "$f" in flags:*) printf '%s\n' "$f" ;; *) printf '%s ' "$f"; sha256sum < "$f" ;; esac
    done | sha256sum | cut -c1-32
  )
}

if [ "${1-}" = "--source-key" ]; then
  shift
  echo "reqkey-$(source_key "$@")"
  exit 0
fi
[ $# -ge 1 ] || { echo "usage: action/install.sh PREFIX [cargo install flags...]" >&2; exit 2; }
prefix="$1"; shift
case "$prefix" in /*) ;; *) prefix="$PWD/$prefix" ;; esac
bin="$prefix/bin/reqkey"
key="reqkey-$(source_key "$@")"

if [ -x "$bin" ] && [ "$(cat "$prefix/source-key" 2>/dev/null)" = "$key" ] && "$bin" --version >&2; then
  echo "install.sh: reusing $bin, built from this source ($key)" >&2
  echo "$bin"
  exit 0
fi

command -v cargo >/dev/null 2>&1 || {
  echo "install.sh: cargo is missing; install a Rust toolchain first (for example dtolnay/rust-toolchain@stable)" >&2
  exit 2
}
# A release binary for running, not debugging: no debug info, stripped.
CARGO_PROFILE_RELEASE_DEBUG=false CARGO_PROFILE_RELEASE_STRIP=true \
  cargo install --path "$repo/harness" --locked --root "$prefix" "$@" >&2 || {
  echo "install.sh: cargo install --path $repo/harness --locked failed" >&2
  exit 2
}
[ -x "$bin" ] || { echo "install.sh: $bin is missing after cargo install" >&2; exit 2; }
"$bin" --version >&2
echo "$key" > "$prefix/source-key"
echo "$bin"
