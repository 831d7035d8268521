#!/usr/bin/env bash
# What event readers cost the request path (issue 25, docs/reference/control-plane.md
# "Events"): keep-alive requests/s with no reader of `GET /v1/events`, with ten readers
# attached, and with one stuck reader (it asks for the stream and never reads), measured
# in the same run on loopback. Run by hand, not by CI:
#
#   cargo build --release && benches/events.sh
#
# It starts, in a fresh temp dir, an nginx origin (a small body) and the release proxy
# with the admin API on loopback and `--audit-allowed`, so every request writes a record
# and every record goes to every reader. Each round runs wrk (absolute-form requests from
# a Lua script: wrk has no proxy option) once per configuration, in a rotating order:
# `none`; `ten`, ten `curl -N` readers of the stream writing to /dev/null, attached
# before the run and stopped after it; `stuck`, one reader that sends the request and
# never reads (a 4 KiB receive buffer), which the proxy drops once its queue is full.
# It prints the median requests/s of each, the medians of the per-round ratios ten/none
# and stuck/none (target: at least 0.97 each), the proxy's CPU per request, and checks
# that the audit log holds a record for every request wrk completed (the stream never
# costs the log a record). The name is pinned with --resolve; every process it starts
# is recorded by PID and killed on exit; every run is bounded.
#
# Knobs (environment): ROUNDS=5 DURATION=5 CONNS=50 THREADS=2 BASE_PORT=21600
# PROXY_BIN (default: the release build). Ports BASE_PORT to BASE_PORT + 2.

set -euo pipefail

ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-5}
CONNS=${CONNS:-50}
THREADS=${THREADS:-2}
BASE_PORT=${BASE_PORT:-21600}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PROXY_BIN=${PROXY_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/egress-proxy}

HTTP_PORT=$BASE_PORT
PROXY_PORT=$((BASE_PORT + 1))
ADMIN_PORT=$((BASE_PORT + 2))
NAME=allowed.test

for tool in wrk nginx curl python3; do
    command -v "$tool" >/dev/null || { echo "events.sh: $tool is needed" >&2; exit 2; }
done
[ -x "$PROXY_BIN" ] || { echo "events.sh: no proxy binary at $PROXY_BIN (cargo build --release)" >&2; exit 2; }
for port in $(seq "$BASE_PORT" $((BASE_PORT + 2))); do
    if ss -Htln "sport = :$port" | grep -q .; then
        echo "events.sh: port $port is taken (set BASE_PORT)" >&2
        exit 2
    fi
done

source "$ROOT/benches/common.sh"
bench_tmp events
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
TICK=$(getconf CLK_TCK)
median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

mkdir -p "$TMP/www" "$TMP/nginx"
head -c 256 /dev/zero | tr '\0' 'x' >"$TMP/www/index.html"
start_nginx "$HTTP_PORT"

dest="$NAME:$HTTP_PORT"
printf '%s\n' 'version = 1' 'name = "events-load"' "allowed_domains = [\"$dest\"]" \
    'allowed_cidrs = ["127.0.0.0/8"]' \
    "default_network_policy = { type = \"allowlist\", allowed_domains = [\"$dest\"] }" \
    >"$TMP/org.toml"
EGRESS_PROXY_LOG=warn "$PROXY_BIN" serve --org "$TMP/org.toml" \
    --listen "127.0.0.1:$PROXY_PORT" --admin-listen "127.0.0.1:$ADMIN_PORT" \
    --resolve "$NAME=127.0.0.1" --dns-server 127.0.0.1:9 --audit-allowed \
    --audit-log "$TMP/audit.jsonl" 2>>"$TMP/proxy.log" &
PIDS+=($!)
PROXY_PID=$!
wait_port "$PROXY_PORT"
wait_port "$ADMIN_PORT"
printf 'wrk.path = "http://%s:%s/"\nwrk.headers["Host"] = "%s:%s"\n' \
    "$NAME" "$HTTP_PORT" "$NAME" "$HTTP_PORT" >"$TMP/ka.lua"
code=$(curl -s -o /dev/null -w '%{http_code}' -x "127.0.0.1:$PROXY_PORT" "http://$NAME:$HTTP_PORT/")
[ "$code" = 200 ] || { echo "events.sh: a request through the proxy got $code" >&2; exit 2; }

