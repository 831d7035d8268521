#!/usr/bin/env bash
# What a session's canaries cost a request (by hand, not in CI), on loopback only:
#
#   cargo build --release && benches/dlp_ratios.sh
#
# Starts an nginx origin (a 256-byte body and a BIG_MIB file, over plain HTTP and HTTPS
# with a certificate made here), one release proxy with a CA of its own (`ca init`) and
# the admin API, and two sessions on it: one with CANARIES minted canaries, one without.
# Then, interleaving the two sessions and repeating each ROUNDS times (medians):
#
#   plain    keep-alive GETs through the proxy as plain HTTP (absolute-form)
#   inspect  keep-alive GETs inside one CONNECT + TLS tunnel to an inspected host
#   download a BIG_MIB HTTPS download with curl through an opaque CONNECT tunnel
#   upload-json, upload-b64
#            a BIG_MIB upload (curl --data-binary) through an inspected tunnel to a TLS
#            sink that reads the whole body before it answers: an issue tracker's JSON
#            repeated, or random base64 text (the scan's worst case)
#
# the first two with CONNS clients (benches/inspect_client.py, one process each) for
# DURATION seconds. The session with canaries also turns every built-in detector on
# (its policy's "dlp"), so "with" is the whole body scan and "without" none. Prints
# each with and without and the ratio (with / without), from the same run
# (docs/reference/dlp.md, "How it is looked for"). Every name is pinned with --resolve.
# Knobs (environment): ROUNDS=3 DURATION=5 CONNS=8 CANARIES=16 BIG_MIB=64
# CONFIGS="plain inspect download upload-json upload-b64" BASE_PORT=21700 PROXY_BIN
# (default: the release build). Needs nginx, openssl, curl and python3.
set -euo pipefail

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
CONNS=${CONNS:-8}
CANARIES=${CANARIES:-16}
BIG_MIB=${BIG_MIB:-64}
BASE_PORT=${BASE_PORT:-21700}
CONFIGS=${CONFIGS:-plain inspect download upload-json upload-b64}
MAX=10000000
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PROXY_BIN=${PROXY_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/egress-proxy}
CLIENT=$ROOT/benches/inspect_client.py
HTTP_PORT=$BASE_PORT HTTPS_PORT=$((BASE_PORT + 1)) PROXY_PORT=$((BASE_PORT + 2)) ADMIN_PORT=$((BASE_PORT + 3))
SINK_PORT=$((BASE_PORT + 4))
NAME=x.test      # inspected, on HTTPS_PORT
PLAIN=plain.test # plain HTTP, on HTTP_PORT
RELAYED=y.test   # relayed, not inspected, on HTTPS_PORT
for tool in nginx openssl curl python3; do
    command -v "$tool" >/dev/null || { echo "dlp_ratios.sh: $tool is needed" >&2; exit 2; }
done
[ -x "$PROXY_BIN" ] || { echo "dlp_ratios.sh: no proxy binary at $PROXY_BIN" >&2; exit 2; }

source "$ROOT/benches/common.sh"
bench_tmp dlp-ratios
median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else printf "%.3f\n", (a[NR/2]+a[NR/2+1])/2}'; }

mkdir -p "$TMP/www"
head -c 256 /dev/zero | tr '\0' 'x' >"$TMP/www/index.html"
head -c $((BIG_MIB << 20)) /dev/urandom >"$TMP/www/big"
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=$NAME" \
    -addext "subjectAltName=DNS:$NAME,DNS:$RELAYED,IP:127.0.0.1" \
    -addext "basicConstraints=critical,CA:FALSE" \
    -keyout "$TMP/key.pem" -out "$TMP/cert.pem" 2>/dev/null
NGINX_CONNECTIONS=1024 start_nginx "$HTTP_PORT" "$HTTPS_PORT"

