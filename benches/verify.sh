#!/usr/bin/env bash
# `audit verify` throughput (docs/reference/audit-log.md, "The chain"): a log of LINES
# records with a valid chain, written by benches/chain_gen.py as the proxy's writer seals
# them, checked ROUNDS times by the release binary; prints the median wall time and
# MB/s (target: at least 100 MB/s). Run by hand:
#
#   cargo build --release && benches/verify.sh
#
# Knobs (environment): LINES=100000 ROUNDS=5 PROXY_BIN (default: the release build).
set -euo pipefail

LINES=${LINES:-100000}
ROUNDS=${ROUNDS:-5}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PROXY_BIN=${PROXY_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/egress-proxy}
[ -x "$PROXY_BIN" ] || { echo "verify.sh: no proxy binary at $PROXY_BIN (cargo build --release)" >&2; exit 2; }

source "$ROOT/benches/common.sh"
bench_tmp verify
python3 "$ROOT/benches/chain_gen.py" "$LINES" "$TMP/audit.jsonl"
bytes=$(stat -c %s "$TMP/audit.jsonl")
: >"$TMP/times"
for _ in $(seq "$ROUNDS"); do
    start=$(date +%s%N)
    out=$("$PROXY_BIN" audit verify "$TMP/audit.jsonl")
    end=$(date +%s%N)
    case $out in intact:*) ;; *) echo "verify.sh: $out" >&2; exit 1 ;; esac
    echo $(((end - start) / 1000)) >>"$TMP/times"
done
us=$(sort -n "$TMP/times" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
echo "$out"
echo "$LINES records, $bytes bytes: median $((us / 1000)) ms of $ROUNDS, $(python3 -c "print(round($bytes / $us, 1))") MB/s (target >= 100)"
