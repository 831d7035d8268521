#!/usr/bin/env python3
"""Open N idle CONNECT tunnels through a proxy, for benches/load.sh's memory figure.

Each tunnel asks for one small response through itself (so the tunnel is past its
first-bytes judgement and fully open), then stays open and silent. Prints READY n once
they are all open, then holds them until stdin closes or HOLD seconds pass, whichever
comes first. Loopback only: the proxy is given as IP:PORT and the target name is pinned
in the proxy (--resolve), never resolved here.

usage: tunnels.py PROXY_IP:PROXY_PORT TARGET_HOST:TARGET_PORT N [HOLD_SECS]
"""

import resource
import select
import socket
import sys
import time


def read_until(sock, marker, limit=65536):
    data = b""
    while marker not in data:
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError("closed early: %r" % data[:200])
        data += chunk
        if len(data) > limit:
            raise ConnectionError("no end of head")
    return data


def open_tunnel(proxy, target):
    host = target.rsplit(":", 1)[0]
    s = socket.create_connection(proxy, timeout=10)
    s.sendall(b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target.encode(), target.encode()))
    head = read_until(s, b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise ConnectionError("CONNECT refused: %r" % head[:200])
    s.sendall(b"GET / HTTP/1.1\r\nHost: %s\r\n\r\n" % host.encode())
    resp = read_until(s, b"\r\n\r\n")
    head, _, body = resp.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    while len(body) < length:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("closed inside the body")
        body += chunk
    return s


def main():
    proxy_ip, proxy_port = sys.argv[1].rsplit(":", 1)
    target, n = sys.argv[2], int(sys.argv[3])
    hold = float(sys.argv[4]) if len(sys.argv) > 4 else 120.0
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    socks = []
    for _ in range(n):
        socks.append(open_tunnel((proxy_ip, int(proxy_port)), target))
    print("READY %d" % len(socks), flush=True)
    deadline = time.monotonic() + hold
    while time.monotonic() < deadline:
        ready, _, _ = select.select([sys.stdin], [], [], 0.5)
        if ready and not sys.stdin.readline():
            break
    for s in socks:
        s.close()


if __name__ == "__main__":
    main()