# The upload bodies, and a TLS origin that reads each body (Content-Length) to its end,
# drops it, and answers.
python3 - "$TMP" "$BIG_MIB" <<'PY'
import base64, os, re, sys
DETECTORS = [  # the built-in detectors' regexes (crates/policy/src/dlp.rs)
    r"(?:AKIA|ASIA)[A-Z0-9]{16}", r"gh[pousr]_[A-Za-z0-9]{36}|github_pat_[A-Za-z0-9_]{82}",
    r"-----BEGIN (?:RSA |EC |DSA |OPENSSH |ENCRYPTED |PGP )?PRIVATE KEY(?: BLOCK)?-----",
    r"xox[abeoprs]-[0-9]{6,20}-[0-9A-Za-z-]{8,100}", r"AIza[0-9A-Za-z_-]{35}",
    r"[sr]k_live_[0-9A-Za-z]{24,99}",
    r"sk-(?:(?:proj|svcacct|admin)-[A-Za-z0-9_-]{40,200}|[A-Za-z0-9]{48})",
    r"eyJ[A-Za-z0-9_-]{8,200}\.eyJ[A-Za-z0-9_-]{8}",
]
tmp, mib = sys.argv[1], int(sys.argv[2])
unit = (b'{"id": 12345, "title": "Fix the flaky test in the parser", "body": "When the '
        b'input ends with a newline the parser returns an error.", "labels": ["bug"]}, ')
