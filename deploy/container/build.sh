#!/usr/bin/env bash
# Build the egress-proxy image (Containerfile: FROM scratch, one static binary, uid 65532)
# with buildah, then run it with podman and check that it serves: a request through it
# to an origin on loopback is allowed, one to another name is refused (403), the audit
# record is on the container's standard output, /healthz answers, and the image has no
# shell. Run by hand, not by CI (a static release build takes minutes):
#
#   deploy/container/build.sh            # needs buildah, podman, runc, curl, python3
#                                        # (apt-get install buildah podman runc)
#
# Knobs (environment): IMAGE=localhost/egress-proxy:0.1.0 BASE_PORT=21400 (ports
# BASE_PORT to BASE_PORT + 2) PODMAN_FLAGS (storage and runtime options for podman and
# buildah; the default suits a machine that is itself a container) RUN_FLAGS (extra
# `podman run` options). Every process and container it starts is stopped on exit.

set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
IMAGE=${IMAGE:-localhost/egress-proxy:0.1.0}
BASE_PORT=${BASE_PORT:-21400}
ORIGIN_PORT=$BASE_PORT
PROXY_PORT=$((BASE_PORT + 1))
ADMIN_PORT=$((BASE_PORT + 2))
# vfs storage needs no overlay mounts; runc with cgroupfs runs where crun refuses hybrid
# cgroups; the explicit ulimits stay under what a process without CAP_SYS_RESOURCE may set.
PODMAN_FLAGS=${PODMAN_FLAGS:---storage-driver vfs --runtime runc --cgroup-manager cgroupfs}
RUN_FLAGS=${RUN_FLAGS:---ulimit nofile=4096:4096 --ulimit nproc=4096:4096}
TARGET=x86_64-unknown-linux-gnu

for tool in buildah podman runc curl python3 cargo; do
    command -v "$tool" >/dev/null || { echo "build.sh: $tool is needed" >&2; exit 2; }
done

TMP=$(mktemp -d /tmp/egress-image.XXXXXX)
chmod 755 "$TMP"
PIDS=()
CONTAINER=
cleanup() {
    [ -n "$CONTAINER" ] && podman $PODMAN_FLAGS rm -f "$CONTAINER" >/dev/null 2>&1 || true
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    rm -rf "$TMP"
}
trap cleanup EXIT

echo "== static binary"
RUSTFLAGS="-C target-feature=+crt-static" cargo build --release --locked \
    --manifest-path "$ROOT/Cargo.toml" --target "$TARGET" --target-dir "$ROOT/target/static"
BIN="$ROOT/target/static/$TARGET/release/egress-proxy"
file "$BIN" | grep -q 'static' || { echo "build.sh: $BIN is not statically linked" >&2; exit 1; }
mkdir "$TMP/context"
cp "$BIN" "$TMP/context/egress-proxy"

echo "== image $IMAGE"
buildah $PODMAN_FLAGS bud --quiet -f "$ROOT/deploy/container/Containerfile" -t "$IMAGE" "$TMP/context"
user=$(podman $PODMAN_FLAGS image inspect --format '{{.Config.User}}' "$IMAGE")
[ "$user" = "65532:65532" ] || { echo "build.sh: the image's user is '$user'" >&2; exit 1; }

echo "== run"
mkdir "$TMP/www" "$TMP/policy"
echo ok >"$TMP/www/index.html"
python3 -m http.server --bind 127.0.0.1 --directory "$TMP/www" "$ORIGIN_PORT" >/dev/null 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do
    curl -s -o /dev/null "http://127.0.0.1:$ORIGIN_PORT/" && break
    sleep 0.1
done
cat >"$TMP/policy/org.toml" <<TOML
version = 1
allowed_domains = ["allowed.test:$ORIGIN_PORT"]
allowed_cidrs = ["127.0.0.0/8"]
default_network_policy = { type = "allowlist", allowed_domains = ["allowed.test:$ORIGIN_PORT"] }
TOML
chmod -R a+rX "$TMP/policy"
# Host networking: the origin and the checks are on the machine's loopback. Names are
# pinned (--resolve) and --dns-server is a closed port: nothing is resolved outside.
CONTAINER=$(podman $PODMAN_FLAGS run -d $RUN_FLAGS --network host \
    -v "$TMP/policy:/etc/egress-proxy:ro" "$IMAGE" \
    serve --org /etc/egress-proxy/org.toml --listen "127.0.0.1:$PROXY_PORT" \
    --admin-listen "127.0.0.1:$ADMIN_PORT" --resolve allowed.test=127.0.0.1 \
    --resolve denied.test=127.0.0.1 --dns-server 127.0.0.1:9 --audit-log - \
    --max-connections 1024)
for _ in $(seq 100); do
    curl -s -o /dev/null "http://127.0.0.1:$ADMIN_PORT/healthz" && break
    sleep 0.1
done
check() { # what expected actual
    if [ "$2" != "$3" ]; then
        echo "build.sh: $1: expected $2, got $3" >&2
        podman $PODMAN_FLAGS logs "$CONTAINER" >&2 || true
        exit 1
    fi
    echo "ok: $1 ($3)"
}
check "/healthz" 200 "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$ADMIN_PORT/healthz")"
check "allowed request" 200 "$(curl -s -o /dev/null -w '%{http_code}' -x "127.0.0.1:$PROXY_PORT" "http://allowed.test:$ORIGIN_PORT/")"
check "denied request" 403 "$(curl -s -o /dev/null -w '%{http_code}' -x "127.0.0.1:$PROXY_PORT" "http://denied.test:$ORIGIN_PORT/")"
sleep 1.5
records=$(podman $PODMAN_FLAGS logs "$CONTAINER" 2>/dev/null | grep -c '"event":"egress.denied"' || true)
check "audit record on standard output" 1 "$records"
uid=$(podman $PODMAN_FLAGS top "$CONTAINER" huser 2>/dev/null | tail -n 1 | tr -d ' ')
check "process uid" 65532 "$uid"
if podman $PODMAN_FLAGS run --rm $RUN_FLAGS --network none --entrypoint /bin/sh "$IMAGE" -c true >/dev/null 2>&1; then
    echo "build.sh: the image has a shell" >&2
    exit 1
fi
echo "ok: no shell in the image"
echo "== $IMAGE built and serving"
