#!/usr/bin/env bash
# Run every fuzz target for SECS seconds (default 600), one after another, on a working
# corpus in /tmp seeded from fuzz/corpus (the committed seeds are not modified). Crashes
# land in fuzz/artifacts/TARGET/; copy a fixed one into fuzz/corpus/TARGET/ so that
# `cargo test` replays it. cargo-fuzz needs nightly features: RUSTC_BOOTSTRAP=1 lets the
# stable toolchain build it.
set -euo pipefail
cd "$(dirname "$0")"
secs=${1:-600}
for target in org_policy request_policy host request_target request_path client_hello dns_answer socks_handshake; do
    work=/tmp/egress-fuzz/$target
    mkdir -p "$work"
    echo "== $target ($secs s)"
    RUSTC_BOOTSTRAP=1 cargo fuzz run -O "$target" "$work" "corpus/$target" -- \
        -max_total_time="$secs" -print_final_stats=1 2>&1 | tail -25
done