with open(f"{tmp}/upload-json", "wb") as f:
    f.write((unit * ((mib << 20) // len(unit) + 1))[: mib << 20])
# Random base64 of this size holds a google_api_key's shape by chance (AIza and 35 more)
# about once: each chance match of a detector is broken, so both bodies go through.
b64 = bytearray(base64.b64encode(os.urandom(mib * 786432))[: mib << 20])
for shape in DETECTORS:
    for m in re.finditer(shape.encode(), bytes(b64)):
        b64[m.start() + 1] = ord(".")
with open(f"{tmp}/upload-b64", "wb") as f:
    f.write(b64)
PY
cat >"$TMP/sink.py" <<'PY'
import socket, ssl, sys, threading
tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
tls.load_cert_chain(sys.argv[2], sys.argv[3])
srv = socket.create_server(("127.0.0.1", int(sys.argv[1])))
def serve(c):
    try:
        c = tls.wrap_socket(c, server_side=True)
    except (ssl.SSLError, OSError):
        return c.close()
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
python3 "$TMP/sink.py" "$SINK_PORT" "$TMP/cert.pem" "$TMP/key.pem" 2>>"$TMP/sink.log" &
PIDS+=($!)
wait_port "$SINK_PORT"

"$PROXY_BIN" ca init "$TMP/ca" >/dev/null
ALLOWED="[\"$PLAIN:$HTTP_PORT\", { host = \"$NAME:$HTTPS_PORT\", inspect = true }, \"$RELAYED:$HTTPS_PORT\", { host = \"$NAME:$SINK_PORT\", inspect = true }]"
cat >"$TMP/org.toml" <<EOF
version = 1
allowed_domains = $ALLOWED
allowed_cidrs = ["127.0.0.0/8"]
default_network_policy = { type = "allowlist", allowed_domains = ${ALLOWED//, inspect = true/} }
EOF
EGRESS_PROXY_LOG=warn "$PROXY_BIN" serve --org "$TMP/org.toml" --listen "127.0.0.1:$PROXY_PORT" \
    --admin-listen "127.0.0.1:$ADMIN_PORT" --ca "$TMP/ca" --upstream-ca "$TMP/cert.pem" \
    --resolve "$NAME=127.0.0.1" --resolve "$PLAIN=127.0.0.1" --resolve "$RELAYED=127.0.0.1" \
    --dns-server 127.0.0.1:9 --audit-log "$TMP/audit.jsonl" 2>>"$TMP/proxy.log" &
PIDS+=($!)
wait_port "$PROXY_PORT"
wait_port "$ADMIN_PORT"

# A session with N canaries: "ID TOKEN".
session() { # n
    python3 - "$ADMIN_PORT" "$1" "$PLAIN:$HTTP_PORT" "$NAME:$HTTPS_PORT" "$RELAYED:$HTTPS_PORT" \
        "$NAME:$SINK_PORT" <<'PY'
import http.client, json, sys
port, n, names = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
body = {"network_policy": {"type": "allowlist", "allowed_domains": names}}
if n:
    body["canaries"] = [{"kind": "generic"}] * n
    body["network_policy"]["dlp"] = {"detectors": [
        "aws_access_key_id", "github_token", "private_key", "slack_token",
        "google_api_key", "stripe_secret_key", "openai_api_key", "jwt"]}
conn = http.client.HTTPConnection("127.0.0.1", port)
conn.request("POST", "/v1/sessions", json.dumps(body), {"Content-Type": "application/json"})
answer = json.loads(conn.getresponse().read())
print(answer["id"], answer["token"])
PY
}
declare -A AUTH USER
for s in without with; do
    n=0
    [ "$s" = with ] && n=$CANARIES
    read -r id token < <(session "$n")
    USER[$s]="$id:$token"
    AUTH[$s]="Basic $(printf '%s' "$id:$token" | base64 -w0)"
done

client_args() { # config
    case $1 in
    plain) echo "$PROXY_PORT plain $PLAIN:$HTTP_PORT" ;;
    inspect) echo "$PROXY_PORT tls $NAME:$HTTPS_PORT $NAME $TMP/ca/ca.pem" ;;
    esac
}

# One run of CONNS clients for a session: prints requests per second.
drive() { # config session
    local i pids=() total=0 n secs
    for i in $(seq "$CONNS"); do
        # shellcheck disable=SC2046 # client_args is split into words on purpose
        PROXY_AUTH=${AUTH[$2]} timeout $((DURATION + 30)) python3 "$CLIENT" rate $(client_args "$1") \
            "$DURATION" "$MAX" >"$TMP/out.$i" &
        pids+=($!)
    done
    for i in "${pids[@]}"; do wait "$i" || { echo "dlp_ratios.sh: a client failed" >&2; exit 2; }; done
    for i in $(seq "$CONNS"); do
        read -r n secs <"$TMP/out.$i"
        total=$(echo "$total + $n / $secs" | bc -l)
    done
    echo "$total"
}

download() { # session -> bytes per second
    curl -sf -o /dev/null -w '%{speed_download}\n' --proxy "http://127.0.0.1:$PROXY_PORT" \
        --proxy-user "${USER[$1]}" --cacert "$TMP/cert.pem" "https://$RELAYED:$HTTPS_PORT/big"
}

upload() { # body session -> bytes per second
    curl -sf -o /dev/null -w '%{speed_upload}\n' --proxy "http://127.0.0.1:$PROXY_PORT" \
        --proxy-user "${USER[$2]}" --cacert "$TMP/ca/ca.pem" -H 'Expect:' \
        --data-binary @"$TMP/$1" "https://$NAME:$SINK_PORT/upload"
}

measure() { # config session
    case $1 in
    plain | inspect) drive "$1" "$2" ;;
    download) download "$2" ;;
    upload-*) upload "$1" "$2" ;;
    esac
}

for config in $CONFIGS; do
    for s in without with; do : >"$TMP/$config.$s"; done
    measure "$config" without >/dev/null # warm up
done
for _ in $(seq "$ROUNDS"); do
    for config in $CONFIGS; do
        # The first download after the keep-alive runs comes at about half speed (the
        # connections they left behind): one more, not measured, before each pair.
        [ "$config" = download ] && measure download without >/dev/null
        for s in without with; do measure "$config" "$s" >>"$TMP/$config.$s"; done
    done
done

echo "dlp_ratios.sh: $ROUNDS rounds, $CONNS clients x ${DURATION}s, $CANARIES canaries and every detector in one session, none in the other"
for config in $CONFIGS; do
    without=$(median <"$TMP/$config.without")
    with=$(median <"$TMP/$config.with")
    unit="req/s"
    case $config in download | upload-*) unit="B/s" ;; esac
    printf '%-11s without %14.1f %s   with %14.1f %s   ratio %.3f\n' "$config" "$without" "$unit" "$with" "$unit" \
        "$(echo "$with / $without" | bc -l)"
done
