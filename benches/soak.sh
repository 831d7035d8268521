#!/usr/bin/env bash
# The soak of issue 12: mixed traffic against the release proxy for SOAK_SECONDS, its
# memory and descriptors sampled every 10 s, the policies reloaded every 10 s, and at the
# end the audit log matched against every attempt the load generator made. Run by hand,
# not by CI:
#
#   cargo build --release && benches/soak.sh                  # 30 minutes
#   SOAK_SECONDS=120 benches/soak.sh                          # a short check
#
# It starts, in a fresh temp dir, an nginx origin (a small page and a BIG_MIB file, over
# HTTP and HTTPS with a self-signed certificate), an upload origin (benches/soak.py
# origin: it answers once it has read the whole body), and the release proxy with
# --audit-allowed and the admin API, all on loopback; every name is pinned with
# --resolve and --dns-server points at a closed port, so nothing is resolved through the
# system resolver. benches/soak.py then drives it (kinds of attempt in its docstring and
# in docs/development.md, "Soak"). Every 10 s this script samples VmRSS and the number of
# open descriptors of the proxy into samples.csv, rewrites the organization file as the
# other of two equivalent versions and sends SIGHUP. At the end it stops the proxy
# (SIGTERM: the audit log is flushed), prints the closing figures and exits 1 if:
#   - the audit log does not hold exactly the records the attempts must leave (each
#     matched by its client address and URL; soak.py check prints the kinds that differ),
#   - the generator got an answer it did not expect, or a reload did not take effect,
#   - after warm-up, RSS grew by more than SOAK_RSS_TOLERANCE_KIB or the descriptors by
#     more than SOAK_FD_TOLERANCE (the largest sample of the last third of the
#     post-warm-up samples against the largest of the first third), or the descriptors
#     once traffic stopped and the upstream pool emptied (SOAK_SETTLE seconds) are more
#     than SOAK_IDLE_FD_TOLERANCE above those before traffic began.
#
# Knobs (environment): SOAK_SECONDS=1800 SOAK_RATE=150 (connections a second)
# SOAK_THREADS=8 SOAK_WARMUP (default a quarter of SOAK_SECONDS, at most 300)
# SOAK_RSS_TOLERANCE_KIB=4096 SOAK_FD_TOLERANCE=8 SOAK_IDLE_FD_TOLERANCE=2 SOAK_SETTLE=25
# BIG_MIB=4
# BASE_PORT=21300 (uses BASE_PORT to BASE_PORT + 4) PROXY_BIN (default: the release
# build) SOAK_KEEP=DIR (copy the audit log, samples and logs there) SOAK_SKIP="KIND ..."
# (kinds of attempt not to make, e.g. to check the rest while one is known to fail).

set -euo pipefail

SOAK_SECONDS=${SOAK_SECONDS:-1800}
SOAK_RATE=${SOAK_RATE:-150}
SOAK_THREADS=${SOAK_THREADS:-8}
SOAK_WARMUP=${SOAK_WARMUP:-$((SOAK_SECONDS / 4 < 300 ? SOAK_SECONDS / 4 : 300))}
SOAK_RSS_TOLERANCE_KIB=${SOAK_RSS_TOLERANCE_KIB:-4096}
SOAK_FD_TOLERANCE=${SOAK_FD_TOLERANCE:-8}
SOAK_IDLE_FD_TOLERANCE=${SOAK_IDLE_FD_TOLERANCE:-2}
SOAK_SETTLE=${SOAK_SETTLE:-25}
BIG_MIB=${BIG_MIB:-4}
BASE_PORT=${BASE_PORT:-21300}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PROXY_BIN=${PROXY_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/egress-proxy}
HEADER_TIMEOUT=3
PERIOD=10

HTTP_PORT=$BASE_PORT
HTTPS_PORT=$((BASE_PORT + 1))
UPLOAD_PORT=$((BASE_PORT + 2))
PROXY_PORT=$((BASE_PORT + 3))
ADMIN_PORT=$((BASE_PORT + 4))
NAME=allowed.test

for tool in nginx openssl python3 curl ss; do
    command -v "$tool" >/dev/null || { echo "soak.sh: $tool is needed" >&2; exit 2; }
