#!/usr/bin/env bash
# SOCKS5 and the parent proxy, as ratios measured in one run, on loopback only. By hand:
#
#   cargo build --release && benches/socks.sh
#
# Starts an nginx origin (a small body and a BIG_MIB file), the release proxy with its
# SOCKS5 listener, microsocks and dante (danted) where installed as reference SOCKS5
# servers, squid where installed as a parent, and a second release proxy chained to that
# squid (`--upstream-proxy`). Then, interleaving the configurations and repeating each
# ROUNDS times (medians reported):
#
# - tunnel throughput: curl downloads of the big file through `CONNECT`, through our
#   SOCKS5 (by name), through microsocks and dante (by address: they would resolve a
#   name with the system resolver);
# - tunnels per second: benches/socks_conns.py, PROCS processes each opening N tunnels in
#   a row with one small GET inside, the same ways;
# - around each, the server's CPU time (user + system, from /proc): per GiB relayed and
#   per tunnel. On 2 cores a chain of four processes (origin, squid, proxy, client) is
#   CPU-bound, so the chained throughput ratio also shows the cores the extra hop takes;
#   its CPU per GiB against squid's says what the hop costs;
# - chained: the download and the small GETs through our proxy chained to squid, against
#   squid alone.
#
# The target name is pinned with --resolve (and in squid's hosts file): nothing is
# resolved through the system resolver. Every process started is killed on exit, by PID.
# Knobs: ROUNDS=3 BIG_MIB=256 N=300 PROCS=4 BASE_PORT=21300 PROXY_BIN.
set -euo pipefail
ROUNDS=${ROUNDS:-3}
BIG_MIB=${BIG_MIB:-256}
N=${N:-300}
PROCS=${PROCS:-4}
BASE_PORT=${BASE_PORT:-21300}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PROXY_BIN=${PROXY_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/egress-proxy}
ORIGIN=$BASE_PORT
PROXY=$((BASE_PORT + 1))
SOCKS=$((BASE_PORT + 2))
MICRO=$((BASE_PORT + 3))
DANTE=$((BASE_PORT + 4))
SQUID=$((BASE_PORT + 5))
CHAINED=$((BASE_PORT + 6))
NAME=bench.test
for tool in nginx curl python3; do
    command -v "$tool" >/dev/null || { echo "socks.sh: $tool is needed" >&2; exit 2; }
done
[ -x "$PROXY_BIN" ] || { echo "socks.sh: no proxy binary at $PROXY_BIN" >&2; exit 2; }
source "$ROOT/benches/common.sh"
bench_tmp socks
TICK=$(getconf CLK_TCK)
# CPU ticks (user + system) of PID and its children: dante relays in processes of its own.
cpu_ticks() {
    local pid total=0
    for pid in "$1" $(pgrep -P "$1" || true); do
        total=$((total + $(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo 0)))
    done
    echo "$total"
}
median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

mkdir -p "$TMP/www"
head -c 256 /dev/zero | tr '\0' 'x' >"$TMP/www/small"
truncate -s "${BIG_MIB}M" "$TMP/www/big"
start_nginx "$ORIGIN"

cat >"$TMP/org.toml" <<TOML
version = 1
allowed_domains = ["$NAME:$ORIGIN"]
allowed_cidrs = ["127.0.0.0/8"]
default_network_policy = { type = "allowlist", allowed_domains = ["$NAME:$ORIGIN"] }
TOML
"$PROXY_BIN" serve --org "$TMP/org.toml" --listen "127.0.0.1:$PROXY" \
    --socks-listen "127.0.0.1:$SOCKS" --resolve "$NAME=127.0.0.1" \
    --audit-log "$TMP/audit.jsonl" 2>"$TMP/proxy.log" &
PIDS+=($!)
PROXY_PID=$!
wait_port "$PROXY"

MICRO_PID=""
if command -v microsocks >/dev/null; then
    microsocks -i 127.0.0.1 -p "$MICRO" >"$TMP/microsocks.log" 2>&1 &
    PIDS+=($!)
    MICRO_PID=$!
    wait_port "$MICRO"
fi
DANTE_PID=""
if command -v danted >/dev/null; then
    cat >"$TMP/danted.conf" <<CONF
logoutput: $TMP/danted.log
internal: 127.0.0.1 port = $DANTE
external: 127.0.0.1
socksmethod: none
clientmethod: none
user.privileged: root
user.unprivileged: nobody
client pass { from: 127.0.0.0/8 to: 127.0.0.0/8 }
socks pass { from: 127.0.0.0/8 to: 127.0.0.0/8 command: connect }
CONF
    danted -f "$TMP/danted.conf" -p "$TMP/danted.pid" -N 1 &
    PIDS+=($!)
    DANTE_PID=$!
    wait_port "$DANTE"
fi
SQUID_PID=""
if [ -x /usr/sbin/squid ]; then
    mkdir -p "$TMP/squid" && chmod 777 "$TMP/squid"
    echo "127.0.0.1 $NAME" >"$TMP/squid/hosts"
    cat >"$TMP/squid/squid.conf" <<CONF
