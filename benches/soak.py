#!/usr/bin/env python3
"""The load generator of the soak (benches/soak.sh), Python 3 standard library only.

  soak.py origin PORT
      an upload origin: answers a PUT or POST once it has read the whole body (nginx's
      static server answers a POST before reading it, so it cannot show a client that
      leaves mid-body while upstream still waits for the rest), and a GET after 0.3 s.

  soak.py run --proxy-port P --admin-port A --token-file F --http-port H --https-port S
              --upload-port U --ca CERT --seconds N --expected OUT [--rate R] [--threads T]
      mixed traffic through the proxy until the deadline: every attempt it makes is
      written to OUT, one JSON line each, with the audit record the contract says it
      must leave (docs/reference/audit-log.md, with --audit-allowed) and the key that
      record is found by. Prints a tally by kind on standard error, and exits 1 if any
      answer was not the one the attempt was built to get. The kinds are the methods
      named in Generator.KINDS, plus `session`, `session_tunnel`, `auth_deleted` and
      `auth_wrong` (one thread, a session a second) and `silent` (one thread); each says
      what it does, and docs/development.md ("Soak") lists them.

  soak.py check --expected OUT --audit AUDIT_LOG
      matches the audit log against OUT and prints, by kind, the attempts, the records
      expected and found, and any missing or extra; exits 1 on any difference.

Every connection binds its own source address in 127.64.0.0/10 (loopback: the kernel
takes any 127/8 address), so the record's `client` names one connection; within it, a
plain-HTTP record is told apart by its `url`, unique per attempt. A record is found by
(client, event, method, url, session). Nothing leaves loopback, and no name is resolved
here: the proxy pins every name (--resolve).
"""

import argparse
import base64
import collections
import http.client
import http.server
import json
import os
import random
import socket
import socketserver
import ssl
import struct
import sys
import threading
import time

ALLOWED = "allowed.test"
OTHER = "other.test"  # in the organization's allowlist, outside the session's policy
DENIED = "denied.test"
TIMEOUT = 15.0


class Unexpected(Exception):
    """An answer other than the one the attempt was built to get."""


# --- the upload origin ------------------------------------------------------------------


class Upload(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 10  # an idle kept-open connection is closed, so the proxy's pool empties

    def do_PUT(self):
        left = int(self.headers.get("Content-Length", "0"))
        got = 0
        while left > 0:
            chunk = self.rfile.read(min(left, 65536))
            if not chunk:
                return  # the proxy gave up on this request: nothing to answer
            got += len(chunk)
            left -= len(chunk)
        body = b"%d\n" % got
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_PUT

    def do_GET(self):
        time.sleep(0.3)  # /slow: time for the client to leave before the answer
        self.send_response(200)
        self.send_header("Content-Length", "3")
        self.end_headers()
        self.wfile.write(b"ok\n")

    def log_message(self, *args):
        pass


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    request_queue_size = 1024

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError):  # the proxy gave up: fine
            super().handle_error(request, client_address)


def origin(port):
    Server(("127.0.0.1", port), Upload).serve_forever()


# --- the generator --------------------------------------------------------------------------


class Ledger:
    """Every attempt, with the records it must leave, appended to the expected file."""

    def __init__(self, path):
        self.out = open(path, "w")
        self.lock = threading.Lock()
        self.attempts = collections.Counter()
        self.unexpected = collections.Counter()
        self.examples = {}
        self.source = 0

    def next_source(self):
        # 127.64.0.1 onwards, skipping .0 and .255 in the last octet.
        with self.lock:
            while True:
                n = self.source % (1 << 22)
                self.source += 1
                if n & 255 not in (0, 255):
                    break
        return "127.%d.%d.%d" % (64 + (n >> 16), (n >> 8) & 255, n & 255)

    def attempt(self, kind, records):
        """One attempt of `kind` and the records it must leave (a list of keys)."""
        line = json.dumps({"kind": kind, "records": records})
        with self.lock:
            self.attempts[kind] += 1
            self.out.write(line + "\n")

    def oops(self, kind, what):
        with self.lock:
            self.unexpected[kind] += 1
            self.examples.setdefault(kind, what)

    def close(self):
        self.out.close()


def key(client, event, method, url=None, session=None):
    return {"client": client, "event": event, "method": method, "url": url, "session": session}


