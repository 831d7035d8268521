//! OpenSSH in the jail (docs/reference/clients.md, "ssh"): `ssh -o
//! ProxyCommand='nc -X 5 -x 127.0.0.1:1080 %h %p'` reaches the SOCKS5 listener `run`
//! serves in the jail, and `git clone ssh://…` with that ssh in `GIT_SSH_COMMAND`. The
//! `sshd` the test starts listens on the host's loopback, where the proxy (outside the
//! jail's network namespace) dials it, the name pinned with `--resolve`; the server is
//! shown to let the client in under the denied name from outside the jail first.

use super::require_jail;
use super::tools::{assert_ok, jail_allowing, outside, records};
use crate::support::sshd::{require_ssh, Sshd, GIT};

#[tokio::test]
async fn ssh_and_git_over_ssh_through_socks5_in_the_jail_reach_an_allowed_name_not_a_denied_one() {
    require_jail!();
    require_ssh!();
    let sshd = tokio::task::spawn_blocking(Sshd::start).await.unwrap();
    let port = sshd.port();
    let bare = sshd.bare_repository();
    // From outside, sshd lets this client in as denied.test: only the jail stops it.
    assert_ok(
        "ssh denied.test",
        &outside(sshd.ssh_true_direct("denied.test")).await,
    );
    assert_eq!(sshd.connections(), 1, "{}", sshd.log());
    let socks = "127.0.0.1:1080";
    let clone = sshd.dir().join("clone");
    let script = format!(
        "{allowed}; echo \"allowed=$?\"\n{denied} 2>&1; echo \"denied=$?\"\n\
         GIT_SSH_COMMAND=\"{ssh}\" GIT_TERMINAL_PROMPT=0 {GIT} clone -q {url} {clone} 2>&1; \
         echo \"clone=$?\"",
        allowed = sshd.ssh_true_via(socks, "allowed.test"),
        denied = sshd.ssh_true_via(socks, "denied.test"),
        ssh = sshd.ssh_via(socks),
        url = sshd.url("allowed.test", &bare),
        clone = clone.display(),
    );
    let out = jail_allowing(&["allowed.test"], &[port]).sh(&script).await;
    assert_eq!(out.code(), Some(0), "{out}");
    assert!(out.stdout.contains("allowed=0"), "{out}\n{}", sshd.log());
    // ssh: 255 when the connection (here, the ProxyCommand) fails.
    assert!(out.stdout.contains("denied=255"), "{out}");
    assert!(out.stdout.contains("clone=0"), "{out}\n{}", sshd.log());
    let readme = std::fs::read_to_string(clone.join("README")).ok();
    assert_eq!(readme.as_deref(), Some("over ssh\n"), "{out}");
    assert_eq!(
        sshd.connections(),
        3,
        "outside, ssh and clone; never the denied one: {out}\n{}",
        sshd.log()
    );
    let allowed = records(&out, "allowed.test", "socks5");
    assert_eq!(
        allowed
            .iter()
            .filter(|r| r["event"] == "egress.allowed" && r["port"] == port)
            .count(),
        2,
        "ssh and clone, judged by name: {out}"
    );
    let denied = records(&out, "denied.test", "socks5");
    assert_eq!(denied.len(), 1, "{out}");
    assert_eq!(denied[0]["event"], "egress.denied", "{out}");
    assert_eq!(denied[0]["reason"], "not_in_org_allowlist", "{out}");
    for via in ["proxy", "transparent", "dns"] {
        assert!(
            records(&out, "allowed.test", via).is_empty(),
            "ssh resolved nothing and went only through SOCKS5 ({via}): {out}"
        );
    }
}
