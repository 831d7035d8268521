#!/usr/bin/env bash
# Render `audit summarize --format html` in headless Chromium and save a screenshot, to
# look at the page as a reviewer would. Not part of `cargo test` (which checks the HTML's
# structure without a browser).
#
#   docs/ci/screenshot-summary.sh [AUDIT_LOG...]    (default: the test fixture log)
#   SCREENSHOT=/tmp/summary.png docs/ci/screenshot-summary.sh /var/log/egress/*.jsonl.gz
#
# The screenshot goes to $SCREENSHOT (default /tmp/egress-summary.png): keep it out of
# the repository.
set -euo pipefail
cd "$(dirname "$0")/../.."

out="${SCREENSHOT:-/tmp/egress-summary.png}"
if [ "$#" -eq 0 ]; then
    set -- tests/fixtures/audit/audit.jsonl
fi
html="$(mktemp --suffix=.html)"
cargo run --quiet -- audit summarize --format html "$@" > "$html"

browser="$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)"
if [ -z "$browser" ]; then
    echo "no chromium found (apt-get install -y chromium); the page is at $html" >&2
    exit 0
fi
profile="$(mktemp -d)"
trap 'rm -rf "$profile"' EXIT
"$browser" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$profile" --hide-scrollbars --window-size=1100,1700 \
    --screenshot="$out" "file://$html" 2>/dev/null
echo "screenshot: $out (page: $html)"
