#!/usr/bin/env bash
# Installs the judged libraries by name and pinned version from npm and PyPI into .deps/ (git-ignored; nothing vendored).
#
#   adapters/idempotency-key/install.sh [--force]
#
# npm: node/package.json + node/package-lock.json (`npm ci` in .deps/node).
# PyPI: python/requirements.txt, every version pinned, into the venv .deps/venv;
# python/requirements-idemgate.txt into .deps/venv-idemgate (idemgate pins a
# Redis client the others cannot share).
# A stamp of those four files skips a second install; --force redoes it.
# --with-rust also builds rust/ (the axum-idempotent wrapper, crates.io,
# pinned by rust/Cargo.lock) into .deps/rust-target: only certify-all.sh
# asks for it (the table's regeneration), so check.sh in CI builds no Rust.
# Exits 2 when node, npm or python3 is missing (or cargo, with --with-rust),
# 1 when an install fails.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
deps="$here/.deps"
force=0
rust=0
for arg in "$@"; do
  case "$arg" in
    --force) force=1 ;;
    --with-rust) rust=1 ;;
    *) echo "install.sh: unknown option $arg (--force, --with-rust)" >&2; exit 2 ;;
  esac
done
if [ "$rust" = 1 ]; then
  command -v cargo >/dev/null 2>&1 || { echo "install.sh: cargo is needed for --with-rust" >&2; exit 2; }
  echo "install.sh: cargo build of rust/ (axum-idempotent) into .deps/rust-target"
  (cd "$here/rust" && cargo build --locked --quiet --target-dir "$deps/rust-target")
fi

for tool in node npm python3; do
  command -v "$tool" >/dev/null 2>&1 || { echo "install.sh: $tool is needed" >&2; exit 2; }
done
node_major="$(node -p 'process.versions.node.split(".")[0]')"
[ "$node_major" -ge 18 ] || { echo "install.sh: node 18+ is needed (have $(node --version))" >&2; exit 2; }

stamp="$(cat "$here/node/package.json" "$here/node/package-lock.json" "$here/python/requirements.txt" "$here/python/requirements-idemgate.txt" | sha256sum | cut -d' ' -f1)"
if [ "$force" = 0 ] && [ -f "$deps/stamp" ] && [ "$(cat "$deps/stamp")" = "$stamp" ]; then
  echo "install.sh: .deps is up to date"
  exit 0
fi
rm -f "$deps/stamp"
mkdir -p "$deps/node"

echo "install.sh: npm ci (node/package-lock.json)"
cp "$here/node/package.json" "$here/node/package-lock.json" "$deps/node/"
(cd "$deps/node" && npm ci --no-audit --no-fund --loglevel=error)

echo "install.sh: pip install -r python/requirements.txt into .deps/venv"
[ -x "$deps/venv/bin/python" ] || python3 -m venv "$deps/venv"
"$deps/venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/python/requirements.txt"
echo "install.sh: pip install -r python/requirements-idemgate.txt into .deps/venv-idemgate"
[ -x "$deps/venv-idemgate/bin/python" ] || python3 -m venv "$deps/venv-idemgate"
"$deps/venv-idemgate/bin/pip" install --quiet --disable-pip-version-check -r "$here/python/requirements-idemgate.txt"

echo "$stamp" > "$deps/stamp"
echo "install.sh: done"
