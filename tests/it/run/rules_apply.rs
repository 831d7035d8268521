//! `egress-proxy rules --apply` (docs/guides/confinement.md, "Sidecars"): the binary
//! applies the sidecar ruleset itself, over netlink. In a network namespace the test makes,
//! what it applied is what `nft -f` of the printed ruleset (the golden file) gives in a
//! second one, applying it twice changes nothing, and traffic inside the namespace (its
//! loopback and an address of its own, never another host) is redirected or dropped as
//! the rules say. Needs root, `nft` and `ip` (and `python3` for the traffic); without
//! them the tests print why and pass without checking anything.

use std::process::{Command, Output};
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::Value;

use crate::support::proxy::binary;

const SIDECAR: &str = include_str!("../../../src/run/golden/sidecar.nft");
/// The golden file's flags.
const FLAGS: [&str; 6] = [
    "--proxy-uid",
    "1337",
    "--transparent-port",
    "15001",
    "--dns-port",
    "15053",
];
/// An address of the namespace's own (on its `lo`) that is not loopback's: traffic to it
/// stays in the namespace but is not exempt as `127.0.0.0/8` is.
const OWN_ADDRESS: &str = "10.99.0.1";

fn skip_reason() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("network namespaces and nftables need root".into());
    }
    ["nft", "ip"]
        .into_iter()
        .find(|tool| super::which(tool).is_none())
        .map(|tool| format!("`{tool}` is not installed"))
}

/// A network namespace of the test's own (`ip netns add`), deleted when dropped, even
/// when the test fails.
struct Netns(String);

impl Netns {
    fn new() -> Netns {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "ep-rules-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let mut add = Command::new("ip");
        add.args(["netns", "add", &name]);
        ok(add);
        let ns = Netns(name);
        ok(ns.exec(&["ip", "link", "set", "lo", "up"]));
        ok(ns.exec(&[
            "ip",
            "addr",
            "add",
            &format!("{OWN_ADDRESS}/32"),
            "dev",
            "lo",
        ]));
        ns
    }

