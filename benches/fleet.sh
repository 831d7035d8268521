#!/usr/bin/env bash
# The fleet's load harness (issue 16, docs/scale-out.md "Capacity per replica"): keep-alive
# requests per second under session credentials, a replica with the Redis session store
# against one with the memory store, measured in the same run on loopback; and the Redis
# commands each request costs. Run by hand, not by CI:
#
#   cargo build --release && benches/fleet.sh
#
# It starts, in a fresh temp dir, an nginx origin (a small body), a redis-server (no
# persistence), and two release proxies with the admin API on loopback: one with
# `--session-store memory`, one with `--session-store redis://`. A session is created
# on each; wrk drives each proxy with absolute-form requests carrying the session's
# `Proxy-Authorization` (from a Lua script: wrk has no proxy option), the two
# interleaved ROUNDS times, each first in every other round. It prints the median
# requests/s of each, the median of the per-round ratios redis/memory (target: at least
# 0.9), the proxies' CPU time (user + system) per request, which moves less than
# throughput on a shared machine, and the Redis commands per request over the Redis
# rounds, from `INFO commandstats` (reset before them, the
# harness's own INFO and CONFIG calls left out; target: well under one). The name is
# pinned with --resolve; every process it starts is recorded by PID and killed on exit;
# every load run is bounded.
#
# With BUDGET=N each session's policy has `"max_upload_bytes": N`: on the Redis store the
# budget is the fleet's, drawn in slices (docs/scale-out.md, "One upload budget"), so the
# run shows what a budget costs a request there (req/s, and the EVALs among the
# commands). Give a budget the whole run cannot spend (a refused request stops the run):
# BUDGET=100000000000.
#
# Knobs (environment): ROUNDS=5 DURATION=5 CONNS=50 THREADS=2 BASE_PORT=21300 BUDGET
# (none) PROXY_BIN (default: the release build). Ports BASE_PORT to BASE_PORT + 5.

set -euo pipefail

ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-5}
CONNS=${CONNS:-50}
THREADS=${THREADS:-2}
BASE_PORT=${BASE_PORT:-21300}
BUDGET=${BUDGET:-}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PROXY_BIN=${PROXY_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/egress-proxy}

HTTP_PORT=$BASE_PORT
REDIS_PORT=$((BASE_PORT + 1))
NAME=allowed.test
declare -A PORT=([memory]=$((BASE_PORT + 2)) [redis]=$((BASE_PORT + 4)))
declare -A ADMIN=([memory]=$((BASE_PORT + 3)) [redis]=$((BASE_PORT + 5)))

for tool in wrk nginx curl redis-server redis-cli python3; do
    command -v "$tool" >/dev/null || { echo "fleet.sh: $tool is needed" >&2; exit 2; }
done
[ -x "$PROXY_BIN" ] || { echo "fleet.sh: no proxy binary at $PROXY_BIN (cargo build --release)" >&2; exit 2; }
for port in $(seq "$BASE_PORT" $((BASE_PORT + 5))); do
    if ss -Htln "sport = :$port" | grep -q .; then
        echo "fleet.sh: port $port is taken (set BASE_PORT)" >&2
        exit 2
    fi
done

source "$ROOT/benches/common.sh"
bench_tmp fleet
# CPU time (user + system) a process has used, in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
TICK=$(getconf CLK_TCK)
declare -A PID
median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

# --- the origin and Redis -----------------------------------------------------------------
mkdir -p "$TMP/www" "$TMP/nginx"
head -c 256 /dev/zero | tr '\0' 'x' >"$TMP/www/index.html"
start_nginx "$HTTP_PORT"
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$TMP" >"$TMP/redis.log" 2>&1 &
PIDS+=($!)
wait_port "$REDIS_PORT"

# --- the two proxies, a session on each -------------------------------------------------
cat >"$TMP/org.toml" <<EOF
version = 1
name = "fleet-load"
allowed_domains = ["$NAME:$HTTP_PORT"]
allowed_cidrs = ["127.0.0.0/8"]
EOF
for store in memory redis; do
    url=memory
    [ "$store" = redis ] && url="redis://127.0.0.1:$REDIS_PORT"
    EGRESS_PROXY_LOG=warn "$PROXY_BIN" serve --org "$TMP/org.toml" \
        --listen "127.0.0.1:${PORT[$store]}" --admin-listen "127.0.0.1:${ADMIN[$store]}" \
        --session-store "$url" --require-session \
        --resolve "$NAME=127.0.0.1" --dns-server 127.0.0.1:9 \
        --audit-log "$TMP/audit-$store.jsonl" 2>>"$TMP/proxy-$store.log" &
    PIDS+=($!)
    PID[$store]=$!
    wait_port "${PORT[$store]}"
    wait_port "${ADMIN[$store]}"
    limit=""
    [ -n "$BUDGET" ] && limit=', "max_upload_bytes": '$BUDGET
    body='{"network_policy": {"type": "allowlist", "allowed_domains": ["'$NAME:$HTTP_PORT'"]'$limit'}}'
    created=$(curl -sf -H "Content-Type: application/json" "http://127.0.0.1:${ADMIN[$store]}/v1/sessions" -d "$body")
    auth=$(python3 -c 'import base64, json, sys; s = json.loads(sys.argv[1]); print(base64.b64encode((s["id"] + ":" + s["token"]).encode()).decode())' "$created")
    cat >"$TMP/$store.lua" <<EOF