class Conn:
    """A client connection to the proxy, from its own source address."""

    def __init__(self, gen):
        self.gen = gen
        self.src = gen.ledger.next_source()
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(TIMEOUT)
        s.setsockopt(socket.IPPROTO_IP, 24, 1)  # IP_BIND_ADDRESS_NO_PORT: pick at connect
        s.bind((self.src, 0))
        s.connect(("127.0.0.1", gen.proxy_port))
        self.sock = s
        self.client = "%s:%d" % s.getsockname()
        self.buf = b""

    def send(self, data):
        self.sock.sendall(data)

    def fill(self):
        data = self.sock.recv(65536)
        if not data:
            raise Unexpected("the proxy closed the connection")
        self.buf += data

    def head(self):
        while b"\r\n\r\n" not in self.buf:
            self.fill()
        raw, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        return status, headers

    def body(self, headers, limit=None):
        """Read the body of a response; with `limit`, stop after that many bytes."""
        if headers.get("transfer-encoding", "").lower() == "chunked":
            out = b""
            while True:
                while b"\r\n" not in self.buf:
                    self.fill()
                size, self.buf = self.buf.split(b"\r\n", 1)
                n = int(size.split(b";")[0], 16)
                while len(self.buf) < n + 2:
                    self.fill()
                out += self.buf[:n]
                self.buf = self.buf[n + 2 :]
                if n == 0:
                    return out
        n = int(headers.get("content-length", "0"))
        if limit is not None:
            n = min(n, limit)
        while len(self.buf) < n:
            self.fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def response(self, method="GET"):
        status, headers = self.head()
        body = b"" if method == "HEAD" else self.body(headers)
        return status, headers, body

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def expect(status, want, headers=None, reason=None):
    if status != want:
        raise Unexpected("status %d, wanted %d" % (status, want))
    if reason is not None and headers.get("x-egress-denied") != reason:
        raise Unexpected("reason %r, wanted %r" % (headers.get("x-egress-denied"), reason))


def request(method, url, host, extra=b"", body=b""):
    head = "%s %s HTTP/1.1\r\nHost: %s\r\n" % (method, url, host)
    return head.encode() + extra + b"\r\n" + body


