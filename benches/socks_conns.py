#!/usr/bin/env python3
"""Tunnels per second through a proxy, for benches/socks.sh.

Each of PROCS processes opens, N times in a row, a tunnel through the proxy (an HTTP
CONNECT, or a SOCKS5 CONNECT by name or by IPv4 address), sends one small GET through it,
reads the whole answer and closes. Prints the tunnels per second of all processes
together. Loopback only: the proxy is IP:PORT, and a target name is pinned in the proxy
(--resolve); nothing is resolved here.

usage: socks_conns.py connect|socks5-name|socks5-ip PROXY_IP:PORT TARGET_HOST:PORT N PROCS
"""

import ipaddress
import multiprocessing
import socket
import struct
import sys
import time


def recv_exact(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed after %d of %d bytes" % (len(data), n))
        data += chunk
    return data


def read_head(sock):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError("closed in the head: %r" % data[:200])
        data += chunk
    return data


def open_connect(proxy, host, port):
    s = socket.create_connection(proxy, timeout=10)
    target = b"%s:%d" % (host.encode(), port)
    s.sendall(b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target))
    head = read_head(s)
    if not head.startswith(b"HTTP/1.1 200"):
        raise ConnectionError("CONNECT answered %r" % head[:100])
    return s


def open_socks(proxy, host, port, by_name):
    s = socket.create_connection(proxy, timeout=10)
    s.sendall(b"\x05\x01\x00")
    if recv_exact(s, 2) != b"\x05\x00":
        raise ConnectionError("SOCKS5 greeting refused")
    if by_name:
        addr = b"\x03" + bytes([len(host)]) + host.encode()
    else:
        addr = b"\x01" + ipaddress.IPv4Address(host).packed
    s.sendall(b"\x05\x01\x00" + addr + struct.pack(">H", port))
    reply = recv_exact(s, 4)
    if reply[1] != 0:
        raise ConnectionError("SOCKS5 reply %d" % reply[1])
    if reply[3] == 1:
        recv_exact(s, 6)
    elif reply[3] == 4:
        recv_exact(s, 18)
    else:
        recv_exact(s, recv_exact(s, 1)[0] + 2)
    return s


def one(kind, proxy, host, port):
    if kind == "connect":
        s = open_connect(proxy, host, port)
    else:
        s = open_socks(proxy, host, port, kind == "socks5-name")
    s.sendall(b"GET /small HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % host.encode())
    while s.recv(65536):
        pass
    s.close()


def worker(args):
    kind, proxy, host, port, n = args
    for _ in range(n):
        one(kind, proxy, host, port)
    return n


def main():
    kind = sys.argv[1]
    ip, p = sys.argv[2].rsplit(":", 1)
    host, port = sys.argv[3].rsplit(":", 1)
    n, procs = int(sys.argv[4]), int(sys.argv[5])
    args = (kind, (ip, int(p)), host, int(port), n)
    one(kind, args[1], host, int(port))  # warm up, and fail early
    with multiprocessing.Pool(procs) as pool:
        start = time.monotonic()
        done = sum(pool.map(worker, [args] * procs))
        elapsed = time.monotonic() - start
    print("%.0f" % (done / elapsed))


if __name__ == "__main__":
    main()
