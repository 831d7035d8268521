#!/usr/bin/env bash
# What a session's canaries cost in memory (by hand, not in CI):
#
#   cargo build --release && benches/dlp_sessions.sh
#
# Starts one release proxy with the admin API on loopback, creates SESSIONS sessions
# without canaries and reads its RSS, then SESSIONS more with CANARIES minted canaries
# each (`{"kind": "generic"}`) and reads it again; then the same two steps in the other
# order in a second proxy, so neither batch pays alone for the allocator's growth. Prints
# the RSS each batch added and the difference per batch: what the canaries cost
# (docs/reference/dlp.md, "How it is looked for"). Knobs (environment): SESSIONS=10000
# CANARIES=4 PARALLEL=8 BASE_PORT=21500 PROXY_BIN (default: the release build). Needs
# python3.
set -euo pipefail

SESSIONS=${SESSIONS:-10000}
CANARIES=${CANARIES:-4}
PARALLEL=${PARALLEL:-8}
BASE_PORT=${BASE_PORT:-21500}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PROXY_BIN=${PROXY_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/egress-proxy}
command -v python3 >/dev/null || { echo "dlp_sessions.sh: python3 is needed" >&2; exit 2; }
[ -x "$PROXY_BIN" ] || { echo "dlp_sessions.sh: no proxy binary at $PROXY_BIN" >&2; exit 2; }

source "$ROOT/benches/common.sh"
bench_tmp dlp-sessions

cat >"$TMP/create.py" <<'PY'
# Create N sessions on the admin API at PORT, each with C canaries, over a few
# keep-alive connections in parallel; exit 1 on any answer but 201.
import http.client, json, sys, threading
port, n, c, parallel = (int(a) for a in sys.argv[1:5])
body = json.dumps({
    "network_policy": {"type": "allowlist", "allowed_domains": ["allowed.test"]},
    **({"canaries": [{"kind": "generic"}] * c} if c else {}),
})
failed = []
def work(count):
    conn = http.client.HTTPConnection("127.0.0.1", port)
    for _ in range(count):
        conn.request("POST", "/v1/sessions", body, {"Content-Type": "application/json"})
        answer = conn.getresponse()
        answer.read()
        if answer.status != 201:
            failed.append(answer.status)
            return
threads = [threading.Thread(target=work, args=(n // parallel + (i < n % parallel),)) for i in range(parallel)]
for t in threads: t.start()
for t in threads: t.join()
sys.exit(1 if failed else 0)
PY

rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }

start_proxy() { # name port admin_port -> PID in PROXY_PID
    local dir="$TMP/$1"
    mkdir -p "$dir"
    printf '%s\n' 'version = 1' 'allowed_domains = ["allowed.test"]' \
        'default_network_policy = { type = "allowlist", allowed_domains = ["allowed.test"] }' >"$dir/org.toml"
    "$PROXY_BIN" serve --org "$dir/org.toml" --listen "127.0.0.1:$2" --admin-listen "127.0.0.1:$3" \
        --audit-log "$dir/audit.jsonl" >"$dir/proxy.log" 2>&1 &
    PROXY_PID=$!
    PIDS+=("$PROXY_PID")
    wait_port "$3"
}

batch() { # pid admin_port canaries -> KiB added
    local before after
    before=$(rss_kib "$1")
    python3 "$TMP/create.py" "$2" "$SESSIONS" "$3" "$PARALLEL" || { echo "dlp_sessions.sh: a session was refused" >&2; exit 2; }
    sleep 1
    after=$(rss_kib "$1")
    echo $((after - before))
}

start_proxy first $((BASE_PORT + 1)) $((BASE_PORT + 2))
plain1=$(batch "$PROXY_PID" $((BASE_PORT + 2)) 0)
with1=$(batch "$PROXY_PID" $((BASE_PORT + 2)) "$CANARIES")
start_proxy second $((BASE_PORT + 3)) $((BASE_PORT + 4))
with2=$(batch "$PROXY_PID" $((BASE_PORT + 4)) "$CANARIES")
plain2=$(batch "$PROXY_PID" $((BASE_PORT + 4)) 0)

mib() { echo "scale=1; $1 / 1024" | bc; }
printf '%-34s %8s MiB %8s MiB\n' "RSS added by $SESSIONS sessions" "(first)" "(second)"
printf '%-34s %8s MiB %8s MiB\n' "  without canaries" "$(mib "$plain1")" "$(mib "$plain2")"
printf '%-34s %8s MiB %8s MiB\n' "  with $CANARIES canaries each" "$(mib "$with1")" "$(mib "$with2")"
printf 'canaries cost %s MiB (mean of both orders)\n' "$(mib $(((with1 + with2 - plain1 - plain2) / 2)))"
