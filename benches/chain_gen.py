"""Writes an audit log of N records with a valid chain (docs/reference/audit-log.md, "The
chain"), as the proxy's writer seals them: each line's body, then `"seq"` (from 1) and
`"prev"`, the SHA-256 (hex) of the line before it without its newline (64 zeros for the
first). The records look like the proxy's: denials and allowed requests and tunnels,
with the fields of section 7, about 400 bytes a line. For benches/verify.sh.

usage: chain_gen.py N OUT
"""
import hashlib, json, sys

n, out = int(sys.argv[1]), sys.argv[2]
prev = "0" * 64
with open(out, "wb") as f:
    for i in range(1, n + 1):
        allowed = i % 3 != 0
        rec = {
            "ts": "2026-12-06T00:%02d:%02d.%03dZ" % (i // 60000 % 60, i // 1000 % 60, i % 1000),
            "event": "egress.allowed" if allowed else "egress.denied",
            "request_id": "%032x" % (0x9f0c000000000000 * 2**64 + i),
            "session": None if i % 2 else "5be1%028x" % i,
            "client": "10.0.%d.%d:%d" % (i // 256 % 256, i % 256, 30000 + i % 30000),
            "method": "CONNECT" if i % 5 == 0 else "GET",
            "host": "api.github.com" if allowed else "evil-%d.test" % (i % 977),
            "port": 443 if i % 5 == 0 else 80,
            "url": None if i % 5 == 0 else "http://host.test/path/%d?q=%d" % (i, i * 7),
            "reason": None if allowed else "not_in_org_allowlist",
            "rule": "api.github.com" if allowed else None,
            "policy_level": "request" if allowed else "org",
            "shared_hosting": False,
            "resolved_ip": "140.82.112.6" if allowed else None,
            "via": "proxy",
        }
        if rec["url"] is None:
            del rec["url"]
        if allowed:
            rec["bytes_up"] = 1830 + i % 100
            rec["bytes_down"] = 45211 + i % 1000
        body = json.dumps(rec, separators=(",", ":"))[:-1]
        line = ('%s,"seq":%d,"prev":"%s"}' % (body, i, prev)).encode()
        prev = hashlib.sha256(line).hexdigest()
        f.write(line + b"\n")
