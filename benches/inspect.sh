#!/usr/bin/env bash
# What inspection costs (issue 15), by hand, not in CI, on loopback only:
#
#   cargo build --release && benches/inspect.sh
#
# Starts, in a fresh temp dir, an nginx origin (a 256-byte body over plain HTTP, and over
# HTTPS with a certificate made here for x.test, *.x.test and *.y.test: CA:FALSE and a
# SAN, as webpki wants of an end entity; no TLS session resumption, so every upstream
# handshake is a full one), the release proxy with a CA of its own (`ca init`) and
# that certificate as `--upstream-ca`, and mitmdump (regular proxy mode, its own CA,
# verifying the origin against the same certificate). Then, interleaving the
# configurations and repeating each ROUNDS times (medians reported):
#
#   plain    keep-alive GETs through the proxy as plain HTTP (absolute-form)
#   inspect  keep-alive GETs inside one CONNECT + TLS tunnel to an inspected host
#   mitm     the same inside mitmdump's interception
#
# each with CONNS client connections (benches/inspect_client.py, one process each) for
# DURATION seconds, reading the CPU time (user + system, /proc/PID/stat) of the proxy
# (or mitmdump) around each run for CPU per request. Last, the time to a tunnel's first
# answer for NAMES names new to the proxy (each one a leaf to mint) against a name
# already minted, through an entry `*.x.test`, one fresh tunnel each (median, p90), and
# the proxy's CPU time for each such tunnel (all its threads, /proc/PID/task/*/schedstat);
# the same through a relayed entry `*.y.test` as the control, and through mitmdump.
#
# Every name is pinned with --resolve (the proxy) or not used at all (mitmdump is sent
# `CONNECT 127.0.0.1:PORT` and the client's SNI names x.test): nothing is resolved through
# the system resolver. Every process started is recorded by PID and killed on exit; every
# run is bounded in count (MAX requests) and time.
#
# Knobs (environment): ROUNDS=5 DURATION=4 CONNS=2 MAX=1000000 NAMES=41 BASE_PORT=21600
# (uses BASE_PORT to BASE_PORT + 3) PROXY_BIN (default: the release build) MITMDUMP
# (default: mitmdump on PATH, else /tmp/mitmvenv/bin/mitmdump) NO_MITM=1.
set -euo pipefail

ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-4}
CONNS=${CONNS:-2}
MAX=${MAX:-1000000}
NAMES=${NAMES:-41}
BASE_PORT=${BASE_PORT:-21600}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PROXY_BIN=${PROXY_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/egress-proxy}
CLIENT=$ROOT/benches/inspect_client.py
HTTP_PORT=$BASE_PORT
HTTPS_PORT=$((BASE_PORT + 1))
PROXY_PORT=$((BASE_PORT + 2))
MITM_PORT=$((BASE_PORT + 3))
NAME=x.test  # inspected, on HTTPS_PORT
PLAIN=plain.test # not inspected, on HTTP_PORT
RELAYED=y.test   # *.y.test: tunnels relayed, not inspected, on HTTPS_PORT

for tool in nginx openssl python3; do
    command -v "$tool" >/dev/null || { echo "inspect.sh: $tool is needed" >&2; exit 2; }
done
[ -x "$PROXY_BIN" ] || { echo "inspect.sh: no proxy binary at $PROXY_BIN (cargo build --release)" >&2; exit 2; }
MITMDUMP=${MITMDUMP:-$(command -v mitmdump || echo /tmp/mitmvenv/bin/mitmdump)}
if [ -n "${NO_MITM:-}" ]; then
    MITMDUMP=
elif [ ! -x "$MITMDUMP" ]; then
    echo "inspect.sh: no mitmdump (python3 -m venv /tmp/mitmvenv && /tmp/mitmvenv/bin/pip install mitmproxy); running without it" >&2
    MITMDUMP=
fi
for port in $HTTP_PORT $HTTPS_PORT $PROXY_PORT $MITM_PORT; do
    if ss -Htln "sport = :$port" | grep -q .; then
        echo "inspect.sh: port $port is taken (set BASE_PORT)" >&2
        exit 2
    fi
done

source "$ROOT/benches/common.sh"
bench_tmp inspect

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
TICK=$(getconf CLK_TCK)
median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

# --- the origin ---------------------------------------------------------------------------
mkdir -p "$TMP/www" "$TMP/nginx"
head -c 256 /dev/zero | tr '\0' 'x' >"$TMP/www/index.html"
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=$NAME" \
    -addext "subjectAltName=DNS:$NAME,DNS:*.$NAME,DNS:*.$RELAYED,IP:127.0.0.1" \
    -addext "basicConstraints=critical,CA:FALSE" \
    -keyout "$TMP/key.pem" -out "$TMP/cert.pem" 2>/dev/null
# No resumption: every tunnel's upstream handshake is a full one, so the first answer to
# a new name differs from a known one by the leaf minting alone (the proxy's client side
# keeps TLS sessions by name).
NGINX_CONNECTIONS=1024 NGINX_TLS_EXTRA="ssl_session_tickets off; ssl_session_cache off; ssl_protocols TLSv1.2 TLSv1.3;" \
    start_nginx "$HTTP_PORT" "$HTTPS_PORT"

