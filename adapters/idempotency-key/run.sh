#!/usr/bin/env bash
# Starts one wrapper app by library name: run.sh LIBRARY --port P [--storage memory|redis] [--expiry-ms MS] ...
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
lib="${1:-}"; shift || true
case "$lib" in
  express-idempotency|node-idempotency-nestjs|powertools-idempotency-middy)
    [ -d "$here/.deps/node/node_modules" ] || { echo "run.sh: run install.sh first" >&2; exit 2; }
    NODE_PATH="$here/.deps/node/node_modules" exec node "$here/node/$lib.js" "$@" ;;
  fastapi-idempotency-key|fastapi-idempotency|asgi-idempotency-header|django-idempotency-key|fastidempotent|ichido|drf-idem)
    [ -x "$here/.deps/venv/bin/python" ] || { echo "run.sh: run install.sh first" >&2; exit 2; }
    exec "$here/.deps/venv/bin/python" "$here/python/wrap_${lib//-/_}.py" "$@" ;;
  idemgate)
    [ -x "$here/.deps/venv-idemgate/bin/python" ] || { echo "run.sh: run install.sh first" >&2; exit 2; }
    exec "$here/.deps/venv-idemgate/bin/python" "$here/python/wrap_idemgate.py" "$@" ;;
  axum-idempotent)
    [ -x "$here/.deps/rust-target/debug/reqkey-idem-axum-idempotent" ] || { echo "run.sh: run install.sh first" >&2; exit 2; }
    exec "$here/.deps/rust-target/debug/reqkey-idem-axum-idempotent" "$@" ;;
  *) echo "run.sh: unknown library '$lib' (express-idempotency, node-idempotency-nestjs, powertools-idempotency-middy, fastapi-idempotency-key, fastapi-idempotency, asgi-idempotency-header, django-idempotency-key, fastidempotent, ichido, idemgate, drf-idem, axum-idempotent)" >&2; exit 2 ;;
esac
