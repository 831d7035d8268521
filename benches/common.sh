# Shared by the hand-run bench scripts (sourced, not run): a temp dir, the processes a
# script starts (append each PID to PIDS) killed on exit, and waiting for a port.
#
#   source "$(dirname "$0")/common.sh"; bench_tmp NAME
#
# Messages name the script that sourced this file.

BENCH=$(basename "$0")
PIDS=()

# Make TMP, a fresh temp dir removed on exit with every process in PIDS.
bench_tmp() { # name
    TMP=$(mktemp -d "/tmp/egress-$1.XXXXXX")
    chmod 755 "$TMP"
    trap bench_cleanup EXIT
    trap 'exit 130' INT TERM
}

bench_cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$TMP"
}

# Wait until something listens on 127.0.0.1:$1, for at most $2 seconds (default 10);
# else show the tail of the logs in TMP and exit 2.
wait_port() { # port [seconds]
    local i
    for i in $(seq $((${2:-10} * 10))); do
        ss -Htln "sport = :$1" | grep -q . && return 0
        sleep 0.1
    done
    echo "$BENCH: nothing listens on $1" >&2
    tail -n 5 "$TMP"/*.log "$TMP"/*/*.log >&2 2>/dev/null || true
    exit 2
}

# Start nginx (one worker, keep-alive kept) serving $TMP/www on 127.0.0.1:HTTP_PORT and,
# when given, on HTTPS_PORT with $TMP/cert.pem and $TMP/key.pem; wait for both ports.
# Knobs: NGINX_CONNECTIONS (4096), NGINX_KEEPALIVE (600s), NGINX_TLS_EXTRA (more
# directives for the HTTPS server), NGINX_LISTEN_EXTRA (more parameters of its `listen`,
# such as `http2` for nginx before 1.25.1).
start_nginx() { # http_port [https_port]
    local http=$1 https=${2:-} conns=${NGINX_CONNECTIONS:-4096} tls=""
    if [ -n "$https" ]; then
        tls="server {
        listen 127.0.0.1:$https ssl ${NGINX_LISTEN_EXTRA:-};
        ssl_certificate $TMP/cert.pem;
        ssl_certificate_key $TMP/key.pem;
        ${NGINX_TLS_EXTRA:-}
        root $TMP/www;
    }"
    fi
    mkdir -p "$TMP/nginx"
    cat >"$TMP/nginx.conf" <<CONF
daemon off;
master_process off;
worker_processes 1;
worker_rlimit_nofile $((conns + 64));
pid $TMP/nginx.pid;
error_log $TMP/nginx/error.log warn;
events { worker_connections $conns; }
http {
    access_log off;
    sendfile on;
    keepalive_requests 1000000;
    keepalive_timeout ${NGINX_KEEPALIVE:-600s};
    client_body_temp_path $TMP/nginx/body;
    proxy_temp_path $TMP/nginx/proxy;
    fastcgi_temp_path $TMP/nginx/fastcgi;
    uwsgi_temp_path $TMP/nginx/uwsgi;
    scgi_temp_path $TMP/nginx/scgi;
    default_type application/octet-stream;
    server { listen 127.0.0.1:$http; root $TMP/www; }
    $tls
}
CONF
    nginx -p "$TMP/nginx" -e "$TMP/nginx/error.log" -c "$TMP/nginx.conf" &
    PIDS+=($!)
    wait_port "$http"
    if [ -n "$https" ]; then wait_port "$https"; fi
}
