#!/usr/bin/env bash
# The load harness of issue 6: the proxy against a direct connection (and squid, when
# installed), measured in the same run, on loopback only. Run by hand, not by CI:
#
#   cargo build --release && benches/load.sh
#
# It starts, in a fresh temp dir, an nginx origin (a small body and a BIG_MIB file, over
# plain HTTP and HTTPS with a self-signed certificate), the release proxy, and squid;
# drives them with wrk (keep-alive and `Connection: close`, absolute-form requests from a
# Lua script, since wrk has no proxy option) and curl (HTTPS downloads through CONNECT),
# interleaving the configurations and repeating each ROUNDS times (medians reported);
# then measures the proxy's memory idle and with TUNNELS idle open tunnels. Around each
# proxy and squid run it also reads the process's CPU time (user + system), and reports
# CPU per request and per GiB: on a shared machine those move less than throughput does.
# The target name is pinned with --resolve: nothing is resolved through the system
# resolver. Every process it starts is recorded by PID and killed on exit; every load run
# is bounded.
#
# Knobs (environment): ROUNDS=3 DURATION=5 CONNS=50 THREADS=2 BIG_MIB=64 DOWNLOADS=6
# TUNNELS=9000 (the proxy needs two descriptors a tunnel: keep 2*TUNNELS under
# `ulimit -n`) BASE_PORT=21100 PROXY_BIN (default: the release build) NO_SQUID=1
# NO_HAPROXY=1 ONLY_DOWNLOADS=1 (no wrk runs and no memory figures: the downloads alone,
# for work on the tunnel) PROXY_ARGS="..." (more flags for the proxy, split on spaces,
# e.g. `--tunnel-splice`).
#
# Where haproxy is installed, it also runs as a reference relay for the download: a plain
# TCP relay (splice on, no CONNECT, no policy, no inspection) in front of the HTTPS
# origin, a mature relay doing less than the proxy does. It is printed below the table.

set -euo pipefail

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
CONNS=${CONNS:-50}
THREADS=${THREADS:-2}
BIG_MIB=${BIG_MIB:-64}
DOWNLOADS=${DOWNLOADS:-6}
TUNNELS=${TUNNELS:-9000}
BASE_PORT=${BASE_PORT:-21100} # below the ephemeral range, so no outgoing connection holds them
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PROXY_BIN=${PROXY_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/egress-proxy}

HTTP_PORT=$BASE_PORT
HTTPS_PORT=$((BASE_PORT + 1))
PROXY_PORT=$((BASE_PORT + 2))
SQUID_PORT=$((BASE_PORT + 3))
MEM_PORT=$((BASE_PORT + 4))
HAPROXY_PORT=$((BASE_PORT + 5))
NAME=allowed.test

for tool in wrk nginx curl openssl python3; do
    command -v "$tool" >/dev/null || { echo "load.sh: $tool is needed" >&2; exit 2; }
done
[ -x "$PROXY_BIN" ] || { echo "load.sh: no proxy binary at $PROXY_BIN (cargo build --release)" >&2; exit 2; }
SQUID=$(command -v squid || true)
[ -n "${NO_SQUID:-}" ] && SQUID=
HAPROXY=$(command -v haproxy || true)
[ -n "${NO_HAPROXY:-}" ] && HAPROXY=
for port in $HTTP_PORT $HTTPS_PORT $PROXY_PORT $SQUID_PORT $MEM_PORT $HAPROXY_PORT; do
    if ss -Htln "sport = :$port" | grep -q .; then
        echo "load.sh: port $port is taken (set BASE_PORT)" >&2
        exit 2
    fi
done

source "$ROOT/benches/common.sh"
bench_tmp load

rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
# The part of RSS that is the process's own (anonymous) memory: the rest is file pages,
# mostly the binary's, shared page cache the kernel maps around each page touched.
anon_kib() { awk '/^RssAnon/ {print $2}' "/proc/$1/status"; }
# CPU time (user + system) a process has used, in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
TICK=$(getconf CLK_TCK)
median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

# --- the origin -------------------------------------------------------------------------
mkdir -p "$TMP/www" "$TMP/nginx"
head -c 256 /dev/zero | tr '\0' 'x' >"$TMP/www/index.html"
head -c $((BIG_MIB * 1024 * 1024)) /dev/urandom >"$TMP/www/big"
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=$NAME" \
    -addext "subjectAltName=DNS:$NAME,IP:127.0.0.1" \
    -keyout "$TMP/key.pem" -out "$TMP/cert.pem" 2>/dev/null
NGINX_CONNECTIONS=20000 start_nginx "$HTTP_PORT" "$HTTPS_PORT"

