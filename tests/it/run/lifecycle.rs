//! Signals passed to CMD, the ruleset seen from outside, what `kill -9` leaves, and
//! `--env-only`.

use std::process::Command;
use std::time::{Duration, Instant};

use super::{alive, descendants, finish, require_jail, wait_for_file, wait_for_init, Jailed};

#[tokio::test]
async fn run_passes_sigterm_to_cmd_and_its_rules_hold_after_cmd_tried_to_flush_them() {
    require_jail!();
    let jailed = Jailed::standard(80);
    let ready = super::shared_dir("lifecycle").join("ready");
    let script = format!(
        "trap 'echo got-term; exit 7' TERM; nft flush ruleset 2>/dev/null; touch {}; sleep 30 & wait",
        ready.display()
    );
    let audit = jailed.audit_path();
    let mut child = jailed
        .command(&["sh", "-c", &script])
        .spawn()
        .expect("spawn run");
    let run_pid = child.id();
    let (init, listing, routes) = tokio::task::spawn_blocking(move || {
        let init = wait_for_init(run_pid);
        wait_for_file(&ready, &mut child);
        let enter = |args: &[&str]| {
            let out = Command::new("nsenter")
                .args(["-t", &init.to_string(), "-n", "--"])
                .args(args)
                .output()
                .expect("nsenter");
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let listing = enter(&["nft", "list", "ruleset"]);
        let routes = enter(&["ip", "route"]);
        let sent = Command::new("kill")
            .args(["-TERM", &run_pid.to_string()])
            .status();
        assert!(sent.is_ok_and(|s| s.success()));
        (init, (listing, finish(child, &audit)), routes)
    })
    .await
    .unwrap();
    let (listing, out) = listing;
    assert!(
        listing.contains("table inet egress_proxy"),
        "{listing}\n{out}"
    );
    assert!(listing.contains("redirect to :3129"), "{listing}");
    assert!(listing.contains("policy drop"), "{listing}");
    assert!(routes.contains("default dev lo"), "{routes}");
    assert_eq!(out.code(), Some(7), "SIGTERM reaches CMD: {out}");
    assert!(out.stdout.contains("got-term"), "{out}");
    assert!(!alive(init), "the jail's init is gone");
}

#[tokio::test]
async fn run_passes_sighup_and_sigint_to_cmd_and_does_not_reload() {
    require_jail!();
    for (signal, code) in [("HUP", 11), ("INT", 12)] {
        let jailed = Jailed::standard(80);
        let ready = super::shared_dir("lifecycle").join("ready");
        let script = format!(
            "trap 'exit {code}' {signal}; touch {}; sleep 30 & wait",
            ready.display()
        );
        let audit = jailed.audit_path();
        let mut child = jailed
            .command(&["sh", "-c", &script])
            .spawn()
            .expect("spawn run");
        let out = tokio::task::spawn_blocking(move || {
            wait_for_file(&ready, &mut child);
            let sent = Command::new("kill")
                .arg(format!("-{signal}"))
                .arg(child.id().to_string())
                .status();
            assert!(sent.is_ok_and(|s| s.success()));
            finish(child, &audit)
        })
        .await
        .unwrap();
        assert_eq!(out.code(), Some(code), "SIG{signal} reaches CMD: {out}");
        assert!(!out.stderr.contains("reload"), "{out}");
    }
}

#[tokio::test]
async fn kill_9_of_run_leaves_no_process_namespace_or_mount() {
    require_jail!();
    let mounts_before = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let jailed = Jailed::standard(80);
    let ready = super::shared_dir("lifecycle").join("ready");
    // A background child too: it must not outlive run either.
    let script = format!("sleep 300 & touch {}; sleep 301", ready.display());
    let mut child = jailed
        .command(&["sh", "-c", &script])
        .spawn()
        .expect("spawn run");
    let run_pid = child.id();
    let (jail, netns) = tokio::task::spawn_blocking(move || {
        let init = wait_for_init(run_pid);
        wait_for_file(&ready, &mut child);
        let netns = std::fs::read_link(format!("/proc/{init}/ns/net")).expect("the jail's netns");
        let jail = descendants(run_pid);
        child.kill().expect("kill -9 run");
        child.wait().expect("reap run");
        (jail, netns)
    })
    .await
    .unwrap();
    assert!(jail.len() >= 3, "init, sh and the sleeps: {jail:?}");
    let own_netns = std::fs::read_link("/proc/self/ns/net").unwrap();
    assert_ne!(netns, own_netns, "the jail had a namespace of its own");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left: Vec<u32> = jail.iter().copied().filter(|p| alive(*p)).collect();
        let holders = namespace_holders(&netns);
        if left.is_empty() && holders.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "left after kill -9: processes {left:?}, namespace held by {holders:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mounts_after = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let jail_mounts = |m: &str| {
        m.lines()
            .filter(|l| l.contains(" /run ") || l.contains("resolv.conf") || l.contains(" /proc "))
            .count()
    };
    assert_eq!(
        jail_mounts(&mounts_after),
        jail_mounts(&mounts_before),
        "{mounts_after}"
    );
}

/// Live processes whose network namespace is `netns`.
fn namespace_holders(netns: &std::path::Path) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| alive(*pid))
        .filter(|pid| std::fs::read_link(format!("/proc/{pid}/ns/net")).is_ok_and(|ns| ns == netns))
        .collect()
}

#[tokio::test]
async fn run_env_only_warns_that_it_is_not_a_boundary_and_still_serves_the_policy() {
    require_jail!();
    // In a network namespace of the test's own, so 127.0.0.1:3128 is free.
    let jailed = Jailed::standard(80).arg("--env-only");
    let script = r#"
import os, socket, urllib.request, urllib.error
print("proxy", os.environ.get("HTTP_PROXY"), os.environ.get("ALL_PROXY"))
try:
    urllib.request.urlopen("http://denied.test/", timeout=10)
except urllib.error.HTTPError as e:
    print("denied", e.code)
s = socket.create_connection(("127.0.0.1", 1080), timeout=10)
s.sendall(b"\x05\x01\x00")
print("socks method", s.recv(2).hex())
s.sendall(b"\x05\x01\x00\x03\x0bdenied.test\x00\x50")
print("socks reply", s.recv(2).hex())
"#;
    let inner = jailed.command(&[super::python(), "-c", script]);
    let mut line = inner.get_program().to_string_lossy().into_owned();
    for arg in inner.get_args() {
        line += &format!(" '{}'", arg.to_string_lossy().replace('\'', r"'\''"));
    }
    let out = Command::new("unshare")
        .args([
            "--net",
            "--",
            "sh",
            "-c",
            &format!("ip link set lo up && exec {line}"),
        ])
        .env_remove("SUDO_UID")
        .output()
        .expect("unshare");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("--env-only") && stderr.contains("NOT a boundary"),
        "{stderr}"
    );
    assert!(
        stdout.contains("proxy http://127.0.0.1:3128 socks5h://127.0.0.1:1080"),
        "{stdout}"
    );
    assert!(
        stdout.contains("denied 403"),
        "the proxy judges with the policy: {stdout}\n{stderr}"
    );
    // What ALL_PROXY names is served too, with the same policy: 0x02, not allowed.
    assert!(
        stdout.contains("socks method 0500") && stdout.contains("socks reply 0502"),
        "{stdout}\n{stderr}"
    );
}
