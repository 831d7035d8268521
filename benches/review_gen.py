#!/usr/bin/env python3
"""Inputs for benches/review.sh: two organization files of N entries each (NEW is OLD
with about 1% of its entries changed: removed, added, or a wildcard replacing names) and
an audit log of M lines over a population of destinations.

    review_gen.py org N OUT_OLD OUT_NEW
    review_gen.py log M OUT [SEED]

Deterministic (fixed seeds), so runs compare."""

import json
import random
import sys


def org_entries(n, rnd):
    out = []
    for i in range(n):
        kind = i % 10
        base = f"svc{i}.team{i % 997}.example{i % 53}.com"
        if kind == 0:
            out.append(f"*.{base}")
        elif kind == 1:
            out.append(f"{base}:8443")
        else:
            out.append(base)
    rnd.shuffle(out)
    return out


def write_org(path, entries, denied):
    with open(path, "w") as f:
        f.write('version = 1\nname = "bench"\nallowed_domains = [\n')
        for e in entries:
            f.write(f'  "{e}",\n')
        f.write("]\ndenied_domains = [\n")
        for d in denied:
            f.write(f'  "{d}",\n')
        f.write("]\n")


def org(n, old_path, new_path):
    rnd = random.Random(14)
    old = org_entries(n, rnd)
    denied = [f"secret{i}.team{i % 997}.example{i % 53}.com" for i in range(max(1, n // 100))]
    new = list(old)
    changes = max(3, n // 100)
    for c in range(changes):
        j = rnd.randrange(len(new))
        if c % 3 == 0:
            new.pop(j)  # narrowing
        elif c % 3 == 1:
            new.append(f"new{c}.added.example{c % 53}.com")  # widening
        else:
            new[j] = "*." + new[j].split(":")[0].lstrip("*.").split(".", 1)[1]  # wildcard
    rnd.shuffle(new)
    write_org(old_path, old, denied)
    write_org(new_path, new, denied[: len(denied) - 1])


def log(m, path, seed=1):
    rnd = random.Random(int(seed))
    hosts = [f"h{i}.team{i % 997}.example{i % 53}.com" for i in range(5000)]
    hosts += [f"evil{i}.test" for i in range(200)]
    events = ["egress.allowed"] * 6 + ["egress.would_deny"] * 2 + ["egress.denied"] * 2
    with open(path, "w") as f:
        for i in range(m):
            host = hosts[int(rnd.paretovariate(1.2)) % len(hosts)]
            event = events[i % len(events)]
            rec = {
                "ts": f"2026-11-29T10:{(i // 60000) % 60:02d}:{(i // 1000) % 60:02d}.{i % 1000:03d}Z",
                "event": event,
                "request_id": f"r{i}",
                "session": None,
                "client": f"10.0.{i % 256}.5:{40000 + i % 20000}",
                "method": "CONNECT",
                "host": host,
                "port": 443 if i % 7 else 80,
                "reason": None if event == "egress.allowed" else "not_in_request_policy",
                "rule": None,
                "policy_level": "request",
                "shared_hosting": False,
                "resolved_ip": None,
                "via": "proxy",
            }
            if event == "egress.allowed":
                rec["bytes_up"] = 100
                rec["bytes_down"] = 2000
            f.write(json.dumps(rec, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    if sys.argv[1] == "org":
        org(int(sys.argv[2]), sys.argv[3], sys.argv[4])
    else:
        log(int(sys.argv[2]), sys.argv[3], *(sys.argv[4:5]))
