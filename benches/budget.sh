#!/usr/bin/env bash
# What an upload budget costs on the tunnel path (by hand, not in CI):
#
#   cargo build --release && benches/budget.sh
#
# Starts a TCP sink origin and two release proxies on loopback, one without a budget and
# one with `[limits] upload_bytes` far above what the run sends (so every byte is granted,
# never cut), and uploads through a `CONNECT` tunnel of each in turn, ROUNDS times:
# SIZE_MIB in 1 MiB writes (bulk: the relay reads in batches) and in 4 KiB writes
# (small: a read per write, mostly). Prints, per proxy and mode, the median upload speed and the proxy's CPU
# (user + system) per GiB, and the budget's ratio to no budget, from the same run.
# Knobs (environment): ROUNDS=5 SIZE_MIB=1024 BASE_PORT=21300 PROXY_BIN (default: the
# release build) PROXY_ARGS="..." (more flags for both proxies, e.g. `--tunnel-splice`). Needs python3. Names are pinned with --resolve.
#
# INSTRUCTIONS=1 instead counts the proxy's user-space instructions per MiB uploaded
# with callgrind (repeatable where timings are not; needs valgrind): each proxy is run
# twice, for FEW_MIB and MANY_MIB, and (MANY - FEW) / (MANY_MIB - FEW_MIB) is printed,
# so start-up cancels out.
set -euo pipefail

ROUNDS=${ROUNDS:-5}
SIZE_MIB=${SIZE_MIB:-1024}
BASE_PORT=${BASE_PORT:-21300}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PROXY_BIN=${PROXY_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/egress-proxy}
SINK_PORT=$BASE_PORT
command -v python3 >/dev/null || { echo "budget.sh: python3 is needed" >&2; exit 2; }
[ -x "$PROXY_BIN" ] || { echo "budget.sh: no proxy binary at $PROXY_BIN" >&2; exit 2; }

source "$ROOT/benches/common.sh"
bench_tmp budget
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
TICK=$(getconf CLK_TCK)
median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

cat >"$TMP/upload.py" <<'PY'
# sink PORT: read and drop every byte of every connection.
# send PROXY_PORT ORIGIN_PORT MIB WRITE_BYTES: CONNECT, upload, print seconds.
import socket, sys, threading, time
if sys.argv[1] == "sink":
    srv = socket.create_server(("127.0.0.1", int(sys.argv[2])))
    def drain(c):
        buf = bytearray(1 << 20)
        while c.recv_into(buf):
            pass
        c.close()
    while True:
        c, _ = srv.accept()
        threading.Thread(target=drain, args=(c,), daemon=True).start()
proxy, origin, mib, write = (int(a) for a in sys.argv[2:6])
c = socket.create_connection(("127.0.0.1", proxy), timeout=120)
c.sendall(f"CONNECT sink.test:{origin} HTTP/1.1\r\nHost: sink.test:{origin}\r\n\r\n".encode())
head = b""
while b"\r\n\r\n" not in head:
    head += c.recv(4096)
assert head.startswith(b"HTTP/1.1 200"), head
piece = memoryview(b"u" * write)
total = mib << 20
start = time.perf_counter()
sent = 0
while sent < total:
    c.sendall(piece)
    sent += write
c.shutdown(socket.SHUT_WR)
while c.recv(65536):
    pass
print(f"{time.perf_counter() - start:.4f}")
PY
python3 "$TMP/upload.py" sink "$SINK_PORT" &
PIDS+=($!)
wait_port "$SINK_PORT"

declare -A PORT=([none]=$((BASE_PORT + 1)) [budget]=$((BASE_PORT + 2))) PID=()
for cfg in none budget; do
    {
        echo 'version = 1'
        echo "allowed_domains = [\"sink.test:$SINK_PORT\"]"
        echo 'allowed_cidrs = ["127.0.0.0/8"]'
        echo "default_network_policy = { type = \"allowlist\", allowed_domains = [\"sink.test:$SINK_PORT\"] }"
        # 2^62 bytes: counted and granted on every read, never reached.
        [ "$cfg" = budget ] && printf '[limits]\nupload_bytes = 4611686018427387904\n'
    } >"$TMP/org-$cfg.toml"
done

