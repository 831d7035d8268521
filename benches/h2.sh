#!/usr/bin/env bash
# HTTP/2 and WebSockets inside interception (issue 23), by hand, not in CI, on loopback:
#
#   cargo build --release && benches/h2.sh
#
# Starts, in a fresh temp dir, an nginx origin serving a 256-byte body over HTTPS with h2
# and http/1.1 by ALPN (a certificate made here for x.test, CA:FALSE with a SAN), a
# WebSocket echo origin over TLS with the same certificate (`h2_load ws-origin`, Rust:
# Python's `websockets` would be slower than the proxy), the release proxy with a CA of
# its own (`ca init`), both origins inspected and that certificate as `--upstream-ca`,
# and mitmdump (regular proxy mode, its own CA, verifying the origin against the same
# certificate). The client is benches/h2_load.rs (hyper on one thread; built here with
# `cargo bench --no-run`). Interleaving the configurations, ROUNDS times (medians):
#
#   h1-1      HTTP/1.1 keep-alive, one GET at a time, one tunnel
#   h2-1      h2, one tunnel, one stream at a time
#   h2-M      h2, one tunnel, STREAMS streams in flight
#   h1-M      HTTP/1.1 keep-alive, STREAMS tunnels (the same concurrency as h2-M)
#   mitm-h2-M h2-M through mitmdump (which speaks h2 both ways by default)
#   ws-direct one WebSocket straight to the echo origin (TLS): a BYTES-byte text message,
#             then its echo, again and again
#   ws-inspect the same inside a tunnel the proxy intercepts
#
# each for DURATION seconds, reading the CPU time (user + system) of the proxy (or
# mitmdump) around each run for CPU per request, and the client's own CPU time (its share
# of a core: near 1.00 would mean the client set the figure). The ratios: h2-M / h1-1
# (target at least 1.0), h2-M / h1-M and h2-1 / h1-1; h2-M / mitm-h2-M (target at least
# 5); ws-inspect / ws-direct (target at least 0.5).
#
# Every name is pinned with --resolve (the proxy) or not used at all (mitmdump is sent
# `CONNECT 127.0.0.1:PORT` with x.test in the SNI): nothing is resolved through the
# system resolver. Every process started is recorded by PID and killed on exit; every run
# is bounded in time (DURATION, and `timeout`).
#
# Knobs (environment): ROUNDS=3 DURATION=3 STREAMS=16 BYTES=32 BASE_PORT=21700 (uses
# BASE_PORT to BASE_PORT + 4) PROXY_BIN (default: the release build) LOAD_BIN (default:
# built here) MITMDUMP (default: mitmdump on PATH, else /tmp/mitmvenv/bin/mitmdump)
# NO_MITM=1.
set -euo pipefail

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-3}
STREAMS=${STREAMS:-16}
BYTES=${BYTES:-32}
BASE_PORT=${BASE_PORT:-21700}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PROXY_BIN=${PROXY_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/egress-proxy}
HTTP_PORT=$BASE_PORT
HTTPS_PORT=$((BASE_PORT + 1))
PROXY_PORT=$((BASE_PORT + 2))
MITM_PORT=$((BASE_PORT + 3))
WS_PORT=$((BASE_PORT + 4))
NAME=x.test # inspected, on HTTPS_PORT and WS_PORT

for tool in nginx openssl python3 cargo; do
    command -v "$tool" >/dev/null || { echo "h2.sh: $tool is needed" >&2; exit 2; }
