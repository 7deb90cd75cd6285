# Shared by the scripts in this directory: make sure the tools exist, and
# find the sluice binary the benchmark scripts hand their runs to.

# Puts cargo on PATH: rustup's default location, else Debian's packages.
ensure_rust() {
    if ! command -v cargo >/dev/null 2>&1 && [[ -x "$HOME/.cargo/bin/cargo" ]]; then
        export PATH="$HOME/.cargo/bin:$PATH"
    fi
    if ! command -v cargo >/dev/null 2>&1; then
        echo "cargo not found: installing Debian's rustc and cargo" >&2
        apt_install cargo rustc
    fi
}

# Installs Debian packages that are missing (as root, or through sudo).
apt_install() {
    local missing=()
    for p in "$@"; do
        # "install ok installed" only: a removed package can leave its
        # configuration behind, and dpkg -s still finds it.
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [[ ${#missing[@]} -eq 0 ]] && return 0
    local sudo=""
    [[ $(id -u) -ne 0 ]] && sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
}

# Installs a Python package from PyPI when `import MODULE` fails: with pip
# (Debian's python3-pip if need be), into a system Python too (PEP 668).
pip_install() {
    local module=$1 spec=$2
    python3 -c "import $module" 2>/dev/null && return 0
    python3 -m pip --version >/dev/null 2>&1 || apt_install python3-pip
    python3 -m pip install --quiet "$spec" 2>/dev/null ||
        python3 -m pip install --quiet --break-system-packages "$spec"
}

# Sets $sluice to the sluice binary that the benchmark scripts leave the
# measuring and the arithmetic to: `sluice bench steal` reads CPU steal,
# `sluice bench cpu` a process's CPU time, and `sluice bench summarize`
# takes the script's rows of runs, sets aside those with too much steal and
# prints medians and ratios paired by round. $SLUICE if set, else this
# tree's target/release/sluice, built if need be.
find_sluice() {
    if [[ -n "${SLUICE:-}" ]]; then
        sluice=$SLUICE
        return
    fi
    ensure_rust
    cargo build --release --quiet -p sluice
    sluice=target/release/sluice
}

# For benchmark scripts that start servers: makes a scratch directory
# ($work) and stops every process whose pid is added to $pids, then removes
# $work, when the script exits however it exits. Raises the descriptor
# limit: every client costs a proxy two.
bench_scratch() {
    work=$(mktemp -d "/tmp/$1.XXXXXX")
    pids=()
    trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"' EXIT
    ulimit -n "$(ulimit -Hn)"
}

# Starts a private PostgreSQL 15 for a benchmark: initdb in $work/data (as
# the postgres user when run as root), then the server on $PG_PORT with
# the `-c` settings given, logging to $work/pg.log (stopped on exit).
# CONF_LINES, if set, is appended to postgresql.conf first: settings there,
# unlike those on the command line, stay within reach of ALTER SYSTEM.
# Defines psql_db, a psql on it.
start_pg() {
    as_db=()
    [[ $(id -u) -eq 0 ]] && as_db=(setpriv --reuid=postgres --regid=postgres --init-groups --)
    [[ $(id -u) -eq 0 ]] && chown postgres "$work"
    "${as_db[@]}" /usr/lib/postgresql/15/bin/initdb -D "$work/data" -U postgres --auth=trust >/dev/null
    [[ -n ${CONF_LINES:-} ]] && printf '%s\n' "$CONF_LINES" >>"$work/data/postgresql.conf"
    local settings=()
    for s in "$@"; do settings+=(-c "$s"); done
    "${as_db[@]}" /usr/lib/postgresql/15/bin/postgres -D "$work/data" -p "$PG_PORT" -k "$work" \
        -c listen_addresses=127.0.0.1 "${settings[@]}" >"$work/pg.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 50); do pg_isready -q -h 127.0.0.1 -p "$PG_PORT" && break; sleep 0.2; done
}

psql_db() { psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -XAtq "$@"; }

# Starts `$sluice proxy` in front of the private PostgreSQL (start_pg):
# listening on $SLUICE_PORT, its admin port on $ADMIN_PORT, P pinned at 16
# and zeta fixed. With STEERING (TOML lines: the controllers' sections), it
# steers PostgreSQL's background work too ([postgres.background], its state
# and trace files in $work). The controllers' decisions are logged at info
# to $work/sluice-NAME.log. Sets $proxy to its pid.
#   start_pg_proxy NAME [STEERING]
start_pg_proxy() {
    cat >"$work/sluice.toml" <<TOML
[proxy]
listen = "127.0.0.1:$SLUICE_PORT"
upstream = "127.0.0.1:$PG_PORT"
protocol = "pg"
[admin]
listen = "127.0.0.1:$ADMIN_PORT"
[gate]
parallelism = 16
[optimizer]
parallelism = "fixed"
zeta = "fixed"
TOML
    if [[ -n ${2:-} ]]; then
        cat >>"$work/sluice.toml" <<TOML
[postgres.background]
conninfo = "host=127.0.0.1 port=$PG_PORT user=postgres dbname=postgres"
state_file = "$work/steering.json"
trace_file = "$work/steering.trace"
$2
TOML
    fi
    RUST_LOG=warn,sluice_proxy::optimizer=info,sluice_proxy::pg::background=info \
        "$sluice" proxy --config "$work/sluice.toml" 2>>"$work/sluice-$1.log" &
    proxy=$!
    for _ in $(seq 50); do pg_isready -q -h 127.0.0.1 -p "$SLUICE_PORT" && return; sleep 0.1; done
    echo "sluice proxy did not start: $(cat "$work/sluice-$1.log")" >&2
    exit 1
}

# Stops the proxy start_pg_proxy started; a clean stop gives back what it
# steered.
stop_pg_proxy() {
    kill -TERM "$proxy"
    wait "$proxy" || true
}

# Starts `SLUICE serve ARGS...` in the background, logging to
# $work/serve.log; sets $server to its pid (stopped on exit) and returns
# once it listens (or after 5 s).
start_serve() {
    local bin=$1
    shift
    "$bin" serve "$@" >"$work/serve.log" 2>&1 &
    server=$!
    pids+=($server)
    for _ in $(seq 50); do
        grep -q "sluice serve:" "$work/serve.log" && return
        sleep 0.1
    done
}