done
[ -x "$PROXY_BIN" ] || { echo "soak.sh: no proxy binary at $PROXY_BIN (cargo build --release)" >&2; exit 2; }
for port in $HTTP_PORT $HTTPS_PORT $UPLOAD_PORT $PROXY_PORT $ADMIN_PORT; do
    if ss -Htln "sport = :$port" | grep -q .; then
        echo "soak.sh: port $port is taken (set BASE_PORT)" >&2
        exit 2
    fi
done

source "$ROOT/benches/common.sh"
bench_tmp soak
keep() {
    if [ -n "${SOAK_KEEP:-}" ]; then
        mkdir -p "$SOAK_KEEP"
        cp "$TMP"/*.jsonl "$TMP"/*.csv "$TMP"/*.log "$TMP"/*.txt "$SOAK_KEEP"/ 2>/dev/null || true
    fi
}
trap 'keep; bench_cleanup' EXIT

rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
fds() { ls "/proc/$1/fd" | wc -l; }

# --- the origins ------------------------------------------------------------------------
mkdir -p "$TMP/www" "$TMP/nginx"
head -c 256 /dev/zero | tr '\0' 'x' >"$TMP/www/index.html"
head -c $((BIG_MIB * 1024 * 1024)) /dev/urandom >"$TMP/www/big"
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=$NAME" \
    -addext "subjectAltName=DNS:$NAME" \
    -keyout "$TMP/key.pem" -out "$TMP/cert.pem" 2>/dev/null
# A short keep-alive upstream, so the proxy's pool empties soon after traffic stops.
NGINX_KEEPALIVE=10s start_nginx "$HTTP_PORT" "$HTTPS_PORT"
python3 "$ROOT/benches/soak.py" origin "$UPLOAD_PORT" 2>"$TMP/upload.log" &
PIDS+=($!)
wait_port $UPLOAD_PORT

# --- the proxy ----------------------------------------------------------------------------
# Two equivalent organization files (the same entries in another order): each reload
# really reads and compiles a changed file, and must change nothing.
org() { # entries...
    local list
    list=$(printf '"%s", ' "$@")
    list="[${list%, }]"
    cat <<EOF
version = 1
name = "soak"
allowed_domains = $list
allowed_cidrs = ["127.0.0.0/8"]
default_network_policy = { type = "allowlist", allowed_domains = $list }
[tunnels]
require_tls = true
EOF
}
ENTRIES=("$NAME:$HTTP_PORT" "$NAME:$HTTPS_PORT" "$NAME:$UPLOAD_PORT" "other.test:$HTTP_PORT")
org "${ENTRIES[@]}" >"$TMP/org-a.toml"
org "${ENTRIES[3]}" "${ENTRIES[2]}" "${ENTRIES[1]}" "${ENTRIES[0]}" >"$TMP/org-b.toml"
cp "$TMP/org-a.toml" "$TMP/org.toml"
head -c 24 /dev/urandom | base64 >"$TMP/token"
chmod 600 "$TMP/token"
# --dns-server points at a closed loopback port: a name that is not pinned fails at once.
EGRESS_PROXY_LOG=info "$PROXY_BIN" serve --org "$TMP/org.toml" --listen "127.0.0.1:$PROXY_PORT" \
    --resolve "$NAME=127.0.0.1" --resolve "other.test=127.0.0.1" --dns-server 127.0.0.1:9 \
    --audit-log "$TMP/audit.jsonl" --audit-allowed --header-timeout $HEADER_TIMEOUT \
    --admin-listen "127.0.0.1:$ADMIN_PORT" --admin-token-file "$TMP/token" \
    2>"$TMP/proxy.log" &
PROXY_PID=$!
PIDS+=($PROXY_PID)
wait_port $PROXY_PORT
wait_port $ADMIN_PORT
metric() { # name: its value from /metrics, summed over labels
    curl -sS --max-time 10 -H "Authorization: Bearer $(cat "$TMP/token")" \
        "http://127.0.0.1:$ADMIN_PORT/metrics" |
        awk -v m="$1" '$1 == m || index($1, m "{") == 1 {s += $2} END {print s + 0}'
}

# --- the run ------------------------------------------------------------------------------
sleep 1
START_RSS=$(rss_kib $PROXY_PID)
START_FDS=$(fds $PROXY_PID)
echo "t_seconds,rss_kib,fds,phase" >"$TMP/samples.csv"
echo "0,$START_RSS,$START_FDS,idle" >>"$TMP/samples.csv"
echo "soak.sh: ${SOAK_SECONDS}s of mixed traffic at $SOAK_RATE connections/s ($SOAK_THREADS threads), warm-up ${SOAK_WARMUP}s; temp dir $TMP" >&2
python3 "$ROOT/benches/soak.py" run --proxy-port $PROXY_PORT --admin-port $ADMIN_PORT \
    --token-file "$TMP/token" --http-port $HTTP_PORT --https-port $HTTPS_PORT \
    --upload-port $UPLOAD_PORT --ca "$TMP/cert.pem" --big-bytes $((BIG_MIB * 1024 * 1024)) \
    --seconds "$SOAK_SECONDS" --rate "$SOAK_RATE" --threads "$SOAK_THREADS" \
    --header-timeout $HEADER_TIMEOUT --skip "${SOAK_SKIP:-}" --expected "$TMP/expected.jsonl" \
    2>"$TMP/generator.log" &
GEN_PID=$!
PIDS+=($GEN_PID)
T0=$(date +%s)
CPU0=$(cpu_ticks $PROXY_PID)
HUPS=0
# Bounded: the generator stops itself at the deadline (each attempt has a 15 s timeout);
# this loop gives it 120 s more and then stops it.
while kill -0 $GEN_PID 2>/dev/null; do
    sleep $PERIOD
    kill -0 $PROXY_PID 2>/dev/null || { echo "soak.sh: the proxy died" >&2; tail -n 20 "$TMP/proxy.log" >&2; exit 1; }
    t=$(($(date +%s) - T0))
    echo "$t,$(rss_kib $PROXY_PID),$(fds $PROXY_PID),load" >>"$TMP/samples.csv"
    if [ $((HUPS % 2)) = 0 ]; then cp "$TMP/org-b.toml" "$TMP/org.next"; else cp "$TMP/org-a.toml" "$TMP/org.next"; fi
    mv "$TMP/org.next" "$TMP/org.toml"
    kill -HUP $PROXY_PID
    HUPS=$((HUPS + 1))
    if [ $t -gt $((SOAK_SECONDS + 120)) ]; then
        echo "soak.sh: the generator overran its deadline; stopping it" >&2
        kill $GEN_PID
        break
    fi
done
GEN_RC=0
wait $GEN_PID || GEN_RC=$?
LOAD_SECONDS=$(($(date +%s) - T0))
CPU_SECONDS=$(awk -v t="$(($(cpu_ticks $PROXY_PID) - CPU0))" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.1f", t / hz}')
LOAD_END_RSS=$(rss_kib $PROXY_PID)
LOAD_END_FDS=$(fds $PROXY_PID)
sleep 2 # the last SIGHUP's reload
RELOADS_OK=$(metric egress_reloads_ok_total)
RELOADS_FAILED=$(metric egress_reloads_failed_total)
HEADER_TIMEOUTS=$(metric egress_header_timeouts_total)
# Let the upstream pool empty (upstream closes after 10 s idle, the pool sweeps every
# 10 s), then the descriptors should be those before traffic began.
sleep "$SOAK_SETTLE"
END_RSS=$(rss_kib $PROXY_PID)
END_FDS=$(fds $PROXY_PID)
echo "$(($(date +%s) - T0)),$END_RSS,$END_FDS,idle" >>"$TMP/samples.csv"
kill -TERM $PROXY_PID
PROXY_RC=0
wait $PROXY_PID || PROXY_RC=$?
FLUSHED=$(grep -o 'lines=[0-9]*' "$TMP/proxy.log" | tail -n 1 | cut -d= -f2)

# --- the figures ----------------------------------------------------------------------------
cat "$TMP/generator.log" >&2
echo
echo "egress-proxy soak, $(date -u +%FT%TZ), ${SOAK_SECONDS}s, $(nproc) cores, $SOAK_RATE connections/s"
echo
CHECK_RC=0
python3 "$ROOT/benches/soak.py" check --expected "$TMP/expected.jsonl" --audit "$TMP/audit.jsonl" \
    | tee "$TMP/check.txt" || CHECK_RC=$?
# Flatness after warm-up: the largest sample of the last third of the post-warm-up load
# samples against the largest of the first third.
read -r RSS_EARLY RSS_LATE FD_EARLY FD_LATE N_SAMPLES < <(awk -F, -v w="$SOAK_WARMUP" '
    NR > 1 && $4 == "load" && $1 >= w {n++; t[n] = $1; r[n] = $2; f[n] = $3}
    END {
        k = int(n / 3); if (k < 1) k = 1
        for (i = 1; i <= n; i++) {
            if (i <= k) {if (r[i] > re) re = r[i]; if (f[i] > fe) fe = f[i]}
            if (i > n - k) {if (r[i] > rl) rl = r[i]; if (f[i] > fl) fl = f[i]}
        }
        print re + 0, rl + 0, fe + 0, fl + 0, n + 0
    }' "$TMP/samples.csv")
mib() { awk -v k="$1" 'BEGIN {printf "%.1f MiB", k / 1024}'; }
echo
echo "| figure | start (idle) | after warm-up | end of load | end (idle) |"
echo "|---|---|---|---|---|"
echo "| RSS | $(mib "$START_RSS") | $(mib "$RSS_EARLY") | $(mib "$LOAD_END_RSS") | $(mib "$END_RSS") |"
echo "| open descriptors | $START_FDS | $FD_EARLY | $LOAD_END_FDS | $END_FDS |"
echo
echo "post-warm-up samples: $N_SAMPLES; largest RSS first third $(mib "$RSS_EARLY"), last third $(mib "$RSS_LATE"); largest descriptors first third $FD_EARLY, last third $FD_LATE"
echo "proxy CPU: ${CPU_SECONDS}s (user + system) in ${LOAD_SECONDS}s of load"
echo "reloads: $HUPS SIGHUPs sent, $RELOADS_OK took effect, $RELOADS_FAILED failed; silent connections closed by the header timeout: $HEADER_TIMEOUTS"
echo "audit lines: expected $(awk '/^audit lines expected/ {print $4}' "$TMP/check.txt"), found $(wc -l <"$TMP/audit.jsonl") (the proxy said it flushed ${FLUSHED:-?})"
echo "samples: $TMP/samples.csv (kept with SOAK_KEEP=DIR)"

FAIL=()
[ "$CHECK_RC" = 0 ] || FAIL+=("the audit log does not hold one record per attempt")
[ "$GEN_RC" = 0 ] || FAIL+=("the generator got unexpected answers (above)")
[ "$PROXY_RC" = 0 ] || FAIL+=("the proxy exited with $PROXY_RC")
[ "$RELOADS_FAILED" = 0 ] && [ "$RELOADS_OK" -ge "$HUPS" ] || FAIL+=("reloads: $RELOADS_OK of $HUPS took effect, $RELOADS_FAILED failed")
[ "$N_SAMPLES" -ge 3 ] || FAIL+=("only $N_SAMPLES samples after warm-up: run longer or lower SOAK_WARMUP")
[ $((RSS_LATE - RSS_EARLY)) -le "$SOAK_RSS_TOLERANCE_KIB" ] || FAIL+=("RSS grew by $((RSS_LATE - RSS_EARLY)) KiB after warm-up (tolerance $SOAK_RSS_TOLERANCE_KIB)")
[ $((FD_LATE - FD_EARLY)) -le "$SOAK_FD_TOLERANCE" ] || FAIL+=("descriptors grew by $((FD_LATE - FD_EARLY)) after warm-up (tolerance $SOAK_FD_TOLERANCE)")
[ $((END_FDS - START_FDS)) -le "$SOAK_IDLE_FD_TOLERANCE" ] || FAIL+=("$END_FDS descriptors open once idle again, $START_FDS before traffic (tolerance $SOAK_IDLE_FD_TOLERANCE)")
if grep -q panicked "$TMP/proxy.log"; then FAIL+=("the proxy panicked: $(grep -m1 panicked "$TMP/proxy.log")"); fi
echo
if [ ${#FAIL[@]} = 0 ]; then
    echo "soak: PASS"
else
    printf 'soak: FAIL: %s\n' "${FAIL[@]}"
    exit 1
fi