class Generator:
    def __init__(self, a):
        self.a = a
        self.proxy_port = a.proxy_port
        self.ledger = Ledger(a.expected)
        self.deadline = time.monotonic() + a.seconds
        self.serial = 0
        self.serial_lock = threading.Lock()
        self.token = open(a.token_file).read().strip()
        self.tls = ssl.create_default_context(cafile=a.ca)
        self.http = "%s:%d" % (ALLOWED, a.http_port)
        self.https = "%s:%d" % (ALLOWED, a.https_port)
        self.uploads = "%s:%d" % (ALLOWED, a.upload_port)
        self.other = "%s:%d" % (OTHER, a.http_port)

    def url(self, authority, kind, path="index.html"):
        with self.serial_lock:
            self.serial += 1
            n = self.serial
        return "http://%s/%s?soak=%s-%d" % (authority, path, kind, n)

    def running(self):
        return time.monotonic() < self.deadline

    # Each kind makes one connection and one or more attempts on it. The records are
    # written to the ledger as each attempt is made (its bytes sent), before its answer.

    def keepalive(self, c, kind="keepalive", creds=b"", session=None):
        """Five allowed GETs and one denied on one kept-alive connection."""
        for i in range(6):
            if i == 3:
                url = self.url(DENIED, kind)
                self.ledger.attempt(kind, [key(c.client, "egress.denied", "GET", url, session)])
                c.send(request("GET", url, DENIED, creds))
                status, headers, _ = c.response()
                expect(status, 403, headers, "not_in_org_allowlist")
                continue
            url = self.url(self.http, kind)
            self.ledger.attempt(kind, [key(c.client, "egress.allowed", "GET", url, session)])
            c.send(request("GET", url, self.http, creds))
            status, headers, _ = c.response()
            expect(status, 200)

    def close(self, c):
        """One allowed GET with `Connection: close`."""
        url = self.url(self.http, "close")
        self.ledger.attempt("close", [key(c.client, "egress.allowed", "GET", url)])
        c.send(request("GET", url, self.http, b"Connection: close\r\n"))
        status, headers, _ = c.response()
        expect(status, 200)
        if headers.get("connection", "").lower() != "close":
            raise Unexpected("no Connection: close in the answer")

    def tunnel(self, c, creds=b"", session=None, kind="connect_download"):
        """CONNECT, TLS to the origin through the tunnel, download the big file."""
        self.ledger.attempt(kind, [key(c.client, "egress.allowed", "CONNECT", None, session)])
        c.send(request("CONNECT", self.https, self.https, creds))
        status, headers = c.head()
        expect(status, 200)
        tls = self.tls.wrap_socket(c.sock, server_hostname=ALLOWED)
        c.sock = tls
        return tls

    def connect_download(self, c):
        tls = self.tunnel(c)
        tls.sendall(b"GET /big HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % self.https.encode())
        status, headers = c.head()
        expect(status, 200)
        if len(c.body(headers)) != self.a.big_bytes:
            raise Unexpected("short download")

    def deny_http(self, c):
        """Denied plain HTTP: not in the allowlist, and narrowed by X-Network-Policy."""
        url = self.url(DENIED, "deny_http")
        self.ledger.attempt("deny_http", [key(c.client, "egress.denied", "GET", url)])
        c.send(request("GET", url, DENIED))
        status, headers, _ = c.response()
        expect(status, 403, headers, "not_in_org_allowlist")
        url = self.url(self.http, "deny_http")
        narrow = json.dumps({"type": "allowlist", "allowed_domains": [self.other]})
        self.ledger.attempt("deny_http", [key(c.client, "egress.denied", "GET", url)])
        c.send(request("GET", url, self.http, b"X-Network-Policy: %s\r\n" % narrow.encode()))
        status, headers, _ = c.response()
        expect(status, 403, headers, "not_in_request_policy")

    def deny_connect(self, c):
        """A CONNECT to a name outside the allowlist."""
        self.ledger.attempt("deny_connect", [key(c.client, "egress.denied", "CONNECT")])
        c.send(request("CONNECT", DENIED + ":443", DENIED + ":443"))
        status, headers, _ = c.response()
        expect(status, 403, headers, "not_in_org_allowlist")

    def deny_port(self, c):
        """A CONNECT to an allowed name on a port it is not allowed on."""
        self.ledger.attempt("deny_port", [key(c.client, "egress.denied", "CONNECT")])
        target = ALLOWED + ":22"
        c.send(request("CONNECT", target, target))
        status, headers, _ = c.response()
        expect(status, 403, headers, "port_not_allowed")

    def malformed_first(self, c):
        """A first head that is no HTTP: refused (400) before any request is read."""
        self.ledger.attempt("malformed_first", [key(c.client, "egress.denied", "")])
        c.send(b"\x16\x03\x01 this is not http\r\n\r\n")
        status, headers, _ = c.response()
        expect(status, 400, headers, "invalid_request")

    def too_large(self, c):
        """A first head over --max-header-bytes: 431."""
        self.ledger.attempt("too_large", [key(c.client, "egress.denied", "")])
        c.send(request("GET", self.url(self.http, "too_large"), self.http,
                       b"X-Pad: %s\r\n" % (b"p" * (self.a.max_header_bytes + 1024))))
        status, headers, _ = c.response()
        expect(status, 431, headers, "invalid_request")

    def malformed_keepalive(self, c):
        """A good GET, then a head hyper cannot parse or a head too large on the same
        connection (hyper's own bare 400 or 431: only the record tells it apart)."""
        url = self.url(self.http, "malformed_keepalive")
        self.ledger.attempt("malformed_keepalive", [key(c.client, "egress.allowed", "GET", url)])
        c.send(request("GET", url, self.http))
        status, headers, _ = c.response()
        expect(status, 200)
        self.ledger.attempt("malformed_keepalive", [key(c.client, "egress.denied", "")])
        if random.random() < 0.5:
            c.send(b"GET http://%s/ HTTP/1.1\r\nBad Header\r\n\r\n" % self.http.encode())
            want = 400
        else:  # a head too large: well over the limit, as hyper's own check is loose
            pad = b"X-Pad: %s\r\n" % (b"p" * (4 * self.a.max_header_bytes))
            c.send(request("GET", self.url(self.http, "malformed_keepalive"), self.http, pad))
            want = 431
        status, headers = c.head()
        expect(status, want)

    def relative(self, c):
        """An origin-form request (not a proxy request): 400 invalid_request, judged."""
        self.ledger.attempt("relative", [key(c.client, "egress.denied", "GET", "/relative")])
        c.send(request("GET", "/relative", self.http))
        status, headers, _ = c.response()
        expect(status, 400, headers, "invalid_request")

    def upload(self, c):
        """A whole PUT to the upload origin."""
        url = self.url(self.uploads, "upload", "up")
        body = os.urandom(64 * 1024)
        self.ledger.attempt("upload", [key(c.client, "egress.allowed", "PUT", url)])
        c.send(request("PUT", url, self.uploads, b"Content-Length: %d\r\n" % len(body), body))
        status, headers, got = c.response()
        expect(status, 200)
        if got != b"%d\n" % len(body):
            raise Unexpected("upload origin read %r" % got)

    def _midbody(self, c, kind, authority, event, path):
        url = self.url(authority, kind, path)
        self.ledger.attempt(kind, [key(c.client, event, "PUT", url)])
        c.send(request("PUT", url, authority, b"Content-Length: 1048576\r\n", b"x" * 4096))
        time.sleep(0.05)
        if random.random() < 0.5:  # half leave with a reset, half with a FIN
            c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    def midbody_allowed(self, c):
        """An allowed PUT whose client leaves (reset) mid-body, while upstream waits for
        the rest of it."""
        self._midbody(c, "midbody_allowed", self.uploads, "egress.allowed", "up")

    def midbody_denied(self, c):
        """A denied PUT whose client leaves mid-body."""
        self._midbody(c, "midbody_denied", DENIED, "egress.denied", "up")

    def midresponse(self, c):
        """An allowed GET of the big file whose client leaves after 64 KiB."""
        url = self.url(self.http, "midresponse", "big")
        self.ledger.attempt("midresponse", [key(c.client, "egress.allowed", "GET", url)])
        c.send(request("GET", url, self.http))
        status, headers = c.head()
        expect(status, 200)
        c.body(headers, limit=65536)

    def gone_before_answer(self, c):
        """An allowed GET whose client leaves before upstream answers (the origin's /slow
        answers after 0.3 s)."""
        url = self.url(self.uploads, "gone_before_answer", "slow")
        self.ledger.attempt("gone_before_answer", [key(c.client, "egress.allowed", "GET", url)])
        c.send(request("GET", url, self.uploads))
        time.sleep(0.05)

    def sni_mismatch(self, c):
        """A tunnel whose ClientHello names another server: refused after its 200."""
        self.ledger.attempt("sni_mismatch", [key(c.client, "egress.denied", "CONNECT")])
        c.send(request("CONNECT", self.https, self.https))
        status, _ = c.head()
        expect(status, 200)
        tls = ssl.create_default_context()
        tls.check_hostname = False
        tls.verify_mode = ssl.CERT_NONE
        try:
            tls.wrap_socket(c.sock, server_hostname="elsewhere.test")
        except (ssl.SSLError, OSError):
            return  # the proxy closes the tunnel: that is the refusal
        raise Unexpected("a handshake with another server name went through")

    def connect_gone(self, c):
        """A tunnel whose client leaves right after the 200, having sent nothing."""
        self.ledger.attempt("connect_gone", [key(c.client, "egress.denied", "CONNECT")])
        c.send(request("CONNECT", self.https, self.https))
        status, _ = c.head()
        expect(status, 200)

    def connect_at_once(self, c):
        """An allowed CONNECT whose client leaves without reading the 200 (the proxy may
        already have connected upstream). One record, of whichever event. The client
        closes, it does not reset: a reset can reach the proxy before the request does,
        and the kernel then discards the request unread, so no attempt was made."""
        self.ledger.attempt("connect_at_once", [key(c.client, "*", "CONNECT")])
        c.send(request("CONNECT", self.https, self.https))

    KINDS = [  # (kind, weight)
        ("keepalive", 6), ("close", 6), ("connect_download", 2), ("deny_http", 3),
        ("deny_connect", 2), ("deny_port", 1), ("malformed_first", 2), ("too_large", 1),
        ("malformed_keepalive", 2), ("relative", 1), ("upload", 2), ("midbody_allowed", 2),
        ("midbody_denied", 1), ("midresponse", 2), ("gone_before_answer", 1),
        ("sni_mismatch", 1), ("connect_gone", 1), ("connect_at_once", 1),
    ]

    def one(self, kind):
        c = None
        try:
            c = Conn(self)
            getattr(self, kind)(c)
        except Unexpected as e:
            self.ledger.oops(kind, str(e))
        except Exception as e:  # a socket error, or a bug here: counted, never fatal
            self.ledger.oops(kind, "%s: %s" % (type(e).__name__, e))
        finally:
            if c:
                c.close()

    def worker(self, seed, period):
        rnd = random.Random(seed)
        kinds = [k for k, w in self.KINDS for _ in range(w) if k not in self.a.skip]
        at = time.monotonic()
        while self.running():
            self.one(rnd.choice(kinds))
            at += period
            pause = at - time.monotonic()
            if pause > 0:
                time.sleep(min(pause, max(0.0, self.deadline - time.monotonic())))
            else:
                at = time.monotonic()  # behind: do not try to catch up in a burst

    # --- sessions: created, used, deleted, in a loop of their own ------------------------

    def admin(self, method, path, body=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.a.admin_port, timeout=TIMEOUT)
        try:
            headers = {"Authorization": "Bearer " + self.token}
            data = None if body is None else json.dumps(body)
            if data is not None:
                headers["Content-Type"] = "application/json"
            conn.request(method, path, data, headers)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def session_round(self):
        kind = "session"
        policy = {"type": "allowlist", "allowed_domains": [self.http, self.https]}
        status, body = self.admin("POST", "/v1/sessions",
                                  {"network_policy": policy, "idle_timeout_seconds": 600})
        if status != 201:
            raise Unexpected("POST /v1/sessions: %d %r" % (status, body[:200]))
        s = json.loads(body)
        sid = s["id"]
        creds = b"Proxy-Authorization: Basic %s\r\n" % base64.b64encode(
            ("%s:%s" % (sid, s["token"])).encode())
        c = Conn(self)
        try:
            self.keepalive(c, kind, creds, sid)
            url = self.url(self.other, kind)  # in the org allowlist, not in the session's
            self.ledger.attempt(kind, [key(c.client, "egress.denied", "GET", url, sid)])
            c.send(request("GET", url, self.other, creds))
            status, headers, _ = c.response()
            expect(status, 403, headers, "not_in_request_policy")
        finally:
            c.close()
        # A tunnel of the session, open when the session is deleted: it must close, and
        # leave its record.
        t = Conn(self)
        try:
            tls = self.tunnel(t, creds, sid, "session_tunnel")
            tls.sendall(b"GET / HTTP/1.1\r\nHost: %s\r\n\r\n" % self.https.encode())
            status, headers = t.head()
            expect(status, 200)
            t.body(headers)
            status, _ = self.admin("DELETE", "/v1/sessions/" + sid)
            if status != 204:
                raise Unexpected("DELETE: %d" % status)
            tls.settimeout(5)
            try:
                if tls.recv(1) != b"":
                    raise Unexpected("bytes on a tunnel whose session was deleted")
            except socket.timeout:
                raise Unexpected("the tunnel stayed open after DELETE")
            except (ssl.SSLError, OSError):
                pass  # closed
        finally:
            t.close()
        # The deleted session's credentials, and made-up ones: 407.
        for label, cred in (("deleted", creds), ("wrong", b"Proxy-Authorization: Basic %s\r\n"
                                                 % base64.b64encode(b"nobody:nothing"))):
            c = Conn(self)
            try:
                url = self.url(self.http, "auth_" + label)
                self.ledger.attempt("auth_" + label, [key(c.client, "egress.denied", "GET", url)])
                c.send(request("GET", url, self.http, cred))
                status, headers, _ = c.response()
                expect(status, 407, headers, "auth_required")
            finally:
                c.close()

    def sessions(self, period):
        at = time.monotonic()
        while self.running():
            try:
                self.session_round()
            except Unexpected as e:
                self.ledger.oops("session", str(e))
            except Exception as e:
                self.ledger.oops("session", "%s: %s" % (type(e).__name__, e))
            at += period
            pause = at - time.monotonic()
            if pause > 0:
                time.sleep(min(pause, max(0.0, self.deadline - time.monotonic())))

    # --- silent connections: closed by the proxy, never recorded -----------------------

    def silent(self):
        wait = self.a.header_timeout + 3
        while self.running():
            c = None
            try:
                c = Conn(self)
                self.ledger.attempt("silent", [])
                t0 = time.monotonic()
                c.sock.settimeout(wait)
                try:
                    if c.sock.recv(1) != b"":
                        self.ledger.oops("silent", "bytes on a silent connection")
                except socket.timeout:
                    self.ledger.oops("silent", "not closed within %.0f s" % wait)
                except OSError:
                    pass
                if time.monotonic() - t0 < self.a.header_timeout - 0.5:
                    self.ledger.oops("silent", "closed before the header timeout")
            except OSError as e:
                self.ledger.oops("silent", str(e))
            finally:
                if c:
                    c.close()

    def run(self):
        threads = []
        period = self.a.threads / self.a.rate
        for i in range(self.a.threads):
            threads.append(threading.Thread(target=self.worker, args=(i, period)))
        threads.append(threading.Thread(target=self.sessions, args=(1.0,)))
        threads.append(threading.Thread(target=self.silent))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.ledger.close()
        total = sum(self.ledger.attempts.values())
        print("soak.py: %d attempts in %d kinds" % (total, len(self.ledger.attempts)), file=sys.stderr)
        for kind, n in sorted(self.ledger.attempts.items()):
            print("  %-20s %8d" % (kind, n), file=sys.stderr)
        bad = sum(self.ledger.unexpected.values())
        for kind, n in sorted(self.ledger.unexpected.items()):
            print("soak.py: %d unexpected answers in %s, e.g. %s" % (n, kind, self.ledger.examples[kind]),
                  file=sys.stderr)
        return 1 if bad else 0


# --- the check ------------------------------------------------------------------------------


def as_key(rec):
    return "\x1f".join(str(rec.get(f)) for f in ("client", "event", "method", "url", "session"))


def check(expected_path, audit_path):
    """Match every record to an attempt; print the tally by kind. 0 when all match."""
    table = {}  # key: [records wanted, records found, kind]
    attempts = collections.Counter()
    with open(expected_path) as f:
        for line in f:
            a = json.loads(line)
            attempts[a["kind"]] += 1
            for r in a["records"]:
                table.setdefault(as_key(r), [0, 0, a["kind"]])[0] += 1
    lines = 0
    strays = []
    with open(audit_path) as f:
        for line in f:
            lines += 1
            rec = json.loads(line)
            k = as_key(rec)
            if k not in table:  # an attempt that may leave either event
                k = as_key(dict(rec, event="*"))
            if k in table:
                table[k][1] += 1
            else:
                strays.append(line.strip())
    wanted, found, missing, extra = (collections.Counter() for _ in range(4))
    for want, got, kind in table.values():
        wanted[kind] += want
        found[kind] += got
        missing[kind] += max(0, want - got)
        extra[kind] += max(0, got - want)
    row = "%-20s %9s %9s %9s %9s %9s"
    print(row % ("kind", "attempts", "expected", "found", "missing", "extra"))
    for kind in sorted(attempts):
        print(row % (kind, attempts[kind], wanted[kind], found[kind], missing[kind], extra[kind]))
    expected_lines = sum(wanted.values())
    print("audit lines expected %d found %d (%d matching no attempt)" % (expected_lines, lines, len(strays)))
    for line in strays[:5]:
        print("  a record matching no attempt: %s" % line)
    for kind in sorted(set(missing) | set(extra)):
        if missing[kind] or extra[kind]:
            print("  %s: %d missing, %d extra" % (kind, missing[kind], extra[kind]))
    ok = lines == expected_lines and not +missing and not +extra and not strays
    return 0 if ok else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    o = sub.add_parser("origin")
    o.add_argument("port", type=int)
    r = sub.add_parser("run")
    for name in ("proxy-port", "admin-port", "http-port", "https-port", "upload-port", "big-bytes"):
        r.add_argument("--" + name, type=int, required=True)
    r.add_argument("--token-file", required=True)
    r.add_argument("--ca", required=True)
    r.add_argument("--expected", required=True)
    r.add_argument("--seconds", type=float, required=True)
    r.add_argument("--rate", type=float, default=200.0, help="connections a second, all threads")
    r.add_argument("--threads", type=int, default=8)
    r.add_argument("--header-timeout", type=float, default=3.0)
    r.add_argument("--max-header-bytes", type=int, default=65536)
    r.add_argument("--skip", default="", type=lambda v: set(v.replace(",", " ").split()),
                   help="kinds not to run (space- or comma-separated)")
    c = sub.add_parser("check")
    c.add_argument("--expected", required=True)
    c.add_argument("--audit", required=True)
    a = p.parse_args()
    if a.cmd == "origin":
        origin(a.port)
    elif a.cmd == "run":
        sys.exit(Generator(a).run())
    else:
        sys.exit(check(a.expected, a.audit))


if __name__ == "__main__":
    main()