# --- the proxy ------------------------------------------------------------------------------
"$PROXY_BIN" ca init "$TMP/ca" >/dev/null
ALLOWED="[\"$PLAIN:$HTTP_PORT\", { host = \"$NAME:$HTTPS_PORT\", inspect = true }, { host = \"*.$NAME:$HTTPS_PORT\", inspect = true }, \"*.$RELAYED:$HTTPS_PORT\"]"
# The default request policy allows the same, bar `inspect` (the organization's alone).
cat >"$TMP/org.toml" <<EOF
version = 1
name = "inspect-bench"
allowed_domains = $ALLOWED
allowed_cidrs = ["127.0.0.0/8"]
default_network_policy = { type = "allowlist", allowed_domains = ${ALLOWED//, inspect = true/} }
EOF
PINS=(--resolve "$NAME=127.0.0.1" --resolve "$PLAIN=127.0.0.1")
for i in $(seq "$NAMES"); do PINS+=(--resolve "n$i.$NAME=127.0.0.1" --resolve "n$i.$RELAYED=127.0.0.1"); done
# --dns-server points at a closed loopback port: a name that is not pinned fails at once.
EGRESS_PROXY_LOG=warn "$PROXY_BIN" serve --org "$TMP/org.toml" --listen "127.0.0.1:$PROXY_PORT" \
    --ca "$TMP/ca" --upstream-ca "$TMP/cert.pem" "${PINS[@]}" --dns-server 127.0.0.1:9 \
    --audit-log "$TMP/audit.jsonl" 2>>"$TMP/proxy.log" &
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

declare -A CPU_PID=([plain]=$PROXY_PID [inspect]=$PROXY_PID [mitm]=${MITM_PID:-})
CONFIGS=(plain inspect)
[ -n "$MITMDUMP" ] && CONFIGS+=(mitm)

# The client's arguments after `rate` for a configuration.
client_args() { # config
    case $1 in
    plain) echo "$PROXY_PORT plain $PLAIN:$HTTP_PORT" ;;
    inspect) echo "$PROXY_PORT tls $NAME:$HTTPS_PORT $NAME $TMP/ca/ca.pem" ;;
    mitm) echo "$MITM_PORT tls 127.0.0.1:$HTTPS_PORT $NAME $TMP/mitm/mitmproxy-ca-cert.pem" ;;
    esac
}

# One run of CONNS clients at once: appends req/s and CPU us/request to the results files.
drive() { # config
    local pid=${CPU_PID[$1]} c0 c1 i pids=() failed=0
    c0=$(cpu_ticks "$pid")
    for i in $(seq "$CONNS"); do
        # shellcheck disable=SC2046 # client_args is split into words on purpose
        timeout $((DURATION + 30)) python3 "$CLIENT" rate $(client_args "$1") "$DURATION" "$MAX" \
            >"$TMP/out.$i" 2>"$TMP/err.$i" &
        pids+=($!)
        PIDS+=($!)
    done
    for i in "${pids[@]}"; do wait "$i" || failed=1; done
    c1=$(cpu_ticks "$pid")
    if [ "$failed" = 1 ]; then
        echo "inspect.sh: a client of $1 failed:" >&2
        cat "$TMP"/err.* >&2
        tail -n 5 "$TMP/proxy.log" "$TMP/mitm.log" >&2 2>/dev/null || true
        exit 1
    fi
    cat "$TMP"/out.* | awk -v t="$((c1 - c0))" -v hz="$TICK" -v r="$TMP/r-$1" -v c="$TMP/cpu-$1" '
        {n += $1; rate += $1 / $2}
        END {printf "%.0f\n", rate >> r; if (n > 0) printf "%.1f\n", t * 1e6 / hz / n >> c}'
    rm -f "$TMP"/out.* "$TMP"/err.*
}

echo "inspect.sh: $ROUNDS rounds of ${DURATION}s runs with $CONNS connections; configurations: ${CONFIGS[*]}" >&2
for round in $(seq "$ROUNDS"); do
    for cfg in "${CONFIGS[@]}"; do
        echo "  round $round: $cfg" >&2
        drive "$cfg"
    done
done

# --- first answer: a new name against a minted one -------------------------------------------
echo "  first answers: $((NAMES - 1)) new names, inspected and relayed (and through mitmdump)" >&2
LATENCY_NAMES=()
for i in $(seq "$NAMES"); do LATENCY_NAMES+=("n$i.$NAME"); done
timeout 300 python3 "$CLIENT" first "$PROXY_PORT" "$HTTPS_PORT" "$TMP/ca/ca.pem" "$PROXY_PID" \
    "${LATENCY_NAMES[@]}" >"$TMP/first"