done
[ -x "$PROXY_BIN" ] || { echo "h2.sh: no proxy binary at $PROXY_BIN (cargo build --release)" >&2; exit 2; }
if [ -z "${LOAD_BIN:-}" ]; then
    LOAD_BIN=$(cd "$ROOT" && cargo bench --bench h2_load --no-run --message-format=json 2>/dev/null |
        python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "h2_load" and m.get("executable"):
        print(m["executable"])')
fi
[ -x "$LOAD_BIN" ] || { echo "h2.sh: no client (cargo bench --bench h2_load --no-run)" >&2; exit 2; }
MITMDUMP=${MITMDUMP:-$(command -v mitmdump || echo /tmp/mitmvenv/bin/mitmdump)}
if [ -n "${NO_MITM:-}" ]; then
    MITMDUMP=
elif [ ! -x "$MITMDUMP" ]; then
    echo "h2.sh: no mitmdump (python3 -m venv /tmp/mitmvenv && /tmp/mitmvenv/bin/pip install mitmproxy); running without it" >&2
    MITMDUMP=
fi
for port in $HTTP_PORT $HTTPS_PORT $PROXY_PORT $MITM_PORT $WS_PORT; do
    if ss -Htln "sport = :$port" | grep -q .; then
        echo "h2.sh: port $port is taken (set BASE_PORT)" >&2
        exit 2
    fi
done

source "$ROOT/benches/common.sh"
bench_tmp h2

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
TICK=$(getconf CLK_TCK)
median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

# --- the origins --------------------------------------------------------------------------
mkdir -p "$TMP/www"
head -c 256 /dev/zero | tr '\0' 'x' >"$TMP/www/index.html"
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=$NAME" \
    -addext "subjectAltName=DNS:$NAME,IP:127.0.0.1" \
    -addext "basicConstraints=critical,CA:FALSE" \
    -keyout "$TMP/key.pem" -out "$TMP/cert.pem" 2>/dev/null
# h2 on the HTTPS server: a `listen` parameter before nginx 1.25.1, a directive since.
if printf '%s\n1.25.1\n' "$(nginx -v 2>&1 | sed 's|.*/||')" | sort -V -C; then
    export NGINX_LISTEN_EXTRA=http2
else
    export NGINX_TLS_EXTRA="http2 on;"
fi
NGINX_CONNECTIONS=1024 start_nginx "$HTTP_PORT" "$HTTPS_PORT"
"$LOAD_BIN" ws-origin "$WS_PORT" "$TMP/cert.pem" "$TMP/key.pem" 2>"$TMP/ws-origin.log" &
PIDS+=($!)
wait_port "$WS_PORT"

# --- the proxy ------------------------------------------------------------------------------
"$PROXY_BIN" ca init "$TMP/ca" >/dev/null
cat >"$TMP/org.toml" <<EOF
version = 1
name = "h2-bench"
allowed_domains = [{ host = "$NAME:$HTTPS_PORT", inspect = true }, { host = "$NAME:$WS_PORT", inspect = true }]
allowed_cidrs = ["127.0.0.0/8"]
default_network_policy = { type = "allowlist", allowed_domains = ["$NAME:$HTTPS_PORT", "$NAME:$WS_PORT"] }
EOF
# --dns-server points at a closed loopback port: a name that is not pinned fails at once.
EGRESS_PROXY_LOG=warn "$PROXY_BIN" serve --org "$TMP/org.toml" --listen "127.0.0.1:$PROXY_PORT" \
    --ca "$TMP/ca" --upstream-ca "$TMP/cert.pem" --resolve "$NAME=127.0.0.1" \
    --dns-server 127.0.0.1:9 --audit-log "$TMP/audit.jsonl" 2>>"$TMP/proxy.log" &
PIDS+=($!)
PROXY_PID=$!
wait_port $PROXY_PORT

# --- mitmdump ---------------------------------------------------------------------------------
if [ -n "$MITMDUMP" ]; then
    "$MITMDUMP" -q --listen-host 127.0.0.1 --listen-port "$MITM_PORT" --set confdir="$TMP/mitm" \
        --set ssl_verify_upstream_trusted_ca="$TMP/cert.pem" >"$TMP/mitm.log" 2>&1 &
    PIDS+=($!)
    MITM_PID=$!
    wait_port $MITM_PORT 60
fi

CONFIGS=(h1-1 h2-1 h2-M h1-M ws-direct ws-inspect)
[ -n "$MITMDUMP" ] && CONFIGS+=(mitm-h2-M)

# The client's arguments for a configuration, and whose CPU time it reads.
client_args() { # config
    local via="$PROXY_PORT $NAME:$HTTPS_PORT $NAME $TMP/ca/ca.pem $DURATION"
    case $1 in
    h1-1) echo "h1 $via 1" ;;
    h2-1) echo "h2 $via 1" ;;
    h2-M) echo "h2 $via $STREAMS" ;;
    h1-M) echo "h1 $via $STREAMS" ;;
    mitm-h2-M) echo "h2 $MITM_PORT 127.0.0.1:$HTTPS_PORT $NAME $TMP/mitm/mitmproxy-ca-cert.pem $DURATION $STREAMS" ;;
    ws-direct) echo "ws - 127.0.0.1:$WS_PORT $NAME $TMP/cert.pem $DURATION $BYTES" ;;
    ws-inspect) echo "ws $PROXY_PORT $NAME:$WS_PORT $NAME $TMP/ca/ca.pem $DURATION $BYTES" ;;
    esac
}
cpu_pid() { # config
    case $1 in
    mitm-*) echo "$MITM_PID" ;;
    *) echo "$PROXY_PID" ;;
    esac
}