# The stuck reader: asks for the stream, never reads, holds on until killed.
printf '%s\n' 'import socket, sys, time' \
    's = socket.socket()' \
    's.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)' \
    's.connect(("127.0.0.1", int(sys.argv[1])))' \
    's.sendall(b"GET /v1/events HTTP/1.1\r\nHost: admin\r\n\r\n")' \
    'time.sleep(float(sys.argv[2]))' >"$TMP/stuck.py"

READERS=()
attach() { # config
    READERS=()
    case $1 in
        ten)
            for _ in $(seq 10); do
                curl -sN "http://127.0.0.1:$ADMIN_PORT/v1/events" >/dev/null 2>&1 &
                READERS+=($!)
                PIDS+=($!)
            done ;;
        stuck)
            python3 "$TMP/stuck.py" "$ADMIN_PORT" $((DURATION + 30)) &
            READERS+=($!)
            PIDS+=($!) ;;
    esac
    sleep 0.5 # subscribed before the load starts
}
detach() {
    local pid
    for pid in "${READERS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${READERS[@]}"; do wait "$pid" 2>/dev/null || true; done
}

# wrk's requests/s, its request count, its non-2xx count, and the proxy's CPU
# microseconds per request.
run_wrk() {
    local before after rps total bad
    before=$(cpu_ticks "$PROXY_PID")
    timeout $((DURATION + 30)) wrk -t "$THREADS" -c "$CONNS" -d "${DURATION}s" \
        -s "$TMP/ka.lua" "http://127.0.0.1:$PROXY_PORT" >"$TMP/wrk.out"
    after=$(cpu_ticks "$PROXY_PID")
    rps=$(awk '/^Requests\/sec/ {print $2}' "$TMP/wrk.out")
    total=$(awk '/requests in/ {print $1}' "$TMP/wrk.out")
    bad=$(awk '/Non-2xx/ {print $NF}' "$TMP/wrk.out")
    echo "$rps ${total:-0} ${bad:-0} $(python3 -c "print(($after - $before) * 1e6 / $TICK / max(${total:-0}, 1))")"
}

CONFIGS=(none ten stuck)
completed=1 # the first curl request
for c in "${CONFIGS[@]}"; do : >"$TMP/$c.rps"; : >"$TMP/$c.cpu"; done
: >"$TMP/ten.ratio"
: >"$TMP/stuck.ratio"
declare -A RPS
for round in $(seq "$ROUNDS"); do
    line="round $round:"
    for i in 0 1 2; do
        c=${CONFIGS[$(((i + round) % 3))]}
        attach "$c"
        read -r rps total bad cpu <<<"$(run_wrk)"
        detach
        [ "$bad" = 0 ] || { echo "events.sh: round $round ($c) had $bad refused requests" >&2; exit 2; }
        completed=$((completed + total))
        RPS[$c]=$rps
        echo "$rps" >>"$TMP/$c.rps"
        echo "$cpu" >>"$TMP/$c.cpu"
        line="$line $c $rps req/s ${cpu} us CPU/req,"
    done
    python3 -c "print(${RPS[ten]} / ${RPS[none]})" >>"$TMP/ten.ratio"
    python3 -c "print(${RPS[stuck]} / ${RPS[none]})" >>"$TMP/stuck.ratio"
    echo "$line" >&2
done

# Every completed request has its record (the writer may still be flushing the last).
sleep 1
records=$(wc -l <"$TMP/audit.jsonl")

echo
echo "| readers | keep-alive req/s (median of $ROUNDS) | proxy CPU per request (us, median) |"
echo "|---|---|---|"
for c in "${CONFIGS[@]}"; do
    echo "| $c | $(median <"$TMP/$c.rps") | $(median <"$TMP/$c.cpu" | xargs printf '%.2f') |"
done
echo
echo "ten / none, median of the per-round ratios: $(median <"$TMP/ten.ratio" | xargs printf '%.3f') (target >= 0.97)"
echo "stuck / none, median of the per-round ratios: $(median <"$TMP/stuck.ratio" | xargs printf '%.3f') (target >= 0.97)"
echo "audit log: $records records for $completed completed requests"
if [ "$records" -lt "$completed" ]; then
    echo "events.sh: the audit log lacks $((completed - records)) records" >&2
    exit 1
fi