read -r _ NEW_MED NEW_P90 NEW_CPU < <(grep '^new ' "$TMP/first")
read -r _ OLD_MED OLD_P90 OLD_CPU < <(grep '^minted ' "$TMP/first")
# The control: the same with tunnels relayed byte for byte (the client's TLS is with the
# origin), so what a new name costs outside minting (its first decision, its pin) shows.
RELAYED_NAMES=()
for i in $(seq "$NAMES"); do RELAYED_NAMES+=("n$i.$RELAYED"); done
timeout 300 python3 "$CLIENT" first "$PROXY_PORT" "$HTTPS_PORT" "$TMP/cert.pem" "$PROXY_PID" \
    "${RELAYED_NAMES[@]}" >"$TMP/first-relayed"
read -r _ RNEW_MED RNEW_P90 RNEW_CPU < <(grep '^new ' "$TMP/first-relayed")
read -r _ ROLD_MED ROLD_P90 ROLD_CPU < <(grep '^minted ' "$TMP/first-relayed")
# mitmdump mints a leaf per SNI name too: the same through it, with names new to it.
MNEW_MED=nan MOLD_MED=nan MNEW_CPU=nan MOLD_CPU=nan MNEW_P90=nan MOLD_P90=nan
if [ -n "$MITMDUMP" ]; then
    MITM_NAMES=()
    for i in $(seq "$NAMES"); do MITM_NAMES+=("m$i.$NAME"); done
    timeout 300 python3 "$CLIENT" first "$MITM_PORT" "127.0.0.1:$HTTPS_PORT" \
        "$TMP/mitm/mitmproxy-ca-cert.pem" "$MITM_PID" "${MITM_NAMES[@]}" >"$TMP/first-mitm"
    read -r _ MNEW_MED MNEW_P90 MNEW_CPU < <(grep '^new ' "$TMP/first-mitm")
    read -r _ MOLD_MED MOLD_P90 MOLD_CPU < <(grep '^minted ' "$TMP/first-mitm")
fi

# --- the table -----------------------------------------------------------------------------------
med() { [ -s "$TMP/$1" ] && median <"$TMP/$1" || echo nan; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b + 0 > 0 && a != "nan") printf "%.2f", a / b; else print "-"}'; }
P=$(med r-plain) I=$(med r-inspect) M=$(med r-mitm)
CP=$(med cpu-plain) CI=$(med cpu-inspect) CM=$(med cpu-mitm)

echo
echo "egress-proxy inspection bench, $(date -u +%FT%TZ), $(nproc) cores, medians of $ROUNDS, $CONNS connections"
echo
echo "| what | plain HTTP | inspected | mitmdump | inspected/plain | inspected/mitmdump | target |"
echo "|---|---|---|---|---|---|---|"
echo "| keep-alive req/s | $P | $I | $M | $(ratio "$I" "$P") | $(ratio "$I" "$M") | >= 0.5 plain, >= 5 mitmdump |"
echo "| CPU per request, us | $CP | $CI | $CM | $(ratio "$CI" "$CP") | $(ratio "$CI" "$CM") | (lower is better) |"
# Requests per second of proxy CPU: what the proxy can serve per core, the client aside.
per_core() { awk -v c="$1" 'BEGIN {if (c + 0 > 0) printf "%.0f", 1e6 / c; else print "nan"}'; }
KP=$(per_core "$CP") KI=$(per_core "$CI") KM=$(per_core "$CM")
echo "| requests per CPU-second of the proxy | $KP | $KI | $KM | $(ratio "$KI" "$KP") | $(ratio "$KI" "$KM") | >= 0.5 plain, >= 5 mitmdump |"
echo "| first answer, new name, ms (median / p90) | | $NEW_MED / $NEW_P90 | $MNEW_MED / $MNEW_P90 | | $(ratio "$NEW_MED" "$MNEW_MED") | |"
echo "| first answer, minted name, ms (median / p90) | | $OLD_MED / $OLD_P90 | $MOLD_MED / $MOLD_P90 | | $(ratio "$OLD_MED" "$MOLD_MED") | |"
echo "| proxy CPU per new tunnel, us: new name / minted name | | $NEW_CPU / $OLD_CPU | $MNEW_CPU / $MOLD_CPU | | | |"
echo "| control, relayed tunnel: first answer ms, new name / known name (median) | | $RNEW_MED / $ROLD_MED | | | | |"
echo "| control, relayed tunnel: proxy CPU us, new name / known name | | $RNEW_CPU / $ROLD_CPU | | | | |"
echo
echo "a new inspected name adds $(awk -v a="$NEW_MED" -v b="$OLD_MED" 'BEGIN {printf "%.3f", a - b}') ms to a tunnel's first answer" \
    "and $((NEW_CPU - OLD_CPU)) us of proxy CPU; a new relayed name $(awk -v a="$RNEW_MED" -v b="$ROLD_MED" 'BEGIN {printf "%.3f", a - b}') ms" \
    "and $((RNEW_CPU - ROLD_CPU)) us (medians of $((NAMES - 1)))"
echo "samples (req/s, CPU us/request):"
for f in "$TMP"/r-* "$TMP"/cpu-*; do
    [ -s "$f" ] && echo "  $(basename "$f"): $(tr '\n' ' ' <"$f")"
done
[ -n "$MITMDUMP" ] && echo "mitmdump: $("$MITMDUMP" --version 2>/dev/null | head -n 1)"
exit 0
