#!/usr/bin/env bash
# Coverage-guided fuzzing of the protocol parsers (cargo-fuzz, libFuzzer,
# AddressSanitizer): RESP, the codec the server, the proxy, the router and
# the bench drivers share (requests: resp_request; replies: resp_reply), and
# the proxy's PostgreSQL framing (proxy_pg_frame), its scan of query
# text for session statements (proxy_pg_sql), and the password exchanges
# it asks itself with the SCRAM secrets it reads (proxy_pg_password). Each
# target checks
# properties, not only the absence of panics (see fuzz/fuzz_targets/).
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#
# Needs a nightly toolchain (installed through rustup if missing) and
# cargo-fuzz (installed with cargo if missing). Corpora grow in
# fuzz/corpus/ (not committed), starting from fuzz/seeds/; a failing input
# is saved under fuzz/artifacts/ and the script exits non-zero.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
ensure_rust
seconds=${1:-60}
shift || true
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(resp_request resp_reply proxy_pg_frame proxy_pg_sql proxy_pg_password)
rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
command -v cargo-fuzz >/dev/null || cargo install --locked cargo-fuzz
cd fuzz
for t in "${targets[@]}"; do
    mkdir -p "corpus/$t"
    rm -rf "artifacts/$t"
    echo "== $t: ${seconds} s"
    cargo +nightly fuzz run "$t" "corpus/$t" "seeds/$t" -- -max_total_time="$seconds" -max_len=4096 2>&1 |
        grep -E '^(#[0-9]+ +DONE|Done |==[0-9]+==ERROR|SUMMARY|thread .* panicked)|assert' || true
    [[ -z $(ls -A "artifacts/$t" 2>/dev/null) ]] || { echo "$t: failing inputs in fuzz/artifacts/$t" >&2; exit 1; }
done
