#!/usr/bin/env bash
# DNS answers per second and their latency: the proxy's DNS listener (`serve
# --dns-listen`) against dnsmasq answering the same names from a hosts file, measured in
# the same run, on loopback only. Run by hand, not by CI:
#
#   cargo build --release && benches/dns.sh
#
# Needs dnsmasq and dnsperf (`apt-get install -y dnsmasq dnsperf`). In a fresh temp dir it
# writes NAMES names under bench.test (all allowed by the organization and the proxy's
# --policy; the same names in dnsmasq's hosts file), starts both servers on loopback
# ports, asks every name once (the proxy hands out its synthetic addresses), then, ROUNDS
# times and alternating which goes first:
#
# - throughput: dnsperf as fast as the server answers (CLIENTS sockets, OUTSTANDING
#   queries in flight) for DURATION seconds: answers per second (median of the rounds),
#   with the server's CPU time per answer;
# - latency: dnsperf at a fixed RATE queries per second, each answer's latency recorded
#   (`dnsperf -v`): p50 and p99 (median of the rounds). At saturation a latency is mostly
#   time in the queue, which the throughput already says; at a rate both servers keep up
#   with, it is the time each takes to answer. On a shared machine the tail is then other
#   processes' doing, so with RT=1 (the default) the server and dnsperf run this phase
#   under SCHED_FIFO (`chrt`; a light load, RATE/s, so nothing else is starved).
#
# Both are also given as the median of per-round ratios: the two servers of a round run
# back to back, under much the same load from the rest of the machine.
#
# Every answer must be NOERROR, or the run stops: a policy that denied the names would
# measure NXDOMAIN instead. Targets: at least 1.0 of dnsmasq's rate, p99 no worse.
#
# Knobs (environment): ROUNDS=3 DURATION=5 NAMES=100 CLIENTS=4 OUTSTANDING=100 RATE=20000
# RT=1 BASE_PORT=21500 PROXY_BIN (default: the release build).

set -euo pipefail

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
NAMES=${NAMES:-100}
CLIENTS=${CLIENTS:-4}
OUTSTANDING=${OUTSTANDING:-100}
RATE=${RATE:-20000}
RT=${RT:-1}
BASE_PORT=${BASE_PORT:-21500}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PROXY_BIN=${PROXY_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/egress-proxy}

PROXY_PORT=$BASE_PORT
PROXY_DNS_PORT=$((BASE_PORT + 1))
DNSMASQ_PORT=$((BASE_PORT + 2))

for tool in dnsmasq dnsperf awk sort; do
    command -v "$tool" >/dev/null || { echo "dns.sh: $tool is needed (apt-get install -y dnsmasq dnsperf)" >&2; exit 2; }
done
[ -x "$PROXY_BIN" ] || { echo "dns.sh: no proxy binary at $PROXY_BIN (cargo build --release)" >&2; exit 2; }
for port in $PROXY_PORT $PROXY_DNS_PORT $DNSMASQ_PORT; do
    if ss -Huln "sport = :$port" | grep -q . || ss -Htln "sport = :$port" | grep -q .; then
        echo "dns.sh: port $port is taken (set BASE_PORT)" >&2
        exit 2
    fi
done

# shellcheck source=benches/common.sh
source "$(dirname "$0")/common.sh"
bench_tmp dns

# The names, the query file, dnsmasq's hosts file (addresses of the same range).
for i in $(seq 0 $((NAMES - 1))); do
    echo "n$i.bench.test A" >>"$TMP/queries.txt"
    echo "198.18.$((i / 250)).$((i % 250 + 1)) n$i.bench.test" >>"$TMP/hosts"
done
cat >"$TMP/org.toml" <<'EOF'
version = 1
name = "dns-bench"
allowed_domains = ["*.bench.test"]
default_network_policy = { type = "allowlist", allowed_domains = ["*.bench.test"] }
EOF

# dnsmasq: the hosts file only (no upstream, no /etc/hosts), TTL 60 like the proxy's.
dnsmasq --keep-in-foreground --no-resolv --no-hosts --addn-hosts="$TMP/hosts" \
    --listen-address=127.0.0.1 --bind-interfaces --port="$DNSMASQ_PORT" \
    --local-ttl=60 --cache-size=10000 --pid-file= --user="$(id -un)" \
    >"$TMP/dnsmasq.log" 2>&1 &
DNSMASQ_PID=$!
PIDS+=("$DNSMASQ_PID")
# The proxy: its upstream is dnsmasq, which the DNS listener never asks (the names are
# answered from the policy); named only so nothing could reach the system resolver.
"$PROXY_BIN" serve --org "$TMP/org.toml" --listen "127.0.0.1:$PROXY_PORT" \
    --dns-listen "127.0.0.1:$PROXY_DNS_PORT" --dns-server "127.0.0.1:$DNSMASQ_PORT" \
    --audit-log "$TMP/audit.jsonl" >"$TMP/proxy.log" 2>&1 &
PROXY_PID=$!
PIDS+=("$PROXY_PID")
wait_port "$PROXY_PORT"
wait_port "$PROXY_DNS_PORT"

port_of() { case $1 in proxy) echo "$PROXY_DNS_PORT" ;; dnsmasq) echo "$DNSMASQ_PORT" ;; esac; }
pid_of() { case $1 in proxy) echo "$PROXY_PID" ;; dnsmasq) echo "$DNSMASQ_PID" ;; esac; }

# A process's CPU time (user + system), in clock ticks.
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

# dnsperf's summary must say every answer was NOERROR.
check_noerror() { # server output
    if ! grep -q 'Response codes: *NOERROR [0-9]* (100.00%)' "$2"; then
        echo "dns.sh: $1 did not answer every query NOERROR:" >&2
        grep -E 'Queries (completed|lost)|Response codes' "$2" >&2 || cat "$2" >&2
        exit 2
    fi
}

