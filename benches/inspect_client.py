#!/usr/bin/env python3
"""The client of benches/inspect.sh: keep-alive GETs through a proxy, plain or inside a
CONNECT + TLS tunnel, and the time to a tunnel's first answer.

  rate PROXY_PORT plain TARGET SECONDS MAX
      absolute-form GETs for http://TARGET/ over one connection to the proxy
  rate PROXY_PORT tls CONNECT_TARGET NAME CA SECONDS MAX
      CONNECT CONNECT_TARGET, TLS for NAME trusting only CA, then GETs for / inside
  first PROXY_PORT [IP:]PORT CA PROXY_PID NAME...
      for each NAME (each new to the proxy): one fresh tunnel to NAME:PORT and its first
      GET, then one fresh tunnel to a name whose leaf is already minted; prints, for
      each kind, the median and p90 time to the first answer in ms, and the median CPU
      time the proxy (PROXY_PID, all its threads) spent meanwhile, in us. With IP:PORT
      the CONNECT names IP:PORT and NAME is in the TLS SNI only (for a proxy that would
      resolve NAME itself)

`rate` stops after SECONDS or MAX requests, whichever comes first, and prints
"REQUESTS SECONDS" (time counted from the first request, after the tunnel is set up).
Every answer must be a 200 with a Content-Length. With PROXY_AUTH in the environment,
every request to the proxy (a CONNECT, a plain GET) carries `Proxy-Authorization:
PROXY_AUTH` (a session's, benches/dlp_ratios.sh). Loopback only: the proxy is
127.0.0.1:PROXY_PORT and names are pinned in the proxy (--resolve), never resolved here.
"""

import os
import socket
import ssl
import statistics
import sys
import time

TIMEOUT = 30
AUTH = (
    b"Proxy-Authorization: %s\r\n" % os.environ["PROXY_AUTH"].encode()
    if os.environ.get("PROXY_AUTH")
    else b""
)


def read_answer(sock, buf):
    """Read one answer from sock (buf holds bytes already read); return what is left."""
    while True:
        end = buf.find(b"\r\n\r\n")
        if end >= 0:
            head = buf[:end]
            length = None
            for line in head.split(b"\r\n")[1:]:
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            if not head.startswith(b"HTTP/1.1 200") or length is None:
                raise ConnectionError("unexpected answer: %r" % head[:300])
            if len(buf) >= end + 4 + length:
                return buf[end + 4 + length :]
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("the proxy closed the connection")
        buf += data


def tunnel(port, connect_target, name, ctx):
    """A TLS connection for `name` inside a CONNECT to `connect_target` via the proxy."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    target = connect_target.encode()
    sock.sendall(b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s\r\n" % (target, target, AUTH))
    head = b""
    while b"\r\n\r\n" not in head:
        data = sock.recv(4096)
        if not data:
            raise ConnectionError("closed before the CONNECT answer")
        head += data
    if not head.startswith(b"HTTP/1.1 200"):
        raise ConnectionError("CONNECT refused: %r" % head[:300])
    return ctx.wrap_socket(sock, server_hostname=name)


def context(ca):
    ctx = ssl.create_default_context(cafile=ca)
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


def drive(sock, request, seconds, limit):
    """Send `request` and read its answer, again and again; return (count, elapsed)."""
    buf = b""
    start = time.monotonic()
    deadline = start + seconds
    n = 0
    while n < limit:
        sock.sendall(request)
        buf = read_answer(sock, buf)
        n += 1
        if n % 64 == 0 and time.monotonic() >= deadline:
            break
    return n, time.monotonic() - start


def rate(args):
    port, kind = int(args[0]), args[1]
    if kind == "plain":
        target, seconds, limit = args[2], float(args[3]), int(args[4])
        sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        request = b"GET http://%s/ HTTP/1.1\r\nHost: %s\r\n%s\r\n" % (
            target.encode(),
            target.encode(),
            AUTH,
        )
    elif kind == "tls":
        connect_target, name, ca = args[2], args[3], args[4]
        seconds, limit = float(args[5]), int(args[6])
        sock = tunnel(port, connect_target, name, context(ca))
        host = "%s:%s" % (name, connect_target.rsplit(":", 1)[1])
        request = b"GET / HTTP/1.1\r\nHost: %s\r\n\r\n" % host.encode()
    else:
        raise SystemExit("rate: kind is plain or tls")
    n, elapsed = drive(sock, request, seconds, limit)
    sock.close()
    print(n, "%.6f" % elapsed)


def first_answer(port, target_port, name, ctx, connect_ip=None):
    """Seconds from opening a connection to the proxy to the end of the first answer."""
    start = time.monotonic()
    sock = tunnel(port, "%s:%d" % (connect_ip or name, target_port), name, ctx)
    sock.sendall(b"GET / HTTP/1.1\r\nHost: %s:%d\r\n\r\n" % (name.encode(), target_port))
    read_answer(sock, b"")
    took = time.monotonic() - start
    sock.close()
    return took


def cpu_ns(pid):
    """CPU time all threads of `pid` have run, in ns (/proc/PID/task/*/schedstat)."""
    total = 0
    for task in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, task)) as f:
                total += int(f.read().split()[0])
        except FileNotFoundError:
            pass  # a thread that ended since the listing
    return total


def measured(pid, port, target, name, ctx):
    """(seconds to the first answer, proxy CPU ns meanwhile) for one fresh tunnel."""
    before = cpu_ns(pid)
    took = first_answer(port, target[1], name, ctx, target[0])
    return took, cpu_ns(pid) - before


def first(args):
    port, ctx, pid, names = int(args[0]), context(args[2]), int(args[3]), args[4:]
    ip, _, target_port = args[1].rpartition(":")
    target = (ip or None, int(target_port))
    if len(names) < 2:
        raise SystemExit("first: give at least two names")
    # The first name warms the proxy (and the upstream TLS session cache) and is the
    # one whose leaf is then known.
    known = names[0]
    first_answer(port, target[1], known, ctx, target[0])
    new, again = [], []
    for name in names[1:]:
        new.append(measured(pid, port, target, name, ctx))
        again.append(measured(pid, port, target, known, ctx))

    def show(label, samples):
        xs = sorted(took * 1000 for took, _ in samples)
        p90 = xs[min(len(xs) - 1, int(len(xs) * 0.9))]
        cpu = statistics.median(ns / 1000 for _, ns in samples)
        print("%s %.3f %.3f %.0f" % (label, statistics.median(xs), p90, cpu))

    show("new", new)
    show("minted", again)


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in ("rate", "first"):
        raise SystemExit(__doc__)
    (rate if sys.argv[1] == "rate" else first)(sys.argv[2:])


if __name__ == "__main__":
    main()
