#!/usr/bin/env bash
# The transparent path against the explicit proxy, in the same jail and the same run
# (docs/development.md, "Benches"). Run by hand, as root, not by CI:
#
#   cargo build --release && sudo benches/transparent.sh
#
# It starts an nginx origin on the host's loopback (a small body and a BIG_MIB file, over
# plain HTTP and HTTPS with a self-signed certificate), then `egress-proxy run` with a
# script as CMD: the jail is the real one (its namespace, ruleset and listeners). Inside,
# interleaved ROUNDS times:
#
# - tunnel throughput: curl downloads the big file over HTTPS, once through CONNECT on
#   127.0.0.1:3128 (`-x`), once ignoring the proxy (`--noproxy '*'`: the jail's DNS gives
#   the synthetic address, the transparent listener takes the connection);
# - keep-alive requests/s: wrk against the small body, once absolute-form through
#   127.0.0.1:3128 (a Lua script, as wrk has no proxy option), once straight to the
#   synthetic address with `Host` set (the transparent listener's HTTP path).
#
# It prints the medians and the ratios transparent / explicit (the target is >= 0.95),
# and the median of the per-pair ratios (each pair runs back to back).
# The name is pinned with --resolve; every process it starts is recorded by PID and
# killed on exit; every run is bounded (wrk by DURATION, curl by --max-time).
#
# Knobs (environment): ROUNDS=5 DURATION=5 CONNS=20 THREADS=1 BIG_MIB=256 DOWNLOADS=2
# BASE_PORT=21400 PROXY_BIN (default: the release build).

set -euo pipefail

ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-5}
CONNS=${CONNS:-20}
THREADS=${THREADS:-1}
BIG_MIB=${BIG_MIB:-256}
DOWNLOADS=${DOWNLOADS:-2}
BASE_PORT=${BASE_PORT:-21400}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PROXY_BIN=${PROXY_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/egress-proxy}
HTTP_PORT=$BASE_PORT
HTTPS_PORT=$((BASE_PORT + 1))
NAME=bench.test

[ "$(id -u)" = 0 ] || { echo "transparent.sh: the jail needs root" >&2; exit 2; }
for tool in wrk nginx curl openssl nft ip getent; do
    PATH="$PATH:/usr/sbin:/sbin" command -v "$tool" >/dev/null ||
        { echo "transparent.sh: $tool is needed" >&2; exit 2; }
done
[ -x "$PROXY_BIN" ] || { echo "transparent.sh: no proxy binary at $PROXY_BIN (cargo build --release)" >&2; exit 2; }
for port in $HTTP_PORT $HTTPS_PORT; do
    if ss -Htln "sport = :$port" | grep -q .; then
        echo "transparent.sh: port $port is taken (set BASE_PORT)" >&2
        exit 2
    fi
done

source "$ROOT/benches/common.sh"
bench_tmp transparent
median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

# --- the origin, on the host's loopback -------------------------------------------------
mkdir -p "$TMP/www" "$TMP/nginx"
head -c 256 /dev/zero | tr '\0' 'x' >"$TMP/www/index.html"
head -c $((BIG_MIB * 1024 * 1024)) /dev/urandom >"$TMP/www/big"
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=$NAME" \
    -addext "subjectAltName=DNS:$NAME" -keyout "$TMP/key.pem" -out "$TMP/cert.pem" 2>/dev/null
start_nginx "$HTTP_PORT" "$HTTPS_PORT"

cat >"$TMP/org.toml" <<EOF
version = 1
name = "transparent-bench"
allowed_domains = ["$NAME:$HTTP_PORT", "$NAME:$HTTPS_PORT"]
allowed_cidrs = ["127.0.0.0/8"]
default_network_policy = { type = "allowlist", allowed_domains = ["$NAME:$HTTP_PORT", "$NAME:$HTTPS_PORT"] }
EOF
cat >"$TMP/explicit.lua" <<EOF
wrk.path = "http://$NAME:$HTTP_PORT/"
wrk.headers["Host"] = "$NAME:$HTTP_PORT"
EOF
cat >"$TMP/transparent.lua" <<EOF
wrk.headers["Host"] = "$NAME:$HTTP_PORT"
EOF

