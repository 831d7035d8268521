#!/usr/bin/env bash
# What the OpenTelemetry export costs the request path when its collector fails
# (docs/reference/opentelemetry.md, "Delivery"): keep-alive requests/s of three proxies
# with `--audit-allowed` (a record, so a log and a span, per request): `none`, no
# exporter; `stopped`, `--otlp-endpoint` at a port nothing listens on; `slow`, at a
# collector that waits 10 s before each answer. Run by hand, not by CI:
#
#   cargo build --release && benches/otlp.sh
#
# It starts, in a fresh temp dir, an nginx origin (a small body), the slow collector (a
# Python HTTP server on loopback that reads each body, sleeps 10 s, answers 200) and the
# three release proxies, all on loopback; each round runs wrk (absolute-form requests
# from a Lua script) against each proxy in a rotating order. It prints the median
# requests/s of each, the medians of the per-round ratios stopped/none and slow/none,
# the proxy CPU per request, each proxy's `egress_otlp_dropped_total`, and checks that
# each audit log holds a record for every request wrk completed. The name is pinned with
# --resolve; every process it starts is recorded by PID and killed on exit.
#
# Knobs (environment): ROUNDS=5 DURATION=5 CONNS=50 THREADS=2 BASE_PORT=21800
# PROXY_BIN (default: the release build). Ports BASE_PORT to BASE_PORT + 8.

set -euo pipefail

ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-5}
CONNS=${CONNS:-50}
THREADS=${THREADS:-2}
BASE_PORT=${BASE_PORT:-21800}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PROXY_BIN=${PROXY_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/egress-proxy}

HTTP_PORT=$BASE_PORT
SLOW_PORT=$((BASE_PORT + 1))
STOPPED_PORT=$((BASE_PORT + 2)) # nothing listens there
NAME=allowed.test

for tool in wrk nginx curl python3; do
    command -v "$tool" >/dev/null || { echo "otlp.sh: $tool is needed" >&2; exit 2; }
done
[ -x "$PROXY_BIN" ] || { echo "otlp.sh: no proxy binary at $PROXY_BIN (cargo build --release)" >&2; exit 2; }
for port in $(seq "$BASE_PORT" $((BASE_PORT + 8))); do
    if ss -Htln "sport = :$port" | grep -q .; then
        echo "otlp.sh: port $port is taken (set BASE_PORT)" >&2
        exit 2
    fi
done

source "$ROOT/benches/common.sh"
bench_tmp otlp
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
TICK=$(getconf CLK_TCK)
median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

mkdir -p "$TMP/www" "$TMP/nginx"
head -c 256 /dev/zero | tr '\0' 'x' >"$TMP/www/index.html"
start_nginx "$HTTP_PORT"

cat >"$TMP/slow.py" <<'PY'
import sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
class Slow(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        time.sleep(10)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Slow)
server.daemon_threads = True
server.serve_forever()
PY
python3 "$TMP/slow.py" "$SLOW_PORT" &
PIDS+=($!)
wait_port "$SLOW_PORT"

dest="$NAME:$HTTP_PORT"
printf '%s\n' 'version = 1' 'name = "otlp-load"' "allowed_domains = [\"$dest\"]" \
    'allowed_cidrs = ["127.0.0.0/8"]' \
    "default_network_policy = { type = \"allowlist\", allowed_domains = [\"$dest\"] }" \
    >"$TMP/org.toml"

CONFIGS=(none stopped slow)
declare -A PORT ADMIN PID
start_proxy() { # config index
    local c=$1 i=$2 otlp=()
    PORT[$c]=$((BASE_PORT + 3 + 2 * i))
    ADMIN[$c]=$((BASE_PORT + 4 + 2 * i))
    case $c in
        stopped) otlp=(--otlp-endpoint "http://127.0.0.1:$STOPPED_PORT") ;;
        slow) otlp=(--otlp-endpoint "http://127.0.0.1:$SLOW_PORT") ;;
    esac
    EGRESS_PROXY_LOG=error "$PROXY_BIN" serve --org "$TMP/org.toml" \
        --listen "127.0.0.1:${PORT[$c]}" --admin-listen "127.0.0.1:${ADMIN[$c]}" \
        --resolve "$NAME=127.0.0.1" --dns-server 127.0.0.1:9 --audit-allowed \
        --audit-log "$TMP/$c.jsonl" "${otlp[@]}" 2>>"$TMP/proxy-$c.log" &
    PID[$c]=$!
    PIDS+=($!)
    wait_port "${PORT[$c]}"
    wait_port "${ADMIN[$c]}"
}
for i in 0 1 2; do start_proxy "${CONFIGS[$i]}" "$i"; done
printf 'wrk.path = "http://%s:%s/"\nwrk.headers["Host"] = "%s:%s"\n' \
    "$NAME" "$HTTP_PORT" "$NAME" "$HTTP_PORT" >"$TMP/ka.lua"

