#!/usr/bin/env bash
# Every test: unit, property and integration tests of the whole workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
ensure_rust
# redis-cli and redis-benchmark for the server's integration test.
apt_install redis-tools
cargo test --workspace "$@"
