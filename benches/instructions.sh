#!/usr/bin/env bash
# User-space instructions the proxy spends per keep-alive request, counted by callgrind:
# repeatable on a shared machine where timings are not (by hand, not in CI).
#
#   cargo build --release && benches/instructions.sh
#
# Starts an nginx origin and the release proxy (one worker) under callgrind on loopback,
# sends FEW and then MANY keep-alive GETs over one client connection (a small Python
# client), and prints (instructions at MANY - instructions at FEW) / (MANY - FEW): the
# start-up cost cancels out. Needs valgrind, nginx and python3. Knobs (environment):
# FEW=500 MANY=2500 BASE_PORT=21200 KEEP=DIR (keep the callgrind files there) PROXY_BIN
# (default: the release build), RULES=1 (the
# entry is `{ host = ..., access = "read-only" }`, so each GET is judged by method and
# normalised path), BUDGET=N (`[limits] upload_bytes = N`, so each request is drawn from
# an upload budget; make N larger than the run sends, about 60 bytes a request, or the
# proxy refuses and the client stops), READERS=N (with --audit-allowed, so every request
# writes a record, and N `curl -N` readers of the admin API's `GET /v1/events`; compare
# with READERS=0, the same records and no reader), STUCK=1 (with READERS, one more reader
# that never reads), AUDIT_ALLOWED=1 (--audit-allowed alone: a record per request, each
# sealed by the chain), PROXY_ARGS="..." (more flags for the proxy, split on spaces, e.g.
# `--otlp-endpoint http://127.0.0.1:9`). The proxy pins its one name with --resolve:
# nothing is resolved through the system resolver.
set -euo pipefail

FEW=${FEW:-500}
MANY=${MANY:-2500}
BASE_PORT=${BASE_PORT:-21200}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PROXY_BIN=${PROXY_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/egress-proxy}
ORIGIN_PORT=$BASE_PORT
PROXY_PORT=$((BASE_PORT + 1))
ADMIN_PORT=$((BASE_PORT + 2))
for tool in valgrind nginx python3; do
    command -v "$tool" >/dev/null || { echo "instructions.sh: $tool is needed" >&2; exit 2; }
done
[ -x "$PROXY_BIN" ] || { echo "instructions.sh: no proxy binary at $PROXY_BIN" >&2; exit 2; }

source "$ROOT/benches/common.sh"
bench_tmp instructions

mkdir -p "$TMP/www"
head -c 256 /dev/zero | tr '\0' 'x' >"$TMP/www/index.html"
cat >"$TMP/nginx.conf" <<CONF
daemon off; master_process off; worker_processes 1; pid $TMP/nginx.pid;
error_log $TMP/nginx-error.log warn;
events { worker_connections 64; }
http {
    access_log off; keepalive_requests 1000000;
    client_body_temp_path $TMP/b; proxy_temp_path $TMP/p; fastcgi_temp_path $TMP/f;
    uwsgi_temp_path $TMP/u; scgi_temp_path $TMP/s;
    server { listen 127.0.0.1:$ORIGIN_PORT; root $TMP/www; }
}
CONF
nginx -p "$TMP" -c "$TMP/nginx.conf" &
PIDS+=($!)
wait_port "$ORIGIN_PORT"
entry="\"allowed.test:$ORIGIN_PORT\""
if [ "${RULES:-0}" = 1 ]; then
    entry="{ host = \"allowed.test:$ORIGIN_PORT\", access = \"read-only\" }"
fi
cat >"$TMP/org.toml" <<CONF
version = 1
allowed_domains = [$entry]
allowed_cidrs = ["127.0.0.0/8"]
default_network_policy = { type = "allowlist", allowed_domains = [$entry] }
CONF
if [ -n "${BUDGET:-}" ]; then
    printf '\n[limits]\nupload_bytes = %s\n' "$BUDGET" >>"$TMP/org.toml"
fi
cat >"$TMP/client.py" <<'PY'
import socket, sys
port, count, origin = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
conn = socket.create_connection(("127.0.0.1", port), timeout=60)
request = f"GET http://allowed.test:{origin}/ HTTP/1.1\r\nHost: allowed.test:{origin}\r\n\r\n".encode()
buf = b""
for _ in range(count):
    conn.sendall(request)
    while True:
        end = buf.find(b"\r\n\r\n")
        if end >= 0:
            head = buf[:end].decode()
            length = next(int(l.split(":")[1]) for l in head.split("\r\n")[1:]
                          if l.lower().startswith("content-length:"))
            if len(buf) >= end + 4 + length:
                assert head.startswith("HTTP/1.1 200"), head
                buf = buf[end + 4 + length:]
                break
        data = conn.recv(65536)
        assert data, "the proxy closed the connection"
        buf += data
PY

cat >"$TMP/stuck.py" <<'PY'
import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
s.connect(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"GET /v1/events HTTP/1.1\r\nHost: admin\r\n\r\n")
time.sleep(3600)
PY

# Instructions the proxy ran, start to exit, serving $1 requests.
count() {
    local pid readers=()
    local events=()
    if [ -n "${READERS:-}" ]; then
        events=(--audit-allowed --admin-listen "127.0.0.1:$ADMIN_PORT")
    elif [ "${AUDIT_ALLOWED:-0}" = 1 ]; then
        events=(--audit-allowed)
    fi
    # shellcheck disable=SC2206 # split on spaces, as documented
    events+=(${PROXY_ARGS:-})
    EGRESS_PROXY_LOG=warn valgrind --tool=callgrind --callgrind-out-file="$TMP/callgrind.$1" \
        "$PROXY_BIN" serve --org "$TMP/org.toml" --listen "127.0.0.1:$PROXY_PORT" --workers 1 \
        --resolve allowed.test=127.0.0.1 --dns-server 127.0.0.1:9 "${events[@]}" \
        --audit-log "$TMP/audit.jsonl" 2>"$TMP/valgrind.$1.log" &
    pid=$!
    PIDS+=($pid)
    wait_port "$PROXY_PORT" 30
    if [ -n "${READERS:-}" ]; then
        for _ in $(seq 1 "$READERS"); do
            curl -sN "http://127.0.0.1:$ADMIN_PORT/v1/events" >/dev/null &
            readers+=($!)
        done
        if [ "${STUCK:-0}" = 1 ]; then
            python3 "$TMP/stuck.py" "$ADMIN_PORT" &
            readers+=($!)
        fi
        PIDS+=("${readers[@]}")
        sleep 2
    fi
    timeout 600 python3 "$TMP/client.py" "$PROXY_PORT" "$1" "$ORIGIN_PORT"
    kill -TERM "$pid"
    wait "$pid" || true
    for reader in "${readers[@]}"; do
        kill "$reader" 2>/dev/null || true
        wait "$reader" 2>/dev/null || true
    done
    awk '/Collected/ {gsub(",", "", $4); print $4}' "$TMP/valgrind.$1.log"
}

few=$(count "$FEW")
many=$(count "$MANY")
echo "instructions per keep-alive request (callgrind, one worker): $(( (many - few) / (MANY - FEW) ))"
# KEEP=DIR keeps both runs' callgrind files there, for `callgrind_annotate` (the
# difference between the two is the requests' own cost).
if [ -n "${KEEP:-}" ]; then
    mkdir -p "$KEEP"
    cp "$TMP/callgrind.$FEW" "$TMP/callgrind.$MANY" "$KEEP/"
fi
