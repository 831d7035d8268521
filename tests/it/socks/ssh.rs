//! Real OpenSSH through the SOCKS5 listener: `ssh -o ProxyCommand='nc -X 5 -x SOCKS
//! %h %p'` to a local `sshd` the test starts, and `git clone` and `git push` over
//! `ssh://` with the same `ProxyCommand` in `GIT_SSH_COMMAND`. ssh does not resolve the
//! host when a ProxyCommand is set, and `nc -X 5` sends it as a SOCKS5 name, so the
//! proxy judges the name (its records name `allowed.test`, not an address). Skipped,
//! with a reason printed, when sshd, ssh, nc (OpenBSD's) or git is missing.

use std::process::Output;

use super::{assert_socks_record, Setup};
use crate::support::org::allowlist_json;
use crate::support::proxy::AUDIT_TIMEOUT;
use crate::support::sshd::{bounded_sh, require_ssh, Sshd, GIT};

/// `script` on a blocking thread (the test DNS server runs on this runtime meanwhile).
async fn sh(script: String) -> Output {
    tokio::task::spawn_blocking(move || bounded_sh(&script))
        .await
        .unwrap()
}

fn show(out: &Output) -> String {
    format!(
        "{}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// sshd, and a proxy whose org and `--policy` allow `allowed.test` on sshd's port only, the name
/// pinned to 127.0.0.1 (`evil.test` is known to the test DNS server, so only the
/// judgement stops it).
async fn setup() -> (Sshd, Setup) {
    let sshd = tokio::task::spawn_blocking(Sshd::start).await.unwrap();
    let port = sshd.port();
    let s = Setup::start_custom(
        |org| org.ports(&[port]),
        |builder| {
            builder
                .policy(allowlist_json(&["allowed.test"]))
                .pin("allowed.test")
        },
    )
    .await;
    (sshd, s)
}

#[tokio::test]
async fn ssh_through_socks5_with_nc_reaches_an_allowed_name_and_not_a_denied_one() {
    require_ssh!();
    let (sshd, s) = setup().await;
    let socks = s.socks.to_string();
    // Without the proxy, the server lets this client in under the denied name: a failure
    // below is the proxy's.
    let direct = sh(sshd.ssh_true_direct("evil.test")).await;
    assert!(
        direct.status.success(),
        "direct: {}\n{}",
        show(&direct),
        sshd.log()
    );
    assert_eq!(sshd.connections(), 1, "{}", sshd.log());

    let allowed = sh(sshd.ssh_true_via(&socks, "allowed.test")).await;
    assert!(
        allowed.status.success(),
        "allowed: {}\n{}",
        show(&allowed),
        sshd.log()
    );
    assert_eq!(sshd.connections(), 2, "{}", sshd.log());
    let record = s.proxy.allowed_record().await;
    assert_socks_record(&record, "egress.allowed", None);
    assert_eq!(record["host"], "allowed.test", "judged by name: {record}");
    assert_eq!(record["port"], sshd.port(), "{record}");
    assert_eq!(record["method"], "CONNECT", "{record}");

    let denied = sh(sshd.ssh_true_via(&socks, "evil.test")).await;
    // ssh: 255 when the connection (here, the ProxyCommand) fails.
    assert_eq!(denied.status.code(), Some(255), "denied: {}", show(&denied));
    let record = s
        .proxy
        .wait_audit(|r| r["event"] == "egress.denied", AUDIT_TIMEOUT)
        .await;
    assert_socks_record(&record, "egress.denied", Some("not_in_org_allowlist"));
    assert_eq!(record["host"], "evil.test", "{record}");
    assert_eq!(s.dns.queries_for("evil.test"), 0);
    assert_eq!(sshd.connections(), 2, "the denied one never reached sshd");
}

#[tokio::test]
async fn git_clone_and_push_over_ssh_through_socks5_work_and_a_denied_name_does_not() {
    require_ssh!();
    let (sshd, s) = setup().await;
    let bare = sshd.bare_repository();
    let clone = sshd.dir().join("clone");
    let ssh = sshd.ssh_via(&s.socks.to_string());
    let git = format!("GIT_SSH_COMMAND=\"{ssh}\" GIT_TERMINAL_PROMPT=0 {GIT}");
    let c = clone.display();
    let script = format!(
        "set -e; {git} clone -q {url} {c}; test \"$(cat {c}/README)\" = 'over ssh'; \
         echo pushed > {c}/PUSHED; {GIT} -C {c} add PUSHED; \
         {GIT} -C {c} -c user.name=t -c user.email=t@t.test commit -q -m 'pushed over ssh'; \
         {git} -C {c} push -q origin main",
        url = sshd.url("allowed.test", &bare)
    );
    let out = sh(script).await;
    assert!(
        out.status.success(),
        "clone and push: {}\n{}",
        show(&out),
        sshd.log()
    );
    let log = sh(format!(
        "{GIT} --git-dir {} log -1 --format=%s main",
        bare.display()
    ))
    .await;
    assert_eq!(
        String::from_utf8_lossy(&log.stdout).trim(),
        "pushed over ssh"
    );
    let allowed: Vec<_> = s
        .proxy
        .audit_lines()
        .into_iter()
        .filter(|r| r["event"] == "egress.allowed" && r["host"] == "allowed.test")
        .collect();
    assert_eq!(
        allowed.len(),
        2,
        "one tunnel for the clone, one for the push"
    );
    for record in &allowed {
        assert_socks_record(record, "egress.allowed", None);
    }
    let reached = sshd.connections();

    let evil = sshd.dir().join("evil");
    let denied = sh(format!(
        "{git} clone -q {} {}",
        sshd.url("evil.test", &bare),
        evil.display()
    ))
    .await;
    assert!(!denied.status.success(), "denied clone: {}", show(&denied));
    assert!(!evil.join("README").exists());
    let record = s
        .proxy
        .wait_audit(|r| r["event"] == "egress.denied", AUDIT_TIMEOUT)
        .await;
    assert_socks_record(&record, "egress.denied", Some("not_in_org_allowlist"));
    assert_eq!(record["host"], "evil.test", "{record}");
    assert_eq!(s.dns.queries_for("evil.test"), 0);
    assert_eq!(
        sshd.connections(),
        reached,
        "the denied clone never reached sshd"
    );
}