if [ "${INSTRUCTIONS:-0}" = 1 ]; then
    FEW_MIB=${FEW_MIB:-64}
    MANY_MIB=${MANY_MIB:-320}
    count() { # cfg mib write_bytes: instructions the proxy ran, start to exit
        local pid out="$TMP/callgrind.$1.$2.$3"
        EGRESS_PROXY_LOG=warn valgrind --tool=callgrind --callgrind-out-file="$out" \
            "$PROXY_BIN" serve --org "$TMP/org-$1.toml" --listen "127.0.0.1:${PORT[$1]}" \
            --resolve "sink.test=127.0.0.1" --audit-log "$TMP/audit-$1.jsonl" --workers 1 \
            ${PROXY_ARGS:-} 2>"$out.log" &
        pid=$!
        PIDS+=($pid)
        wait_port "${PORT[$1]}" 30
        timeout 600 python3 "$TMP/upload.py" send "${PORT[$1]}" "$SINK_PORT" "$2" "$3" >/dev/null
        kill -TERM "$pid"
        wait "$pid" || true
        awk '/Collected/ {gsub(",", "", $4); print $4}' "$out.log"
    }
    echo "| upload | no budget instructions/MiB | budget instructions/MiB | ratio |"
    echo "|---|---|---|---|"
    for mode in bulk small; do
        write=$([ "$mode" = bulk ] && echo 1048576 || echo 4096)
        declare -A per=()
        for cfg in none budget; do
            echo "  $cfg $mode" >&2
            few=$(count "$cfg" "$FEW_MIB" "$write")
            many=$(count "$cfg" "$MANY_MIB" "$write")
            per[$cfg]=$(( (many - few) / (MANY_MIB - FEW_MIB) ))
        done
        awk -v m="$mode" -v a="${per[none]}" -v b="${per[budget]}" \
            'BEGIN {printf "| %s | %d | %d | %.3f |\n", m, a, b, b / a}'
    done
    exit 0
fi

for cfg in none budget; do
    port=${PORT[$cfg]}
    "$PROXY_BIN" serve --org "$TMP/org-$cfg.toml" --listen "127.0.0.1:$port" \
        --resolve "sink.test=127.0.0.1" --audit-log "$TMP/audit-$cfg.jsonl" --workers 1 \
        --tunnel-idle-timeout 600 ${PROXY_ARGS:-} 2>>"$TMP/proxy-$cfg.log" &
    PIDS+=($!)
    PID[$cfg]=$!
    wait_port "$port"
done

upload() { # cfg mode write_bytes
    local c0 secs ticks
    c0=$(cpu_ticks "${PID[$1]}")
    secs=$(python3 "$TMP/upload.py" send "${PORT[$1]}" "$SINK_PORT" "$SIZE_MIB" "$3")
    ticks=$(($(cpu_ticks "${PID[$1]}") - c0))
    awk -v s="$secs" -v m="$SIZE_MIB" 'BEGIN {printf "%.1f\n", m * 1.048576 / s}' >>"$TMP/mb-$1-$2"
    awk -v t="$ticks" -v hz="$TICK" -v m="$SIZE_MIB" 'BEGIN {printf "%.1f\n", t * 1e3 / hz / (m / 1024)}' >>"$TMP/cpu-$1-$2"
}

echo "budget.sh: $ROUNDS rounds of ${SIZE_MIB} MiB uploads per proxy and mode" >&2
for round in $(seq "$ROUNDS"); do
    for mode in bulk small; do
        write=$([ "$mode" = bulk ] && echo 1048576 || echo 4096)
        # Which goes first alternates, so neither always runs on a warmer machine.
        order=$([ $((round % 2)) = 1 ] && echo "none budget" || echo "budget none")
        for cfg in $order; do
            echo "  round $round: $cfg $mode" >&2
            upload "$cfg" "$mode" "$write"
        done
    done
done

# Medians, with the spread (min-max) of the rounds: on a shared machine the spread says
# how far apart two medians must be to mean anything.
spread() { sort -g "$1" | awk '{a[NR]=$1} END {printf "%s-%s", a[1], a[NR]}'; }
echo "| upload | no budget MB/s | budget MB/s | ratio | no budget CPU ms/GiB | budget CPU ms/GiB | ratio |"
echo "|---|---|---|---|---|---|---|"
for mode in bulk small; do
    n_mb=$(median <"$TMP/mb-none-$mode"); b_mb=$(median <"$TMP/mb-budget-$mode")
    n_cpu=$(median <"$TMP/cpu-none-$mode"); b_cpu=$(median <"$TMP/cpu-budget-$mode")
    awk -v m="$mode" -v a="$n_mb" -v b="$b_mb" -v c="$n_cpu" -v d="$b_cpu" \
        -v sa="$(spread "$TMP/mb-none-$mode")" -v sb="$(spread "$TMP/mb-budget-$mode")" \
        -v sc="$(spread "$TMP/cpu-none-$mode")" -v sd="$(spread "$TMP/cpu-budget-$mode")" 'BEGIN {
        printf "| %s | %s (%s) | %s (%s) | %.2f | %s (%s) | %s (%s) | %.2f |\n",
            m, a, sa, b, sb, b / a, c, sc, d, sd, (c > 0 ? d / c : 0) }'
done