    /// `program args` inside the namespace.
    fn exec(&self, argv: &[&str]) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.0]).args(argv);
        cmd
    }

    /// `nft list ruleset` inside, normalised: trailing blanks and empty lines dropped.
    fn ruleset(&self) -> String {
        let out = ok(self.exec(&["nft", "list", "ruleset"]));
        let text = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = text
            .lines()
            .map(str::trim_end)
            .filter(|l| !l.is_empty())
            .collect();
        lines.join("\n")
    }

    fn apply(&self) -> Output {
        let binary = binary();
        let mut argv = vec![binary.as_str(), "rules"];
        argv.extend(FLAGS);
        argv.push("--apply");
        self.exec(&argv).output().expect("run rules --apply")
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn ok(mut cmd: Command) -> Output {
    let out = cmd.output().expect("spawn");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The golden ruleset as `nft -f` loads it, listed in a fresh namespace.
fn golden_listed() -> String {
    let ns = Netns::new();
    let file = crate::support::unique_temp_dir("rules-golden").join("sidecar.nft");
    std::fs::write(&file, SIDECAR).unwrap();
    ok(ns.exec(&["nft", "-f", file.to_str().unwrap()]));
    ns.ruleset()
}

#[test]
fn rules_apply_gives_the_golden_ruleset_and_again_the_same() {
    if let Some(reason) = skip_reason() {
        eprintln!("skipped: {reason}");
        return;
    }
    let golden = golden_listed();
    assert!(golden.contains("chain nat_output"), "{golden}");
    let ns = Netns::new();
    // An older table of the same name, with a chain the ruleset does not have: replaced
    // whole, not added to.
    let stale = crate::support::unique_temp_dir("rules-stale").join("stale.nft");
    std::fs::write(
        &stale,
        "table inet egress_proxy {\n\tchain stale {\n\t}\n}\n",
    )
    .unwrap();
    ok(ns.exec(&["nft", "-f", stale.to_str().unwrap()]));
    assert!(ns.ruleset().contains("chain stale"));
    for round in ["first", "second"] {
        let out = ns.apply();
        assert_eq!(out.status.code(), Some(0), "{round}: {out:?}");
        assert_eq!(ns.ruleset(), golden, "{round} --apply");
    }
}

#[test]
fn rules_apply_without_cap_net_admin_fails_closed() {
    if let Some(reason) = skip_reason() {
        eprintln!("skipped: {reason}");
        return;
    }
    if super::which("setpriv").is_none() {
        eprintln!("skipped: `setpriv` is not installed");
        return;
    }
    let ns = Netns::new();
    let binary = binary();
    let mut argv = vec![
        "setpriv",
        "--reuid",
        "1000",
        "--regid",
        "1000",
        "--clear-groups",
    ];
    argv.extend([binary.as_str(), "rules"]);
    argv.extend(FLAGS);
    argv.push("--apply");
    let out = ns.exec(&argv).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(stderr.contains("CAP_NET_ADMIN"), "{stderr}");
    assert_eq!(ns.ruleset(), "", "nothing applied");
}

/// What happens to connections and datagrams inside the namespace, as JSON: which
/// listener a TCP connection to OWN_ADDRESS:8080 reaches (from root, and from the
/// proxy's uid) and one to port 53 (from root), and which socket a datagram to
/// OWN_ADDRESS port 53 or 9999 reaches.
const PROBE: &str = r#"
import json, os, select, socket, sys
own, transparent, dns = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
"x".encode("idna")  # loaded now: after setuid the interpreter's files may be unreadable
def tcp(addr, port):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port)); s.listen(8); return s
def udp(addr, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind((addr, port)); return s
names = {tcp("127.0.0.1", transparent): "transparent", tcp(own, 8080): "direct",
         tcp("127.0.0.1", dns): "dns", tcp(own, 53): "direct",
         udp("127.0.0.1", dns): "dns", udp(own, 53): "direct", udp(own, 9999): "direct"}
def reached(listeners):
    ready, _, _ = select.select(listeners, [], [], 1.0)
    for s in ready:
        if s.type == socket.SOCK_STREAM: s.accept()[0].close()
        else: s.recv(100)
    return sorted(names[s] for s in ready)
def connect(uid, port=8080):
    pid = os.fork()
    if pid == 0:
        try:
            if uid: os.setgid(uid); os.setuid(uid)
            socket.create_connection((own, port), timeout=2).close()
        except OSError: pass
        os._exit(0)
    got = reached([s for s in names if s.type == socket.SOCK_STREAM])
    os.waitpid(pid, 0)
    return got
def send(port):
    try: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"x", (own, port))
    except OSError: pass
    return reached([s for s in names if s.type == socket.SOCK_DGRAM])
print(json.dumps({"tcp": connect(0), "tcp_proxy_uid": connect(1337), "tcp53": connect(0, 53),
                  "udp53": send(53), "udp9999": send(9999)}))
"#;

fn probe(ns: &Netns) -> Value {
    let python = super::python();
    let out = ok(ns.exec(&[python, "-c", PROBE, OWN_ADDRESS, "15001", "15053"]));
    serde_json::from_slice(&out.stdout).expect("the probe's JSON")
}

#[test]
fn rules_apply_redirects_tcp_and_dns_and_drops_other_udp() {
    if let Some(reason) = skip_reason() {
        eprintln!("skipped: {reason}");
        return;
    }
    if super::which("python3").is_none() {
        eprintln!("skipped: `python3` is not installed");
        return;
    }
    let ns = Netns::new();
    // Without the rules every probe reaches the socket it was sent to: the probe works.
    let open = serde_json::json!({"tcp": ["direct"], "tcp_proxy_uid": ["direct"], "tcp53": ["direct"],
                                  "udp53": ["direct"], "udp9999": ["direct"]});
    assert_eq!(probe(&ns), open);
    let out = ns.apply();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let confined = serde_json::json!({"tcp": ["transparent"], "tcp_proxy_uid": ["direct"], "tcp53": ["dns"],
                                      "udp53": ["dns"], "udp9999": []});
    assert_eq!(probe(&ns), confined);
}