# --- the proxy ----------------------------------------------------------------------------
cat >"$TMP/org.toml" <<EOF
version = 1
name = "load"
allowed_domains = ["$NAME:$HTTP_PORT", "$NAME:$HTTPS_PORT"]
allowed_cidrs = ["127.0.0.0/8"]
default_network_policy = { type = "allowlist", allowed_domains = ["$NAME:$HTTP_PORT", "$NAME:$HTTPS_PORT"] }
[tunnels]
require_tls = false
EOF
# --dns-server points at a closed loopback port: a name that is not pinned fails at once.
start_proxy() {
    EGRESS_PROXY_LOG=warn "$PROXY_BIN" serve --org "$TMP/org.toml" --listen "127.0.0.1:$1" \
        --resolve "$NAME=127.0.0.1" --dns-server 127.0.0.1:9 \
        --audit-log "$TMP/audit-$1.jsonl" --max-connections 30000 \
        --max-tunnels-per-client 30000 --tunnel-idle-timeout 600 ${PROXY_ARGS:-} 2>>"$TMP/proxy-$1.log" &
    PIDS+=($!)
    wait_port "$1"
}
start_proxy $PROXY_PORT
PROXY_PID=${PIDS[-1]}

# --- squid --------------------------------------------------------------------------------
if [ -n "$SQUID" ]; then
    mkdir -p "$TMP/squid"
    chmod 777 "$TMP/squid"
    cat >"$TMP/squid.conf" <<EOF
http_port 127.0.0.1:$SQUID_PORT
pid_filename $TMP/squid/squid.pid
cache_log $TMP/squid/cache.log
access_log none
cache deny all
cache_mem 8 MB
coredump_dir $TMP/squid
visible_hostname load-bench
shutdown_lifetime 1 second
pinger_enable off
acl lo src 127.0.0.1/32
http_access allow lo
http_access deny all
EOF
    "$SQUID" -N -n "egressload$$" -f "$TMP/squid.conf" &
    PIDS+=($!)
    SQUID_PID=$!
    wait_port $SQUID_PORT
fi

# --- haproxy, the reference relay for downloads --------------------------------------------
if [ -n "$HAPROXY" ]; then
    cat >"$TMP/haproxy.cfg" <<EOF
global
    maxconn 100
defaults
    mode tcp
    timeout connect 5s
    timeout client 120s
    timeout server 120s
    option splice-auto
listen relay
    bind 127.0.0.1:$HAPROXY_PORT
    server origin 127.0.0.1:$HTTPS_PORT
EOF
    "$HAPROXY" -db -f "$TMP/haproxy.cfg" >"$TMP/haproxy.log" 2>&1 &
    PIDS+=($!)
    HAPROXY_PID=$!
    wait_port $HAPROXY_PORT
fi

# --- wrk scripts: absolute-form through a proxy, Host set, optionally Connection: close ---
lua() { # file path host close
    {
        echo "wrk.path = \"$2\""
        echo "wrk.headers[\"Host\"] = \"$3\""
        if [ "$4" = close ]; then echo 'wrk.headers["Connection"] = "close"'; fi
    } >"$TMP/$1.lua"
}
lua direct-ka / "127.0.0.1:$HTTP_PORT" ka
lua direct-close / "127.0.0.1:$HTTP_PORT" close
lua proxy-ka "http://$NAME:$HTTP_PORT/" "$NAME:$HTTP_PORT" ka
lua proxy-close "http://$NAME:$HTTP_PORT/" "$NAME:$HTTP_PORT" close
lua squid-ka "http://127.0.0.1:$HTTP_PORT/" "127.0.0.1:$HTTP_PORT" ka
lua squid-close "http://127.0.0.1:$HTTP_PORT/" "127.0.0.1:$HTTP_PORT" close

declare -A ADDR=([direct]=$HTTP_PORT [proxy]=$PROXY_PORT [squid]=$SQUID_PORT)
# The process whose CPU time is read around each run (none for direct).
declare -A CPU_PID=([proxy]=$PROXY_PID [squid]=${SQUID_PID:-} [haproxy]=${HAPROXY_PID:-})
CONFIGS=(direct proxy)
[ -n "$SQUID" ] && CONFIGS+=(squid)
DOWNLOAD_CONFIGS=("${CONFIGS[@]}")
[ -n "$HAPROXY" ] && DOWNLOAD_CONFIGS+=(haproxy)

