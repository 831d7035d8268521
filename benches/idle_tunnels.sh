#!/usr/bin/env bash
# Memory per idle tunnel, beside squid's, measured in one run on loopback only (issue
# 32's figure). Run by hand, not by CI:
#
#   cargo build --release && benches/idle_tunnels.sh
#
# For the proxy (and each BASELINE_BIN, an older build to compare with) and squid in
# turn: a fresh process, its RSS idle; FIRST idle CONNECT tunnels opened (each relays one
# small response through itself, so it is past its first-bytes judgement and fully open,
# then stays silent), RSS; then up to TOTAL, RSS again. The marginal KiB per tunnel is
# (RSS at TOTAL - RSS at FIRST) / (TOTAL - FIRST): the cost of one more tunnel, without
# the start-up and warm-up costs. Then every tunnel is closed and, SETTLE seconds later,
# RSS is read again: "after / idle" says whether the memory went back (the target is
# within 2x of idle). The target name is pinned (--resolve), nothing is resolved through
# the system resolver; every process started is killed on exit.
#
# Knobs (environment): FIRST=1000 TOTAL=4000 SETTLE=60 BASE_PORT=21300 PROXY_BIN (default:
# the release build) BASELINE_BIN (another build, measured the same way) NO_SQUID=1.

set -euo pipefail

FIRST=${FIRST:-1000}
TOTAL=${TOTAL:-4000}
SETTLE=${SETTLE:-60}
BASE_PORT=${BASE_PORT:-21300}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PROXY_BIN=${PROXY_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/egress-proxy}
HTTP_PORT=$BASE_PORT
PORT=$((BASE_PORT + 1))
NAME=allowed.test

for tool in nginx python3; do
    command -v "$tool" >/dev/null || { echo "idle_tunnels.sh: $tool is needed" >&2; exit 2; }
done
[ -x "$PROXY_BIN" ] || { echo "idle_tunnels.sh: no proxy binary at $PROXY_BIN (cargo build --release)" >&2; exit 2; }
SQUID=$(command -v squid || true)
[ -n "${NO_SQUID:-}" ] && SQUID=
ulimit -n "$(ulimit -Hn)"
[ "$(ulimit -n)" -gt $((2 * TOTAL + 256)) ] || { echo "idle_tunnels.sh: ulimit -n is under 2 x TOTAL" >&2; exit 2; }

source "$ROOT/benches/common.sh"
bench_tmp idle

rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }

mkdir -p "$TMP/www"
head -c 256 /dev/zero | tr '\0' 'x' >"$TMP/www/index.html"
NGINX_CONNECTIONS=$((TOTAL + 256)) start_nginx "$HTTP_PORT"

cat >"$TMP/org.toml" <<EOF
version = 1
name = "idle"
allowed_domains = ["$NAME:$HTTP_PORT"]
allowed_cidrs = ["127.0.0.0/8"]
default_network_policy = { type = "allowlist", allowed_domains = ["$NAME:$HTTP_PORT"] }
[tunnels]
require_tls = false
EOF

# Start what is measured on PORT; its PID in SERVER_PID.
start_egress() { # binary
    EGRESS_PROXY_LOG=warn "$1" serve --org "$TMP/org.toml" --listen "127.0.0.1:$PORT" \
        --resolve "$NAME=127.0.0.1" --dns-server 127.0.0.1:9 \
        --audit-log "$TMP/audit.jsonl" --max-connections $((TOTAL + 1000)) \
        --max-tunnels-per-client $((TOTAL + 1000)) --tunnel-idle-timeout 600 2>>"$TMP/proxy.log" &
    SERVER_PID=$!
    PIDS+=($!)
    wait_port "$PORT"
}

start_squid() {
    mkdir -p "$TMP/squid"
    chmod 777 "$TMP/squid"
    # squid is given the origin's address, and nothing it could resolve reaches the
    # system resolver: its own hosts file, and a nameserver on loopback.
    echo "127.0.0.1 $NAME" >"$TMP/squid/hosts"
    cat >"$TMP/squid.conf" <<EOF
http_port 127.0.0.1:$PORT
pid_filename $TMP/squid/squid.pid
cache_log $TMP/squid/cache.log
access_log none
cache deny all
cache_mem 8 MB
coredump_dir $TMP/squid
visible_hostname idle-bench
shutdown_lifetime 1 second
pinger_enable off
dns_nameservers 127.0.0.1
hosts_file $TMP/squid/hosts
max_filedescriptors $((2 * TOTAL + 1000))
acl lo src 127.0.0.1/32
http_access allow lo
http_access deny all
EOF
    "$SQUID" -N -n "egressidle$$" -f "$TMP/squid.conf" &
    SERVER_PID=$!
    PIDS+=($!)
    wait_port "$PORT"
}

# Open N tunnels held by a client of their own (until its stdin closes, or 600 s), to
# TARGET (the pinned name for egress-proxy, the address for squid).
TARGET="$NAME:$HTTP_PORT"
open_tunnels() { # n name
    local out="$TMP/tunnels-$2.out" i
    exec {fd}> >(exec python3 "$ROOT/benches/tunnels.py" "127.0.0.1:$PORT" "$TARGET" \
        "$1" 600 >"$out" 2>&1)
    PIDS+=($!)
    HOLDERS+=("$fd")
    for i in $(seq 1200); do
        grep -q READY "$out" 2>/dev/null && return 0
        if grep -q Error "$out" 2>/dev/null; then cat "$out" >&2; exit 1; fi
        sleep 0.1
    done
    echo "idle_tunnels.sh: $1 tunnels did not open" >&2
    cat "$out" >&2
    exit 1
}

ROWS=()
# Measure the server SERVER_PID: one row of the table.
measure() { # label
    HOLDERS=()
    sleep 1
    local idle first total after fd
    idle=$(rss_kib "$SERVER_PID")
    open_tunnels "$FIRST" first
    sleep 1
    first=$(rss_kib "$SERVER_PID")
    open_tunnels $((TOTAL - FIRST)) rest
    sleep 1
    total=$(rss_kib "$SERVER_PID")
    for fd in "${HOLDERS[@]}"; do exec {fd}>&-; done
    sleep "$SETTLE"
    after=$(rss_kib "$SERVER_PID")
    kill "$SERVER_PID"
    wait "$SERVER_PID" 2>/dev/null || true
    sleep 1
    ROWS+=("$(awk -v l="$1" -v i="$idle" -v f="$first" -v t="$total" -v a="$after" -v n=$((TOTAL - FIRST)) \
        'BEGIN {printf "| %s | %.1f | %.1f | %.1f | %.2f | %.1f | %.2f |", l, i/1024, f/1024, t/1024, (t-f)/n, a/1024, a/i}')")
}

start_egress "$PROXY_BIN"
measure "egress-proxy"
if [ -n "${BASELINE_BIN:-}" ]; then
    start_egress "$BASELINE_BIN"
    measure "egress-proxy (baseline)"
fi
if [ -n "$SQUID" ]; then
    start_squid
    TARGET="127.0.0.1:$HTTP_PORT"
    measure "squid"
fi

echo
echo "Idle tunnels on loopback: $FIRST then $TOTAL, RSS read ${SETTLE} s after all closed"
echo
echo "| server | idle MiB | $FIRST tunnels MiB | $TOTAL tunnels MiB | KiB per tunnel (marginal) | ${SETTLE} s after close MiB | after / idle |"
echo "|---|---|---|---|---|---|---|"
for row in "${ROWS[@]}"; do echo "$row"; done