# One run: appends requests (or messages) per second and CPU us per request to TMP/r-* and
# TMP/cpu-*.
drive() { # config
    local pid c0 c1 out
    pid=$(cpu_pid "$1")
    c0=$(cpu_ticks "$pid")
    # shellcheck disable=SC2046 # client_args is split into words on purpose
    if ! out=$(timeout $((DURATION + 30)) "$LOAD_BIN" $(client_args "$1") 2>"$TMP/client.err"); then
        echo "h2.sh: the client of $1 failed:" >&2
        cat "$TMP/client.err" >&2
        tail -n 5 "$TMP/proxy.log" "$TMP/mitm.log" "$TMP/ws-origin.log" >&2 2>/dev/null || true
        exit 1
    fi
    c1=$(cpu_ticks "$pid")
    echo "$out" | awk -v t="$((c1 - c0))" -v hz="$TICK" -v r="$TMP/r-$1" -v c="$TMP/cpu-$1" -v b="$TMP/busy-$1" \
        -v cpu="$([ "$1" = ws-direct ] && echo 0 || echo 1)" '
        {printf "%.0f\n", $3 >> r; print $4 >> b; if ($1 > 0 && cpu) printf "%.1f\n", t * 1e6 / hz / $1 >> c}'
}

echo "h2.sh: $ROUNDS rounds of ${DURATION}s runs, $STREAMS streams (or connections), $BYTES-byte messages; configurations: ${CONFIGS[*]}" >&2
for round in $(seq "$ROUNDS"); do
    for cfg in "${CONFIGS[@]}"; do
        echo "  round $round: $cfg" >&2
        drive "$cfg"
    done
done

# --- the table -----------------------------------------------------------------------------------
med() { [ -s "$TMP/$1" ] && median <"$TMP/$1" || echo nan; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b + 0 > 0 && a != "nan") printf "%.2f", a / b; else print "-"}'; }
declare -A R C B
for cfg in h1-1 h2-1 h2-M h1-M mitm-h2-M ws-direct ws-inspect; do
    R[$cfg]=$(med "r-$cfg")
    C[$cfg]=$(med "cpu-$cfg")
    B[$cfg]=$(med "busy-$cfg")
done

echo
echo "egress-proxy h2 and WebSocket inspection bench, $(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), medians of $ROUNDS runs of ${DURATION}s, M = $STREAMS"
echo
# The client's share of a core: near 1.00, the client (not the proxy) set the figure.
echo "| configuration | per second | proxy CPU per request, us | client busy (share of a core) |"
echo "|---|---|---|---|"
for cfg in h1-1 h2-1 h2-M h1-M mitm-h2-M ws-direct ws-inspect; do
    echo "| $cfg | ${R[$cfg]} | ${C[$cfg]} | ${B[$cfg]} |"
done
echo
# Both the ratio of the medians and the median of the per-round ratios (the two runs of a
# round are minutes closer in time than the rounds are: steadier on a shared machine).
paired() { # a b
    if [ -s "$TMP/r-$1" ] && [ -s "$TMP/r-$2" ]; then
        paste "$TMP/r-$1" "$TMP/r-$2" | awk '$2 > 0 {print $1 / $2}' | median | xargs printf "%.2f"
    else
        echo -
    fi
}
line() { # what a b target
    echo "| $1 | $(ratio "${R[$2]}" "${R[$3]}") | $(paired "$2" "$3") | $4 |"
}
echo "| ratio | of medians | median of per-round | target |"
echo "|---|---|---|---|"
line "inspected h2, 1 connection, M streams / inspected HTTP/1.1 keep-alive, 1 connection" h2-M h1-1 ">= 1.0"
line "inspected h2, 1 connection, M streams / inspected HTTP/1.1, M connections" h2-M h1-M ""
line "inspected h2, 1 stream / inspected HTTP/1.1, 1 connection" h2-1 h1-1 ""
line "inspected h2 / mitmdump h2 (1 connection, M streams)" h2-M mitm-h2-M ">= 5"
echo "| the same per CPU-second (mitmdump CPU / proxy CPU per request) | $(ratio "${C[mitm-h2-M]}" "${C[h2-M]}") | | |"
line "WebSocket echo messages/s, inspected / direct" ws-inspect ws-direct ">= 0.5"
echo
echo "samples (per second, CPU us/request, client busy):"
for f in "$TMP"/r-* "$TMP"/cpu-* "$TMP"/busy-*; do
    [ -s "$f" ] && echo "  $(basename "$f"): $(tr '\n' ' ' <"$f")"
done
[ -n "$MITMDUMP" ] && echo "mitmdump: $("$MITMDUMP" --version 2>/dev/null | head -n 1)"
echo "nginx: $(nginx -v 2>&1)"
exit 0
