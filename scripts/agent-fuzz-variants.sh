#!/usr/bin/env bash
# Runs the agent fuzzer against every sequence defect and the correct reference servers on seeds 1-3 (minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
exec cargo test -p reqkey-harness --test agent_fuzz -- --include-ignored "$@"
