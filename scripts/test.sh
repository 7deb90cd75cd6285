#!/usr/bin/env bash
# Every test: unit, property and integration tests of the whole workspace.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
# The documents first: every link, path and run id resolves, and nothing
# cites a text outside the repository (a second, no build needed).
command -v python3 >/dev/null 2>&1 || apt_install python3
bash scripts/check-docs.sh
# The files of each crate form layers: no two import each other.
bash scripts/check-layers.sh
ensure_rust
# redis-cli and redis-benchmark for the server's integration test; the
# proxy's integration tests start private PostgreSQL 15 and Redis 7 servers
# and run psql, pgbench, redis-cli and redis-benchmark through the proxy;
# openssl makes the certificate for the proxy's TLS test; the admin port's
# dashboard is tested in headless Chromium.
apt_install redis-tools redis-server postgresql-15 postgresql-client-15 openssl chromium
# redis-py, as a Python user gets it (RESP3 and HELLO by default), for the
# server's client test.
pip_install redis 'redis>=5'
pip_install rq 'rq>=2'
cargo test --workspace "$@"
