//! `git clone` over HTTPS in the jail, from git's smart HTTP (`git http-backend` behind
//! the test's TLS origin, tests/fixtures/run/tls_origin.py): once through the proxy
//! `run`'s environment names, once with the proxy ignored; a denied name fails both ways.

use std::process::Command;

use super::require_jail;
use super::tls_origin::TlsOrigin;
use super::tools::{assert_ok, jail_allowing, outside, records, tool_missing, NO_PROXY_ENV};

/// git without the system's or the user's configuration.
const GIT: &str = "GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null git";

/// A bare repository `repo.git` under `root` with one commit holding `README`.
fn make_repository(root: &std::path::Path) {
    let work = root.join("work");
    let script = format!(
        "set -e; {GIT} init -q -b main {w}; echo 'cloned through the jail' > {w}/README; \
         {GIT} -C {w} add README; \
         {GIT} -C {w} -c user.name=t -c user.email=t@t.test commit -q -m one; \
         {GIT} clone -q --bare {w} {root}/repo.git; rm -rf {w}",
        w = work.display(),
        root = root.display()
    );
    let out = Command::new("sh").args(["-c", &script]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
}

#[tokio::test]
async fn git_clone_over_https_from_a_local_server_works_in_the_jail_with_and_without_the_proxy() {
    require_jail!();
    if tool_missing("git") {
        return;
    }
    let tls = TlsOrigin::start(&["git.test", "evil.test"]);
    make_repository(&tls.git_root());
    let (port, ca) = (tls.port(), tls.ca().display().to_string());
    let work = super::shared_dir("git");
    let clone = |name: &str, dest: &str| {
        format!(
            "GIT_SSL_CAINFO={ca} GIT_TERMINAL_PROMPT=0 {GIT} clone -q \
             https://{name}:{port}/git/repo.git {}",
            work.join(dest).display()
        )
    };
    // From outside, evil.test serves the repository too (pinned by git's own option).
    assert_ok(
        "git clone evil.test",
        &outside(format!(
            "GIT_SSL_CAINFO={ca} {GIT} -c http.curloptResolve=evil.test:{port}:127.0.0.1 \
             clone -q https://evil.test:{port}/git/repo.git {}",
            work.join("outside").display()
        ))
        .await,
    );
    let outside_readme = std::fs::read_to_string(work.join("outside/README")).unwrap();
    assert_eq!(outside_readme, "cloned through the jail\n");
    let evil_before = tls.requests_for("evil.test");
    assert!(evil_before
        .iter()
        .any(|r| r.starts_with("POST /git/repo.git/git-upload-pack")));
    let script = format!(
        "{}; echo \"proxied=$?\"\n{NO_PROXY_ENV} {}; echo \"direct=$?\"\n\
         {} 2>&1; echo \"evil-proxied=$?\"\n{NO_PROXY_ENV} {} 2>&1; echo \"evil-direct=$?\"",
        clone("git.test", "proxied"),
        clone("git.test", "direct"),
        clone("evil.test", "evil1"),
        clone("evil.test", "evil2"),
    );
    let out = jail_allowing(&["git.test"], &[port]).sh(&script).await;
    assert_eq!(out.code(), Some(0), "{out}\n{}", tls.stderr());
    for result in ["proxied", "direct"] {
        assert!(
            out.stdout.contains(&format!("{result}=0")),
            "{result}: {out}"
        );
        let readme = std::fs::read_to_string(work.join(result).join("README"));
        assert_eq!(
            readme.ok().as_deref(),
            Some("cloned through the jail\n"),
            "{out}"
        );
    }
    assert!(!out.stdout.contains("evil-proxied=0"), "{out}");
    assert!(!out.stdout.contains("evil-direct=0"), "{out}");
    assert!(
        out.stdout.contains("403"),
        "git shows the refused CONNECT's status: {out}"
    );
    assert!(!work.join("evil1/README").exists() && !work.join("evil2/README").exists());
    // Smart HTTP: the ref advertisement and the upload-pack POST, for each clone.
    let git = tls.requests_for("git.test");
    let posts = git.iter().filter(|r| r.starts_with("POST ")).count();
    assert!(posts >= 2, "{git:?}");
    assert_eq!(
        tls.requests_for("evil.test"),
        evil_before,
        "only the outside clone's requests"
    );
    let allowed = |via| {
        records(&out, "git.test", via)
            .iter()
            .any(|r| r["event"] == "egress.allowed")
    };
    assert!(allowed("proxy") && allowed("transparent"), "{out}");
    let denied = |via| !records(&out, "evil.test", via).is_empty();
    assert!(denied("proxy") && denied("dns"), "{out}");
}
