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
# `--otlp-endpoint http://127.0.0.1:9`), CANARIES=N (the requests go under a session made
# through the admin API with N canaries and every built-in detector, or with neither for
# N=0: compare the two for what the canaries' and detectors' scan costs a plain request).
# The proxy pins its one name with --resolve:
# nothing is resolved through the system resolver.
#
# After that line, the same difference per thread (callgrind --separate-threads=yes),
# each thread told by the function its profile runs from: the request path (the worker
# threads, `workers::worker_thread`), the audit writer (`audit::thread::writer_thread`
# and its blocking writes, `egress-audit-io`), the rest (the control plane's thread,
# its blocking pool); and the chain's share, the inclusive cost of `SEAL_FN` (default
# `Batch::seal`: the SHA-256 and the `seq`/`prev` fields of each line) on the workers
# and in the whole process, with the whole process less it (the same build without the
# chain's sealing). THREADS=0 prints the first line alone.
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
auth = f"Proxy-Authorization: {sys.argv[4]}\r\n" if len(sys.argv) > 4 else ""
conn = socket.create_connection(("127.0.0.1", port), timeout=60)
request = f"GET http://allowed.test:{origin}/ HTTP/1.1\r\nHost: allowed.test:{origin}\r\n{auth}\r\n".encode()
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

# A session for CANARIES: its `Proxy-Authorization` value.
cat >"$TMP/session.py" <<'PY'
import base64, http.client, json, sys
port, n, name = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
body = {"network_policy": {"type": "allowlist", "allowed_domains": [name]}}
if n:
    body["canaries"] = [{"kind": "generic"}] * n
    body["network_policy"]["dlp"] = {"detectors": [
        "aws_access_key_id", "github_token", "private_key", "slack_token",
        "google_api_key", "stripe_secret_key", "openai_api_key", "jwt"]}
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
conn.request("POST", "/v1/sessions", json.dumps(body), {"Content-Type": "application/json"})
answer = json.loads(conn.getresponse().read())
print("Basic " + base64.b64encode(f"{answer['id']}:{answer['token']}".encode()).decode())
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
    if [ -n "${CANARIES:-}" ] && [ -z "${READERS:-}" ]; then
        events+=(--admin-listen "127.0.0.1:$ADMIN_PORT")
    fi
    # shellcheck disable=SC2206 # split on spaces, as documented
    events+=(${PROXY_ARGS:-})
    EGRESS_PROXY_LOG=warn valgrind --tool=callgrind --callgrind-out-file="$TMP/callgrind.$1" \
        --separate-threads=yes \
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
    local auth=()
    if [ -n "${CANARIES:-}" ]; then
        wait_port "$ADMIN_PORT" 30
        auth=("$(python3 "$TMP/session.py" "$ADMIN_PORT" "$CANARIES" "allowed.test:$ORIGIN_PORT")")
    fi
    timeout 600 python3 "$TMP/client.py" "$PROXY_PORT" "$1" "$ORIGIN_PORT" "${auth[@]}"
    kill -TERM "$pid"
    wait "$pid" || true
    for reader in "${readers[@]}"; do
        kill "$reader" 2>/dev/null || true
        wait "$reader" 2>/dev/null || true
    done
    awk '/Collected/ {gsub(",", "", $4); print $4}' "$TMP/valgrind.$1.log"
}

# The instructions of one thread's profile (its `summary:` line).
summary() { # file
    awk '/^summary:/ {print $2; exit}' "$1"
}

# The inclusive instructions of the functions whose name holds $2 in profile $1 (0 when
# none ran there); callgrind_annotate counts a recursive call once.
inclusive() { # file pattern
    callgrind_annotate --inclusive=yes --threshold=100 "$1" 2>/dev/null |
        awk -v pat="$2" 'index($0, pat) {gsub(",", "", $1); n += $1} END {print n + 0}'
}

# Per run of $1 requests: "worker N", "audit N", "other N", "seal_workers N", "seal N",
# summed over the threads' profiles.
threads() { # requests
    local file kind worker=0 audit=0 other=0 seal_workers=0 seal=0 n s
    for file in "$TMP/callgrind.$1"-*; do
        n=$(summary "$file")
        s=$(inclusive "$file" "$SEAL_FN")
        if grep -q 'egress_proxy::workers::worker_thread' "$file"; then
            kind=worker
            seal_workers=$((seal_workers + s))
        elif grep -q -e 'egress_proxy::audit::thread::writer_thread' \
            -e 'egress_proxy::audit::batch::write_from' \
            -e 'egress_proxy::audit::writer::AuditWriter::write_out' "$file"; then
            kind=audit
        else
            kind=other
        fi
        seal=$((seal + s))
        case $kind in
        worker) worker=$((worker + n)) ;;
        audit) audit=$((audit + n)) ;;
        *) other=$((other + n)) ;;
        esac
    done
    echo "worker $worker audit $audit other $other seal_workers $seal_workers seal $seal"
}

SEAL_FN=${SEAL_FN:-Batch::seal}
few=$(count "$FEW")
many=$(count "$MANY")
total=$(( (many - few) / (MANY - FEW) ))
echo "instructions per keep-alive request (callgrind, one worker): $total"
if [ "${THREADS:-1}" != 0 ]; then
    read -r _ fw _ fa _ fo _ fsw _ fs <<<"$(threads "$FEW")"
    read -r _ mw _ ma _ mo _ msw _ ms <<<"$(threads "$MANY")"
    per() { echo $(( ($2 - $1) / (MANY - FEW) )); }
    seal=$(per "$fs" "$ms")
    echo "  request path (worker threads): $(per "$fw" "$mw"), of which $SEAL_FN: $(per "$fsw" "$msw")"
    echo "  audit writer thread and its writes: $(per "$fa" "$ma")"
    echo "  other threads (control plane, blocking pool): $(per "$fo" "$mo")"
    echo "  whole process: $total, of which $SEAL_FN: $seal; less it: $((total - seal))"
fi
# KEEP=DIR keeps both runs' callgrind files there, one a thread (`callgrind.RUN-NN`), for
# `callgrind_annotate` (the difference between the two is the requests' own cost).
if [ -n "${KEEP:-}" ]; then
    mkdir -p "$KEEP"
    cp "$TMP/callgrind.$FEW"-* "$TMP/callgrind.$MANY"-* "$KEEP/"
fi