wrk.path = "http://$NAME:$HTTP_PORT/"
wrk.headers["Host"] = "$NAME:$HTTP_PORT"
wrk.headers["Proxy-Authorization"] = "Basic $auth"
EOF
    # One request first: the session works, and the Redis replica holds its copy.
    code=$(curl -s -o /dev/null -w '%{http_code}' -x "127.0.0.1:${PORT[$store]}" \
        -H "Proxy-Authorization: Basic $auth" "http://$NAME:$HTTP_PORT/")
    [ "$code" = 200 ] || { echo "fleet.sh: a session request through the $store proxy got $code" >&2; exit 2; }
done

# --- the runs -------------------------------------------------------------------------------
# wrk's requests/s, its request count, its non-2xx count ("Non-2xx" line, 0 if none),
# and the proxy's CPU microseconds per request.
run_wrk() { # store
    local before after rps total bad
    before=$(cpu_ticks "${PID[$1]}")
    wrk -t "$THREADS" -c "$CONNS" -d "${DURATION}s" -s "$TMP/$1.lua" \
        "http://127.0.0.1:${PORT[$1]}" >"$TMP/wrk.out"
    after=$(cpu_ticks "${PID[$1]}")
    rps=$(awk '/^Requests\/sec/ {print $2}' "$TMP/wrk.out")
    total=$(awk '/requests in/ {print $1}' "$TMP/wrk.out")
    bad=$(awk '/Non-2xx/ {print $NF}' "$TMP/wrk.out")
    echo "$rps ${total:-0} ${bad:-0} $(python3 -c "print(($after - $before) * 1e6 / $TICK / max(${total:-0}, 1))")"
}
redis-cli -p "$REDIS_PORT" CONFIG RESETSTAT >/dev/null
: >"$TMP/memory.rps"
: >"$TMP/redis.rps"
: >"$TMP/ratio"
: >"$TMP/memory.cpu"
: >"$TMP/redis.cpu"
redis_requests=0
for round in $(seq "$ROUNDS"); do
    # Alternate which goes first, so neither always runs in the other's wake.
    if [ $((round % 2)) = 1 ]; then
        read -r mem_rps _ mem_bad mem_cpu <<<"$(run_wrk memory)"
        read -r red_rps red_total red_bad red_cpu <<<"$(run_wrk redis)"
    else
        read -r red_rps red_total red_bad red_cpu <<<"$(run_wrk redis)"
        read -r mem_rps _ mem_bad mem_cpu <<<"$(run_wrk memory)"
    fi
    if [ "$mem_bad" != 0 ] || [ "$red_bad" != 0 ]; then
        echo "fleet.sh: round $round had refused requests (memory $mem_bad, redis $red_bad)" >&2
        exit 2
    fi
    echo "$mem_rps" >>"$TMP/memory.rps"
    echo "$red_rps" >>"$TMP/redis.rps"
    echo "$mem_cpu" >>"$TMP/memory.cpu"
    echo "$red_cpu" >>"$TMP/redis.cpu"
    python3 -c "print($red_rps / $mem_rps)" >>"$TMP/ratio"
    redis_requests=$((redis_requests + red_total))
    echo "round $round: memory $mem_rps req/s ${mem_cpu} us CPU/req, redis $red_rps req/s ${red_cpu} us CPU/req" >&2
done
commands=$(redis-cli -p "$REDIS_PORT" INFO commandstats | tr -d '\r' |
    awk -F'[:,=]' '/^cmdstat_/ && $1 !~ /cmdstat_(info|config)/ {n += $3} END {print n + 0}')
per_command=$(redis-cli -p "$REDIS_PORT" INFO commandstats | tr -d '\r' |
    awk -F'[:,=]' '/^cmdstat_/ && $1 !~ /cmdstat_(info|config)/ {printf "%s=%s ", substr($1, 9), $3}')

echo
echo "| store | keep-alive req/s (median of $ROUNDS) | proxy CPU per request (us, median) |"
echo "|---|---|---|"
echo "| memory | $(median <"$TMP/memory.rps") | $(median <"$TMP/memory.cpu" | xargs printf '%.2f') |"
echo "| redis | $(median <"$TMP/redis.rps") | $(median <"$TMP/redis.cpu" | xargs printf '%.2f') |"
echo
echo "redis / memory, median of the per-round ratios: $(median <"$TMP/ratio" | xargs printf '%.3f')"
echo "Redis commands over the redis rounds: $commands for $redis_requests requests" \
    "($(python3 -c "print(f'{$commands / max($redis_requests, 1):.6f}')") per request): $per_command"