# Every name once, so the proxy has handed out every address before it is measured.
for server in proxy dnsmasq; do
    dnsperf -s 127.0.0.1 -p "$(port_of $server)" -d "$TMP/queries.txt" -n 1 >"$TMP/warm-$server.txt" 2>&1
    check_noerror "$server" "$TMP/warm-$server.txt"
done

throughput() { # server round -> "qps cpu_us_per_answer"
    local out="$TMP/qps-$1-$2.txt" pid ticks0 ticks1 hz
    pid=$(pid_of "$1")
    hz=$(getconf CLK_TCK)
    ticks0=$(cpu_ticks "$pid")
    dnsperf -s 127.0.0.1 -p "$(port_of "$1")" -d "$TMP/queries.txt" -l "$DURATION" \
        -c "$CLIENTS" -q "$OUTSTANDING" >"$out" 2>&1
    ticks1=$(cpu_ticks "$pid")
    check_noerror "$1" "$out"
    awk -v t=$((ticks1 - ticks0)) -v hz="$hz" '
        /Queries completed:/ { done = $3 }
        /Queries per second:/ { qps = $4 }
        END { printf "%.0f %.2f\n", qps, (done > 0 ? t / hz * 1e6 / done : 0) }' "$out"
}

latency() { # server round -> "p50_us p99_us"
    local out="$TMP/lat-$1-$2.txt" pid rt=()
    pid=$(pid_of "$1")
    if [ "$RT" = 1 ]; then
        chrt -f -a -p 10 "$pid" >/dev/null
        rt=(chrt -f 10)
    fi
    "${rt[@]}" dnsperf -s 127.0.0.1 -p "$(port_of "$1")" -d "$TMP/queries.txt" -l "$DURATION" \
        -c "$CLIENTS" -Q "$RATE" -v >"$out" 2>&1
    if [ "$RT" = 1 ]; then chrt -o -a -p 0 "$pid" >/dev/null; fi
    check_noerror "$1" "$out"
    awk '$1 == ">" { print $NF }' "$out" | sort -g | awk '
        { v[NR] = $1 }
        END {
            if (NR == 0) { print "0 0"; exit }
            p50 = v[int(NR * 0.50) + (NR * 0.50 > int(NR * 0.50))]
            p99 = v[int(NR * 0.99) + (NR * 0.99 > int(NR * 0.99))]
            printf "%.0f %.0f\n", p50 * 1e6, p99 * 1e6
        }'
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }

declare -A QPS CPU P50 P99
QPS_RATIOS= P99_RATIOS=
for round in $(seq "$ROUNDS"); do
    order="proxy dnsmasq"
    [ $((round % 2)) -eq 0 ] && order="dnsmasq proxy"
    for server in $order; do
        # Assigned first, so a failed check ends the script (set -e).
        got=$(throughput "$server" "$round")
        read -r qps cpu <<<"$got"
        got=$(latency "$server" "$round")
        read -r p50 p99 <<<"$got"
        QPS[$server]+="$qps "
        CPU[$server]+="$cpu "
        P50[$server]+="$p50 "
        P99[$server]+="$p99 "
        echo "round $round $server: $qps answers/s, $cpu us CPU/answer; at $RATE/s p50 $p50 us, p99 $p99 us" >&2
        eval "LAST_QPS_$server=$qps LAST_P99_$server=$p99"
    done
    # shellcheck disable=SC2154 # set by the eval above
    QPS_RATIOS+="$(awk -v p="$LAST_QPS_proxy" -v d="$LAST_QPS_dnsmasq" 'BEGIN { printf "%.3f", p / d }') "
    # shellcheck disable=SC2154
    P99_RATIOS+="$(awk -v p="$LAST_P99_proxy" -v d="$LAST_P99_dnsmasq" 'BEGIN { printf "%.3f", (d > 0 ? p / d : 0) }') "
done

med() { tr ' ' '\n' <<<"$1" | grep . | median; }
printf '\n%d names, %d rounds of %ds, %d clients, %d in flight; latency at %d queries/s%s\n\n' \
    "$NAMES" "$ROUNDS" "$DURATION" "$CLIENTS" "$OUTSTANDING" "$RATE" "$([ "$RT" = 1 ] && echo ', SCHED_FIFO')"
printf '%-8s %12s %14s %9s %9s\n' server answers/s "CPU us/answer" "p50 us" "p99 us"
for server in proxy dnsmasq; do
    printf '%-8s %12s %14s %9s %9s\n' "$server" "$(med "${QPS[$server]}")" \
        "$(med "${CPU[$server]}")" "$(med "${P50[$server]}")" "$(med "${P99[$server]}")"
done
awk -v pq="$(med "${QPS[proxy]}")" -v dq="$(med "${QPS[dnsmasq]}")" \
    -v pp="$(med "${P99[proxy]}")" -v dp="$(med "${P99[dnsmasq]}")" 'BEGIN {
    printf "\nproxy/dnsmasq: answers/s %.2f (target >= 1.0), p99 %.2f (target <= 1.0)\n", pq / dq, (dp > 0 ? pp / dp : 0)
}'
printf 'median of per-round ratios: answers/s %s, p99 %s (per round: %s/ %s)\n' \
    "$(med "$QPS_RATIOS")" "$(med "$P99_RATIOS")" "$QPS_RATIOS" "$P99_RATIOS"
if grep -q . "$TMP/audit.jsonl" 2>/dev/null; then
    echo "dns.sh: the proxy wrote audit records (a name was denied):" >&2
    head -n 3 "$TMP/audit.jsonl" >&2
    exit 2
fi
