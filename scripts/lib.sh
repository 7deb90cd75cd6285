# Shared by the scripts in this directory: make sure the tools exist.

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

# Prints "total steal" CPU ticks of the machine so far (/proc/stat), for a
# run's steal: the differences of two readings, steal over total.
steal_ticks() { awk '/^cpu /{t=0; for(i=2;i<=9;i++) t+=$i; print t, $9}' /proc/stat; }

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
