#!/usr/bin/env bash
# What canaries cost on a request body (by hand, not in CI):
#
#   cargo build --release && benches/dlp.sh
#
# Starts an HTTP sink origin (it reads each request's body to its end and drops it) and
# two release proxies on loopback, one without canaries and one with 16 in
# `[canaries] values_file` (so every body is scanned and its tail held back), and posts
# SIZE_MIB of body through each in turn with curl (plain HTTP), ROUNDS times. Prints the
# median upload speed of each and the ratio with canaries to without, from the same run
# (docs/reference/dlp.md, "Bodies"). Knobs (environment): ROUNDS=5 SIZE_MIB=64
# BODY=base64 (random base64 text: the scan's worst case, every byte a candidate) or
# json (an issue tracker's JSON, repeated), BASE_PORT=21400 PROXY_BIN (default: the
# release build). Needs python3 and curl.
set -euo pipefail

ROUNDS=${ROUNDS:-5}
SIZE_MIB=${SIZE_MIB:-64}
BODY=${BODY:-base64}
BASE_PORT=${BASE_PORT:-21400}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PROXY_BIN=${PROXY_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/egress-proxy}
SINK_PORT=$BASE_PORT
command -v python3 >/dev/null || { echo "dlp.sh: python3 is needed" >&2; exit 2; }
command -v curl >/dev/null || { echo "dlp.sh: curl is needed" >&2; exit 2; }
[ -x "$PROXY_BIN" ] || { echo "dlp.sh: no proxy binary at $PROXY_BIN" >&2; exit 2; }

source "$ROOT/benches/common.sh"
bench_tmp dlp
median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

cat >"$TMP/sink.py" <<'PY'
# An HTTP/1.1 origin that reads each body (Content-Length) to its end, drops it, answers.
import socket, sys, threading
srv = socket.create_server(("127.0.0.1", int(sys.argv[1])))
def serve(c):
    buf, f = bytearray(1 << 20), c.makefile("rb")
    while True:
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            line = f.readline()
            if not line:
                return c.close()
            head += line
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        while length > 0:
            n = f.readinto(memoryview(buf)[: min(length, len(buf))])
            if not n:
                return c.close()
            length -= n
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
while True:
    c, _ = srv.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
PY
python3 "$TMP/sink.py" "$SINK_PORT" &
PIDS+=($!)
wait_port "$SINK_PORT"

# A body of base64 text (as a JSON upload would be), and 16 canaries of 40 characters.
python3 - "$TMP" "$SIZE_MIB" "$BODY" <<'PY'
import base64, os, sys
tmp, mib, kind = sys.argv[1], int(sys.argv[2]), sys.argv[3]
unit = (b'{"id": 12345, "title": "Fix the flaky test in the parser", "body": "When the '
        b'input ends with a newline the parser returns an error.", "labels": ["bug"]}, ')
with open(f"{tmp}/body", "wb") as f:
    if kind == "json":
        f.write((unit * ((mib << 20) // len(unit) + 1))[: mib << 20])
    else:
        f.write(base64.b64encode(os.urandom(mib * 786432))[: mib << 20])
with open(f"{tmp}/canaries.txt", "w") as f:
    for _ in range(16):
        f.write(base64.b64encode(os.urandom(45)).decode().replace("+", "a").replace("/", "b")[:40] + "\n")
PY

start_proxy() { # name port [canaries]
    local dir="$TMP/$1"
    mkdir -p "$dir"
    {
        echo 'version = 1'
        echo "allowed_domains = [\"sink.test:$SINK_PORT\"]"
        echo 'allowed_cidrs = ["127.0.0.0/8"]'
        echo "default_network_policy = { type = \"allowlist\", allowed_domains = [\"sink.test:$SINK_PORT\"] }"
        if [ -n "${3:-}" ]; then
            echo '[canaries]'
            echo "values_file = \"$TMP/canaries.txt\""
        fi
    } >"$dir/org.toml"
    "$PROXY_BIN" serve --org "$dir/org.toml" --listen "127.0.0.1:$2" \
        --resolve sink.test=127.0.0.1 --audit-log "$dir/audit.jsonl" \
        >"$dir/proxy.log" 2>&1 &
    PIDS+=($!)
    wait_port "$2"
}

start_proxy plain $((BASE_PORT + 1))
start_proxy canaries $((BASE_PORT + 2)) yes

upload() { # proxy port -> bytes per second
    curl -s -o /dev/null -w '%{speed_upload}\n' -x "http://127.0.0.1:$1" \
        -H 'Expect:' --data-binary @"$TMP/body" "http://sink.test:$SINK_PORT/upload"
}

declare -A SPEED
for name in plain canaries; do
    port=$((BASE_PORT + 1))
    [ "$name" = canaries ] && port=$((BASE_PORT + 2))
    upload "$port" >/dev/null # warm up
    SPEED[$name]=$(for _ in $(seq "$ROUNDS"); do upload "$port"; done | median)
done
printf '%-10s %10.1f MB/s\n' without "$(echo "${SPEED[plain]} / 1000000" | bc -l)"
printf '%-10s %10.1f MB/s\n' with "$(echo "${SPEED[canaries]} / 1000000" | bc -l)"
printf 'ratio      %10.3f (with 16 canaries / without)\n' "$(echo "${SPEED[canaries]} / ${SPEED[plain]}" | bc -l)"
