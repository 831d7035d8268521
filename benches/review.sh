#!/usr/bin/env bash
# The review commands on large inputs, by hand (not CI):
#
#   cargo build --release && benches/review.sh
#
# `diff` of two organization files of ENTRIES entries (NEW is OLD with about 1% of its
# entries changed), and `audit suggest` and `audit replay` over a log of LINES lines
# (benches/review_gen.py writes them). Each is timed at 10% of its input and at 100%,
# ROUNDS times (the median is reported), so the ratio says whether it is linear: about
# 10 for linear work. Target: each under 10 s at 100%.
#
# Knobs (environment): ENTRIES=100000 LINES=1000000 ROUNDS=3
# BIN=target/release/egress-proxy (another build, e.g. target/debug/egress-proxy).
set -euo pipefail
source "$(dirname "$0")/common.sh"
bench_tmp review

ENTRIES=${ENTRIES:-100000}
LINES=${LINES:-1000000}
ROUNDS=${ROUNDS:-3}
BIN=${BIN:-target/release/egress-proxy}
GEN="$(dirname "$0")/review_gen.py"
[ -x "$BIN" ] || { echo "$BENCH: no $BIN: cargo build --release first" >&2; exit 2; }

for pct in 10 100; do
    python3 "$GEN" org $((ENTRIES * pct / 100)) "$TMP/old$pct.toml" "$TMP/new$pct.toml"
    python3 "$GEN" log $((LINES * pct / 100)) "$TMP/log$pct.jsonl"
done
cat > "$TMP/org.toml" <<'TOML'
version = 1
allowed_domains = ["*.example1.com", "*.example2.com", "*.example3.com", "*.example5.com",
                   "*.example8.com", "*.example13.com", "*.example21.com", "*.example34.com"]
default_network_policy = { type = "allowlist", allowed_domains = ["*.example1.com"] }
TOML

# The median wall time, in seconds, of ROUNDS runs of "$@" (exit 0 or 1 is a result).
median() {
    local times=() i start end
    for i in $(seq "$ROUNDS"); do
        start=$(date +%s.%N)
        "$@" > /dev/null 2>&1 || [ $? -le 1 ] || { echo "$BENCH: failed: $*" >&2; exit 2; }
        end=$(date +%s.%N)
        times+=("$(echo "$end - $start" | bc)")
    done
    printf '%s\n' "${times[@]}" | sort -n | sed -n "$(( (ROUNDS + 1) / 2 ))p"
}

report() { # name small full
    printf '%-8s 10%%: %6.2f s   100%%: %6.2f s   ratio %5.1f\n' "$1" "$2" "$3" \
        "$(echo "$3 / $2" | bc -l)"
}

wc -lc "$TMP"/old*.toml "$TMP"/log*.jsonl | grep -v total
for what in diff suggest replay; do
    small=0 full=0
    for pct in 10 100; do
        case $what in
            diff) t=$(median "$BIN" diff --format json "$TMP/old$pct.toml" "$TMP/new$pct.toml") ;;
            suggest) t=$(median "$BIN" audit suggest --org "$TMP/org.toml" "$TMP/log$pct.jsonl") ;;
            replay) t=$(median "$BIN" audit replay --format json --org "$TMP/org.toml" "$TMP/log$pct.jsonl") ;;
        esac
        if [ "$pct" = 10 ]; then small=$t; else full=$t; fi
    done
    report "$what" "$small" "$full"
done