# One wrk run: appends req/s (and p99 in ms for keep-alive) to the results files.
drive() { # config mode
    local out pid=${CPU_PID[$1]:-} c0=0
    [ -n "$pid" ] && c0=$(cpu_ticks "$pid")
    out=$(timeout $((DURATION + 30)) wrk -t "$THREADS" -c "$CONNS" -d "${DURATION}s" --latency \
        -s "$TMP/$1-$2.lua" "http://127.0.0.1:${ADDR[$1]}/" 2>&1) || true
    if ! grep -q '^Requests/sec' <<<"$out" || grep -q 'Non-2xx' <<<"$out"; then
        echo "load.sh: wrk $1 $2 failed:" >&2
        echo "$out" >&2
        exit 1
    fi
    awk '/^Requests\/sec/ {print $2}' <<<"$out" >>"$TMP/r-$1-$2"
    if [ -n "$pid" ]; then # CPU microseconds per request
        awk -v t="$(($(cpu_ticks "$pid") - c0))" -v hz="$TICK" '/ requests in / {
            if ($1 > 0) printf "%.1f\n", t * 1e6 / hz / $1 }' <<<"$out" >>"$TMP/cpu-$1-$2"
    fi
    awk '$1 == "99%" {v=$2; u=v; sub(/[a-z]+$/, "", v); sub(/^[0-9.]+/, "", u);
        print (u == "us" ? v / 1000 : (u == "s" ? v * 1000 : v))}' <<<"$out" >>"$TMP/p99-$1-$2"
}

# One sample of HTTPS download speed in MB/s: DOWNLOADS x BIG_MIB over one TLS connection.
download() { # config
    local url args=() i pid=${CPU_PID[$1]:-} c0=0 out
    case $1 in
    direct) url="https://$NAME:$HTTPS_PORT/big"; args=(--resolve "$NAME:$HTTPS_PORT:127.0.0.1") ;;
    proxy) url="https://$NAME:$HTTPS_PORT/big"; args=(-x "http://127.0.0.1:$PROXY_PORT") ;;
    squid) url="https://127.0.0.1:$HTTPS_PORT/big"; args=(-x "http://127.0.0.1:$SQUID_PORT") ;;
    haproxy) url="https://$NAME:$HAPROXY_PORT/big"; args=(--resolve "$NAME:$HAPROXY_PORT:127.0.0.1") ;;
    esac
    for i in $(seq "$DOWNLOADS"); do args+=("$url" -o /dev/null); done
    [ -n "$pid" ] && c0=$(cpu_ticks "$pid")
    out=$(timeout 120 curl -sS --fail --proxytunnel --cacert "$TMP/cert.pem" "${args[@]}" \
        -w '%{size_download} %{time_total}\n')
    awk '{b += $1; t += $2} END {if (t > 0) printf "%.1f\n", b / t / 1e6}' <<<"$out" >>"$TMP/mb-$1"
    if [ -n "$pid" ]; then # CPU milliseconds per GiB relayed
        awk -v t="$(($(cpu_ticks "$pid") - c0))" -v hz="$TICK" '{b += $1} END {
            if (b > 0) printf "%.1f\n", t * 1e3 / hz / (b / 2^30) }' <<<"$out" >>"$TMP/cpu-$1-mb"
    fi
}

# A download through nothing, not measured (see the rounds below).
warm_up() {
    timeout 120 curl -sS --fail --cacert "$TMP/cert.pem" --resolve "$NAME:$HTTPS_PORT:127.0.0.1" \
        "https://$NAME:$HTTPS_PORT/big" -o /dev/null || true
}

echo "load.sh: $ROUNDS rounds of ${DURATION}s wrk runs (-t $THREADS -c $CONNS), $DOWNLOADS x ${BIG_MIB} MiB downloads; configurations: ${CONFIGS[*]}; downloads also: ${DOWNLOAD_CONFIGS[*]:${#CONFIGS[@]}}" >&2
for round in $(seq "$ROUNDS"); do
    for mode in ka close; do
        [ -n "${ONLY_DOWNLOADS:-}" ] && break
        for cfg in "${CONFIGS[@]}"; do
            echo "  round $round: $cfg $mode" >&2
            drive "$cfg" "$mode"
        done
    done
    # One download first, not measured: the first after the keep-alive runs came at half
    # speed whichever path it took (the connections wrk left behind), and it was always
    # the direct one.
    warm_up
    for cfg in "${DOWNLOAD_CONFIGS[@]}"; do
        echo "  round $round: $cfg download" >&2
        download "$cfg"
    done
done

# --- memory ---------------------------------------------------------------------------------
if [ -z "${ONLY_DOWNLOADS:-}" ]; then
    start_proxy $MEM_PORT
    MEM_PID=${PIDS[-1]}
    sleep 1
    IDLE_KIB=$(rss_kib "$MEM_PID") IDLE_ANON_KIB=$(anon_kib "$MEM_PID")
    # The tunnel client holds its tunnels until its stdin closes (or 300 s pass).
    exec 3> >(exec python3 "$ROOT/benches/tunnels.py" "127.0.0.1:$MEM_PORT" "$NAME:$HTTP_PORT" \
        "$TUNNELS" 300 >"$TMP/tunnels.out" 2>&1)
    PIDS+=($!)
    for i in $(seq 1200); do
        grep -q READY "$TMP/tunnels.out" 2>/dev/null && break
        if grep -q Error "$TMP/tunnels.out" 2>/dev/null; then cat "$TMP/tunnels.out" >&2; exit 1; fi
        sleep 0.1
    done
    grep -q READY "$TMP/tunnels.out" || { echo "load.sh: tunnels did not open" >&2; cat "$TMP/tunnels.out" >&2; exit 1; }
    sleep 1
    TUNNEL_KIB=$(rss_kib "$MEM_PID")
    exec 3>&-
