//! `egress-proxy rules`: the sidecar ruleset, and both rulesets accepted by nftables.

use std::io::Write;
use std::process::{Command, Stdio};

use crate::support::proxy::binary;

const SIDECAR: &str = include_str!("../../../src/run/golden/sidecar.nft");
const JAIL: &str = include_str!("../../../src/run/golden/jail.nft");

fn rules(args: &[&str]) -> std::process::Output {
    Command::new(binary())
        .arg("rules")
        .args(args)
        .output()
        .expect("run rules")
}

#[test]
fn rules_prints_the_sidecar_ruleset() {
    let out = rules(&[
        "--proxy-uid",
        "1337",
        "--transparent-port",
        "15001",
        "--dns-port",
        "15053",
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), SIDECAR);
    let defaults = String::from_utf8(rules(&["--proxy-uid", "7"]).stdout).unwrap();
    assert!(
        defaults.contains("redirect to :3129\n") && defaults.contains("redirect to :3053\n"),
        "{defaults}"
    );
}

#[test]
fn rules_help_names_apply() {
    let out = rules(&["--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        help.contains("--apply") && help.contains("CAP_NET_ADMIN"),
        "{help}"
    );
}

#[test]
fn rules_usage_errors_exit_2() {
    for args in [
        &[][..],
        &["--proxy-uid", "x"],
        &["--proxy-uid", "1", "--dns-port", "0"],
    ] {
        let out = rules(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
    }
}

#[test]
fn rules_both_rulesets_load_into_nftables() {
    if let Some(reason) = super::skip_reason() {
        eprintln!("skipped: {reason}");
        return;
    }
    for (name, ruleset) in [("sidecar", SIDECAR), ("jail", JAIL)] {
        // Applied for real, twice (the sidecar's replaces itself), in a throw-away
        // network namespace.
        let script = "nft -f /dev/stdin <<EOF\n".to_string() + ruleset + "EOF\n";
        let twice = if name == "sidecar" {
            format!("{script}{script}")
        } else {
            script
        };
        let mut child = Command::new("unshare")
            .args([
                "--net",
                "--",
                "sh",
                "-c",
                &format!("{twice}nft list table inet egress_proxy"),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("unshare");
        drop(child.stdin.take().map(|mut s| s.write_all(b"")));
        let out = child.wait_with_output().unwrap();
        let listed = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(listed.contains("chain filter_output"), "{name}: {listed}");
    }
}