http_port 127.0.0.1:$SQUID
pid_filename $TMP/squid/squid.pid
access_log none
cache_log $TMP/squid/cache.log
coredump_dir $TMP/squid
cache deny all
hosts_file $TMP/squid/hosts
dns_nameservers 127.0.0.1
pinger_enable off
shutdown_lifetime 0 seconds
acl local src 127.0.0.0/8
http_access allow local
http_access deny all
CONF
    /usr/sbin/squid -N -n "egresssocks$$" -f "$TMP/squid/squid.conf" &
    PIDS+=($!)
    SQUID_PID=$!
    wait_port "$SQUID" 20
    "$PROXY_BIN" serve --org "$TMP/org.toml" --listen "127.0.0.1:$CHAINED" \
        --resolve "$NAME=127.0.0.1" --audit-log "$TMP/audit-chained.jsonl" \
        --upstream-proxy "http://127.0.0.1:$SQUID" 2>"$TMP/chained.log" &
    PIDS+=($!)
    CHAINED_PID=$!
    wait_port "$CHAINED"
fi

# Download the big file with curl ARGS...: MiB/s.
download() {
    curl -sS --max-time 120 -o /dev/null -w '%{speed_download}\n' "$@" |
        awk '{printf "%.0f\n", $1 / 1048576}'
}

# The configurations: a label, the server's PID (CPU is read around each run), the curl
# flags of a download, and socks_conns.py's kind, proxy and target for tunnels/s.
BIG=http://$NAME:$ORIGIN/big
BIG_IP=http://127.0.0.1:$ORIGIN/big
CONFIGS=("connect|$PROXY_PID|-p -x http://127.0.0.1:$PROXY $BIG|connect 127.0.0.1:$PROXY $NAME:$ORIGIN"
    "socks5|$PROXY_PID|--socks5-hostname 127.0.0.1:$SOCKS $BIG|socks5-name 127.0.0.1:$SOCKS $NAME:$ORIGIN")
[ -n "$MICRO_PID" ] && CONFIGS+=("microsocks|$MICRO_PID|--socks5 127.0.0.1:$MICRO $BIG_IP|socks5-ip 127.0.0.1:$MICRO 127.0.0.1:$ORIGIN")
[ -n "$DANTE_PID" ] && CONFIGS+=("dante|$DANTE_PID|--socks5 127.0.0.1:$DANTE $BIG_IP|socks5-ip 127.0.0.1:$DANTE 127.0.0.1:$ORIGIN")
if [ -n "$SQUID_PID" ]; then
    CONFIGS+=("squid|$SQUID_PID|-p -x http://127.0.0.1:$SQUID $BIG|connect 127.0.0.1:$SQUID $NAME:$ORIGIN"
        "chained|$CHAINED_PID|-p -x http://127.0.0.1:$CHAINED $BIG|connect 127.0.0.1:$CHAINED $NAME:$ORIGIN")
fi

for round in $(seq "$ROUNDS"); do
    for config in "${CONFIGS[@]}"; do
        IFS='|' read -r label pid flags conns <<<"$config"
        c0=$(cpu_ticks "$pid")
        # shellcheck disable=SC2086 # the flags are words
        download $flags >>"$TMP/$label.mib"
        c1=$(cpu_ticks "$pid")
        # The server's CPU milliseconds per GiB relayed.
        awk -v t="$((c1 - c0))" -v hz="$TICK" -v mib="$BIG_MIB" \
            'BEGIN {printf "%.0f\n", t / hz * 1e3 * 1024 / mib}' >>"$TMP/$label.gib"
        c0=$(cpu_ticks "$pid")
        # shellcheck disable=SC2086
        rate=$(timeout 300 python3 "$ROOT/benches/socks_conns.py" $conns "$N" "$PROCS")
        c1=$(cpu_ticks "$pid")
        echo "$rate" >>"$TMP/$label.rate"
        # The server's CPU microseconds per tunnel (N * PROCS tunnels, and the warm-up).
        awk -v t="$((c1 - c0))" -v hz="$TICK" -v n="$((N * PROCS + 1))" \
            'BEGIN {printf "%.0f\n", t / hz * 1e6 / n}' >>"$TMP/$label.cpu"
    done
done

med() { median <"$TMP/$1"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "nan"}'; }
echo "SOCKS5 and parent-proxy bench, $(date -u +%FT%TZ), $(nproc) cores, medians of $ROUNDS"
echo "download ${BIG_MIB} MiB; tunnels/s: $PROCS processes x $N tunnels, one GET each"
printf '%-11s %10s %14s %10s %14s\n' config "MiB/s" "CPU ms/GiB" "tunnels/s" "CPU us/tunnel"
for config in "${CONFIGS[@]}"; do
    label=${config%%|*}
    printf '%-11s %10s %14s %10s %14s\n' "$label" "$(med "$label.mib")" "$(med "$label.gib")" \
        "$(med "$label.rate")" "$(med "$label.cpu")"
done
echo "(CPU is the named server's alone; for chained, the proxy in front of squid, not squid.)"
echo
echo "socks5 / connect: throughput $(ratio "$(med socks5.mib)" "$(med connect.mib)"), tunnels/s $(ratio "$(med socks5.rate)" "$(med connect.rate)")   (target >= 0.95)"
for ref in microsocks dante; do
    [ -s "$TMP/$ref.rate" ] || continue
    echo "socks5 / $ref: throughput $(ratio "$(med socks5.mib)" "$(med "$ref.mib")"), tunnels/s $(ratio "$(med socks5.rate)" "$(med "$ref.rate")"), CPU per tunnel $(ratio "$(med socks5.cpu)" "$(med "$ref.cpu")")   (target: rate >= 1, CPU < 1)"
done
if [ -s "$TMP/chained.mib" ]; then
    echo "chained / squid alone: throughput $(ratio "$(med chained.mib)" "$(med squid.mib)"), tunnels/s $(ratio "$(med chained.rate)" "$(med squid.rate)")   (target >= 0.9)"
fi