# --- CMD: the measurements, inside the jail -----------------------------------------------
cat >"$TMP/inside.sh" <<'EOF'
set -u
cd "$TMP"
unset NO_PROXY no_proxy
addr=$(getent ahostsv4 "$NAME" | awk '{print $1; exit}')
echo "$NAME resolves to $addr in the jail" >&2
download() { # explicit|transparent
    local how=(-x http://127.0.0.1:3128)
    [ "$1" = transparent ] && how=(--noproxy '*')
    for _ in $(seq "$DOWNLOADS"); do
        curl -s -k -o /dev/null --max-time 120 -w '%{speed_download}\n' "${how[@]}" \
            "https://$NAME:$HTTPS_PORT/big" >>"tput-$1" || echo "curl $1 failed" >&2
    done
}
requests() { # explicit|transparent
    local url=http://127.0.0.1:3128/
    [ "$1" = transparent ] && url="http://$addr:$HTTP_PORT/"
    local out
    out=$(timeout $((DURATION + 30)) wrk -t "$THREADS" -c "$CONNS" -d "${DURATION}s" \
        -s "$1.lua" "$url" 2>&1) || true
    echo "$out" | awk '/^Requests\/sec/ {print $2}' >>"rps-$1"
    echo "$out" | grep -q '^Requests/sec' || echo "wrk $1 failed: $out" >&2
    echo "$out" | grep -E 'Non-2xx|Socket errors' >&2 || true
}
for round in $(seq "$ROUNDS"); do
    # Alternate which goes first, so neither always runs on a warmer machine.
    if [ $((round % 2)) = 1 ]; then order="explicit transparent"; else order="transparent explicit"; fi
    for how in $order; do download "$how"; done
    for how in $order; do requests "$how"; done
    echo "round $round done" >&2
done
EOF

echo "transparent.sh: $ROUNDS rounds: $DOWNLOADS x $BIG_MIB MiB HTTPS downloads and ${DURATION}s of wrk (-t $THREADS -c $CONNS) per path" >&2
TMP=$TMP NAME=$NAME HTTP_PORT=$HTTP_PORT HTTPS_PORT=$HTTPS_PORT ROUNDS=$ROUNDS \
    DURATION=$DURATION CONNS=$CONNS THREADS=$THREADS DOWNLOADS=$DOWNLOADS \
    EGRESS_PROXY_LOG=warn timeout $((ROUNDS * (2 * DURATION + 4 * DOWNLOADS * 120 + 60))) \
    "$PROXY_BIN" run --org "$TMP/org.toml" --resolve "$NAME=127.0.0.1" \
    --audit-log "$TMP/audit.jsonl" -- bash "$TMP/inside.sh" 2>"$TMP/run.log" &
PIDS+=($!)
wait "${PIDS[-1]}" || { echo "transparent.sh: run failed:" >&2; cat "$TMP/run.log" >&2; exit 1; }
grep -v '^round' "$TMP/run.log" >&2 || true

m() { median <"$TMP/$1"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "nan" }'; }
tput_e=$(m tput-explicit)
tput_t=$(m tput-transparent)
rps_e=$(m rps-explicit)
rps_t=$(m rps-transparent)
mbs() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1e6 }'; }
echo
echo "| what (median of $ROUNDS rounds) | explicit proxy | transparent | transparent / explicit |"
echo "|---|---|---|---|"
echo "| HTTPS download through a tunnel, MB/s | $(mbs "$tput_e") | $(mbs "$tput_t") | $(ratio "$tput_t" "$tput_e") |"
echo "| keep-alive requests/s (wrk -c $CONNS) | $rps_e | $rps_t | $(ratio "$rps_t" "$rps_e") |"
# The median of per-pair ratios: the two runs of a pair are back to back, under much the
# same load from the rest of the machine (the medians above can fall in different pairs).
pair_ratio() { paste "$TMP/$1-transparent" "$TMP/$1-explicit" | awk '$2 > 0 {print $1 / $2}' | median; }
echo "| the same, median of per-pair ratios | | | $(pair_ratio tput | xargs printf '%.3f') (download), $(pair_ratio rps | xargs printf '%.3f') (requests/s) |"
echo
echo "per round: tput explicit $(paste -sd' ' "$TMP/tput-explicit"); transparent $(paste -sd' ' "$TMP/tput-transparent")"
echo "per round: rps explicit $(paste -sd' ' "$TMP/rps-explicit"); transparent $(paste -sd' ' "$TMP/rps-transparent")"
