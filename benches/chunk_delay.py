#!/usr/bin/env python3
"""How long a tunnel holds back a stream's chunks (by hand, not in CI).

Usage: chunk_delay.py PROXY_PORT ORIGIN_PORT [GAP_SECONDS] [CHUNK_KIB] [NAME]

Starts an origin on 127.0.0.1:ORIGIN_PORT, opens a CONNECT tunnel to NAME:ORIGIN_PORT
through the proxy on 127.0.0.1:PROXY_PORT (the proxy must allow that name and pin it,
e.g. `--resolve allowed.test=127.0.0.1`, with `[tunnels] require_tls = false`), sends
4 MiB in one go (a bulk transfer), then 300 chunks of CHUNK_KIB (default 64) every
GAP_SECONDS (default 0.0005), each stamped with the time it was sent, and prints how
long the chunks took to arrive. It measures what batched reading of bulk bytes costs
a stream that comes slower than a batch per wait.
"""
import socket
import struct
import sys
import threading
import time

PROXY, ORIGIN = int(sys.argv[1]), int(sys.argv[2])
GAP = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0005
CHUNK = (int(sys.argv[4]) if len(sys.argv) > 4 else 64) << 10
NAME = sys.argv[5] if len(sys.argv) > 5 else "allowed.test"
BULK, COUNT = 4 << 20, 300

listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", ORIGIN))
listener.listen(1)


def origin():
    conn, _ = listener.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn.sendall(b"x" * BULK)
    for _ in range(COUNT):
        conn.sendall(struct.pack("!d", time.monotonic()) + b"y" * (CHUNK - 8))
        time.sleep(GAP)
    conn.recv(1)
    conn.close()


threading.Thread(target=origin, daemon=True).start()
tunnel = socket.create_connection(("127.0.0.1", PROXY), timeout=30)
tunnel.sendall(f"CONNECT {NAME}:{ORIGIN} HTTP/1.1\r\nHost: {NAME}:{ORIGIN}\r\n\r\n".encode())
head = b""
while b"\r\n\r\n" not in head:
    byte = tunnel.recv(1)
    if not byte:
        sys.exit(f"chunk_delay.py: the proxy closed the tunnel: {head!r}")
    head += byte
if b" 200" not in head.split(b"\r\n")[0]:
    sys.exit(f"chunk_delay.py: CONNECT refused: {head.splitlines()[0]!r}")


def recv_exact(n):
    buf = bytearray()
    while len(buf) < n:
        data = tunnel.recv(n - len(buf))
        if not data:
            sys.exit("chunk_delay.py: the tunnel ended early")
        buf += data
    return bytes(buf)


recv_exact(BULK)
delays = []
for _ in range(COUNT):
    chunk = recv_exact(CHUNK)
    delays.append(time.monotonic() - struct.unpack("!d", chunk[:8])[0])
tunnel.sendall(b"z")
tunnel.close()
delays.sort()
ms = lambda q: delays[min(COUNT - 1, int(COUNT * q))] * 1e3
print(f"{CHUNK >> 10} KiB chunks every {GAP * 1e3:g} ms: delay median {ms(0.5):.2f} ms,"
      f" p90 {ms(0.9):.2f} ms, p99 {ms(0.99):.2f} ms, max {delays[-1] * 1e3:.2f} ms")
