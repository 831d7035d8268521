# Shared by the hand-run bench scripts (sourced, not run): a temp dir, the processes a
# script starts (append each PID to PIDS) killed on exit, and waiting for a port.
#
#   source "$(dirname "$0")/common.sh"; bench_tmp NAME
#
# Messages name the script that sourced this file.

BENCH=$(basename "$0")
PIDS=()

# Make TMP, a fresh temp dir removed on exit with every process in PIDS.
bench_tmp() { # name
    TMP=$(mktemp -d "/tmp/egress-$1.XXXXXX")
    chmod 755 "$TMP"
    trap bench_cleanup EXIT
    trap 'exit 130' INT TERM
}

bench_cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$TMP"
}

# Wait until something listens on 127.0.0.1:$1, for at most $2 seconds (default 10);
# else show the tail of the logs in TMP and exit 2.
wait_port() { # port [seconds]
    local i
    for i in $(seq $((${2:-10} * 10))); do
        ss -Htln "sport = :$1" | grep -q . && return 0
        sleep 0.1
    done
    echo "$BENCH: nothing listens on $1" >&2
    tail -n 5 "$TMP"/*.log "$TMP"/*/*.log >&2 2>/dev/null || true
    exit 2
}