# wrk's requests/s, its request count, its non-2xx count, and the proxy's CPU
# microseconds per request.
run_wrk() { # config
    local before after rps total bad
    before=$(cpu_ticks "${PID[$1]}")
    timeout $((DURATION + 30)) wrk -t "$THREADS" -c "$CONNS" -d "${DURATION}s" \
        -s "$TMP/ka.lua" "http://127.0.0.1:${PORT[$1]}" >"$TMP/wrk.out"
    after=$(cpu_ticks "${PID[$1]}")
    rps=$(awk '/^Requests\/sec/ {print $2}' "$TMP/wrk.out")
    total=$(awk '/requests in/ {print $1}' "$TMP/wrk.out")
    bad=$(awk '/Non-2xx/ {print $NF}' "$TMP/wrk.out")
    echo "$rps ${total:-0} ${bad:-0} $(python3 -c "print(($after - $before) * 1e6 / $TICK / max(${total:-0}, 1))")"
}

declare -A COMPLETED RPS
for c in "${CONFIGS[@]}"; do : >"$TMP/$c.rps"; : >"$TMP/$c.cpu"; COMPLETED[$c]=0; done
: >"$TMP/stopped.ratio"
: >"$TMP/slow.ratio"
for round in $(seq "$ROUNDS"); do
    line="round $round:"
    for i in 0 1 2; do
        c=${CONFIGS[$(((i + round) % 3))]}
        read -r rps total bad cpu <<<"$(run_wrk "$c")"
        [ "$bad" = 0 ] || { echo "otlp.sh: round $round ($c) had $bad refused requests" >&2; exit 2; }
        COMPLETED[$c]=$((COMPLETED[$c] + total))
        RPS[$c]=$rps
        echo "$rps" >>"$TMP/$c.rps"
        echo "$cpu" >>"$TMP/$c.cpu"
        line="$line $c $rps req/s ${cpu} us CPU/req,"
    done
    python3 -c "print(${RPS[stopped]} / ${RPS[none]})" >>"$TMP/stopped.ratio"
    python3 -c "print(${RPS[slow]} / ${RPS[none]})" >>"$TMP/slow.ratio"
    echo "$line" >&2
done

sleep 1
echo
echo "| exporter | keep-alive req/s (median of $ROUNDS) | proxy CPU per request (us, median) | audit records / completed requests | egress_otlp_dropped_total |"
echo "|---|---|---|---|---|"
short=0
for c in "${CONFIGS[@]}"; do
    records=$(wc -l <"$TMP/$c.jsonl")
    dropped=$(curl -s "http://127.0.0.1:${ADMIN[$c]}/metrics" | awk '/^egress_otlp_dropped_total/ {s = s $1 "=" $2 " "} END {print s}' | sed 's/egress_otlp_dropped_total//g')
    echo "| $c | $(median <"$TMP/$c.rps") | $(median <"$TMP/$c.cpu" | xargs printf '%.2f') | $records / ${COMPLETED[$c]} | ${dropped:-0} |"
    [ "$records" -ge "${COMPLETED[$c]}" ] || short=1
done
echo
echo "stopped / none, median of the per-round ratios: $(median <"$TMP/stopped.ratio" | xargs printf '%.3f')"
echo "slow / none, median of the per-round ratios: $(median <"$TMP/slow.ratio" | xargs printf '%.3f')"
if [ "$short" = 1 ]; then
    echo "otlp.sh: an audit log lacks records" >&2
    exit 1
fi
