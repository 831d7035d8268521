//! `run`'s exit status: CMD's, 128+N for a signal, 125 for its own errors, 126 and 127
//! for a CMD that cannot start; and who CMD runs as.

use std::process::Command;

use super::{require_jail, Jailed};

#[tokio::test]
async fn run_exits_with_cmds_status() {
    require_jail!();
    for (script, code) in [("exit 0", 0), ("exit 3", 3), ("kill -9 $$", 128 + 9)] {
        let out = Jailed::standard(80).sh(script).await;
        assert_eq!(out.code(), Some(code), "{script}: {out}");
    }
}

#[tokio::test]
async fn run_exits_126_and_127_when_cmd_cannot_start() {
    require_jail!();
    let dir = super::shared_dir("run-exec");
    let not_executable = dir.join("script.sh");
    std::fs::write(&not_executable, "#!/bin/sh\nexit 0\n").unwrap();
    let path = not_executable.to_str().unwrap();
    let out = Jailed::standard(80).run(&[path]).await;
    assert_eq!(out.code(), Some(126), "{out}");
    assert!(out.stderr.contains("script.sh"), "{out}");
    let out = Jailed::standard(80).run(&["no-such-command-here"]).await;
    assert_eq!(out.code(), Some(127), "{out}");
    assert!(out.stderr.contains("no-such-command-here"), "{out}");
}

#[tokio::test]
async fn run_exits_125_for_a_policy_that_does_not_load_and_never_runs_cmd() {
    require_jail!();
    let marker = super::shared_dir("run-bad").join("ran");
    let script = format!("touch {}", marker.display());
    let out = Jailed::new("version = 1\nallowed_domains = [\"*\"\n")
        .sh(&script)
        .await;
    assert_eq!(out.code(), Some(125), "{out}");
    assert!(
        out.stderr.contains("org.toml"),
        "the message names the file: {out}"
    );
    assert!(!marker.exists(), "CMD ran: {out}");
    let out = Jailed::standard(80)
        .policy("{\"type\": \"allowlist\", \"allowed_domains\": [\"other.test\"]}")
        .sh(&script)
        .await;
    assert_eq!(out.code(), Some(125), "a widening --policy: {out}");
    assert!(!marker.exists(), "CMD ran: {out}");
}

#[tokio::test]
async fn run_usage_errors_exit_125() {
    let out = Command::new(crate::support::proxy::binary())
        .args(["run", "--org", "x.toml", "true"])
        .output()
        .expect("run");
    assert_eq!(
        out.status.code(),
        Some(125),
        "CMD must follow `--`: {out:?}"
    );
}

#[tokio::test]
async fn run_without_privileges_exits_125_naming_them() {
    require_jail!();
    if super::which("setpriv").is_none() {
        eprintln!("skipped: `setpriv` (util-linux) is not installed");
        return;
    }
    let marker = super::shared_dir("run-caps").join("ran");
    let jailed = Jailed::standard(80);
    let script = format!("touch {}", marker.display());
    let inner = jailed.command(&["sh", "-c", &script]);
    // Root without CAP_SYS_ADMIN and CAP_NET_ADMIN (dropped from the bounding set).
    let out = Command::new("setpriv")
        .args([
            "--inh-caps=-all",
            "--bounding-set=-sys_admin,-net_admin",
            "--",
        ])
        .arg(inner.get_program())
        .args(inner.get_args())
        .output()
        .expect("setpriv");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(
        stderr.contains("CAP_SYS_ADMIN") && stderr.contains("CAP_NET_ADMIN"),
        "{stderr}"
    );
    assert!(!marker.exists(), "CMD ran unconfined: {stderr}");
}

#[tokio::test]
async fn run_runs_cmd_as_user_then_sudo_uid() {
    require_jail!();
    let out = Jailed::standard(80)
        .arg("--user")
        .arg("nobody")
        .sh("id -u; id -g; id -G")
        .await;
    assert_eq!(out.code(), Some(0), "{out}");
    let nobody: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(nobody.first(), Some(&"65534"), "{out}");
    assert_eq!(
        nobody.get(1),
        nobody.get(2),
        "the primary group is the only one: {out}"
    );
    let out = Jailed::standard(80)
        .env("SUDO_UID", "4321")
        .env("SUDO_GID", "4322")
        .sh("id -u; id -g")
        .await;
    assert_eq!(out.code(), Some(0), "{out}");
    assert_eq!(out.stdout, "4321\n4322\n", "{out}");
}

#[tokio::test]
async fn run_without_root_but_with_the_two_capabilities_confines_cmd() {
    require_jail!();
    if super::which("setcap").is_none() || super::which("setpriv").is_none() {
        eprintln!("skipped: `setcap` (libcap2-bin) or `setpriv` (util-linux) is not installed");
        return;
    }
    // A copy of the binary with file capabilities, run as nobody.
    let jailed = Jailed::standard(80);
    let dir = jailed.dir.clone();
    let binary = dir.join("egress-proxy");
    std::fs::copy(crate::support::proxy::binary(), &binary).expect("copy the binary");
    let setcap = Command::new("setcap")
        .arg("cap_sys_admin,cap_net_admin+ep")
        .arg(&binary)
        .status();
    assert!(setcap.is_ok_and(|s| s.success()), "setcap");
    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o777);
    std::fs::set_permissions(&dir, mode).unwrap();
    let inner = jailed.command(&[
        "sh",
        "-c",
        "id -u; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status; ip route; nft list ruleset; echo nft=$?",
    ]);
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(&binary)
        .args(inner.get_args())
        .output()
        .expect("setpriv");
    let _ = std::fs::remove_file(&binary);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.starts_with("65534\n"), "{stdout}");
    assert!(
        stdout.contains("CapEff:\t0000000000000000") && stdout.contains("NoNewPrivs:\t1"),
        "{stdout}"
    );
    assert!(
        stdout.contains("default dev lo"),
        "in the jail's namespace: {stdout}"
    );
    assert!(!stdout.contains("nft=0"), "{stdout}\n{stderr}");
}