else
    IDLE_KIB=0 IDLE_ANON_KIB=0 TUNNEL_KIB=0
fi

# --- the table ---------------------------------------------------------------------------------
med() { [ -s "$TMP/$1" ] && median <"$TMP/$1" || echo nan; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b + 0 > 0 && a != "nan") printf "%.2f", a / b; else print "-"}'; }
D_KA=$(med r-direct-ka) P_KA=$(med r-proxy-ka) S_KA=$(med r-squid-ka)
D_CL=$(med r-direct-close) P_CL=$(med r-proxy-close) S_CL=$(med r-squid-close)
D_99=$(med p99-direct-ka) P_99=$(med p99-proxy-ka) S_99=$(med p99-squid-ka)
D_MB=$(med mb-direct) P_MB=$(med mb-proxy) S_MB=$(med mb-squid)
C_KA=$(med cpu-proxy-ka) Q_KA=$(med cpu-squid-ka)
C_CL=$(med cpu-proxy-close) Q_CL=$(med cpu-squid-close)
C_MB=$(med cpu-proxy-mb) Q_MB=$(med cpu-squid-mb)
PER_TUNNEL=$(awk -v a="$TUNNEL_KIB" -v b="$IDLE_KIB" -v n="$TUNNELS" 'BEGIN {printf "%.1f", (a - b) / n}')

echo
echo "egress-proxy load harness, $(date -u +%FT%TZ), $(nproc) cores, medians of $ROUNDS"
echo
echo "| what | direct | egress-proxy | squid | proxy/direct | proxy/squid | target |"
echo "|---|---|---|---|---|---|---|"
echo "| keep-alive req/s | $D_KA | $P_KA | $S_KA | $(ratio "$P_KA" "$D_KA") | $(ratio "$P_KA" "$S_KA") | >= 0.5 direct, >= 2.5 squid |"
echo "| Connection: close req/s | $D_CL | $P_CL | $S_CL | $(ratio "$P_CL" "$D_CL") | $(ratio "$P_CL" "$S_CL") | >= 1.5 squid |"
echo "| p99 latency keep-alive, ms | $D_99 | $P_99 | $S_99 | $(ratio "$P_99" "$D_99") | $(ratio "$P_99" "$S_99") | <= squid |"
echo "| CONNECT download, MB/s | $D_MB | $P_MB | $S_MB | $(ratio "$P_MB" "$D_MB") | $(ratio "$P_MB" "$S_MB") | >= 0.90 direct |"
echo "| proxy CPU per keep-alive request, us | | $C_KA | $Q_KA | | $(ratio "$C_KA" "$Q_KA") | (lower is better) |"
echo "| proxy CPU per close request, us | | $C_CL | $Q_CL | | $(ratio "$C_CL" "$Q_CL") | (lower is better) |"
echo "| proxy CPU per GiB through CONNECT, ms | | $C_MB | $Q_MB | | $(ratio "$C_MB" "$Q_MB") | (lower is better) |"
echo "| RSS idle, MiB | | $(awk -v k="$IDLE_KIB" 'BEGIN {printf "%.1f", k / 1024}') | | | | < 10 |"
echo "| of it anonymous (not file pages), MiB | | $(awk -v k="$IDLE_ANON_KIB" 'BEGIN {printf "%.1f", k / 1024}') | | | | |"
echo "| RSS with $TUNNELS idle tunnels, MiB | | $(awk -v k="$TUNNEL_KIB" 'BEGIN {printf "%.1f", k / 1024}') | | | | |"
echo "| KiB per idle tunnel | | $PER_TUNNEL | | | | < 20 |"
echo
if [ -n "$HAPROXY" ]; then
    H_MB=$(med mb-haproxy) H_CPU=$(med cpu-haproxy-mb)
    echo "reference relay, $("$HAPROXY" -v | head -n 1 | awk '{print $1, $3}') in TCP mode (splice, no CONNECT, no policy):" \
        "download $H_MB MB/s, $(ratio "$H_MB" "$D_MB") of direct; CPU $H_CPU ms per GiB"
    echo
fi
echo "samples (req/s, ms, MB/s, CPU us/request and ms/GiB):"
for f in "$TMP"/r-* "$TMP"/p99-* "$TMP"/mb-* "$TMP"/cpu-*; do
    [ -s "$f" ] && echo "  $(basename "$f"): $(tr '\n' ' ' <"$f")"
done
