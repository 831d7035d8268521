//! `egress-proxy approve` as a reviewer without a browser runs it: the built binary
//! listing a running proxy's pending approvals, then deciding one, and the held request
//! going on to the real origin (docs/reference/command-line.md, "approve").

use std::process::{Command, Output};

use super::{answer, asking_session, get_in_background, setup, wait_pending};
use crate::support::proxy::{binary, Proxy};
use crate::support::sessions::ADMIN_TOKEN;
use crate::support::unique_temp_dir;

/// `approve --admin URL --admin-token-file F ARGS...`, run to its end off the runtime.
async fn approve(proxy: &Proxy, token: &str, args: &[&str]) -> Output {
    let url = format!("http://{}", proxy.admin().addr);
    let file = unique_temp_dir("approve").join("admin.token");
    std::fs::write(&file, format!("{token}\n")).unwrap();
    let mut cmd = Command::new(binary());
    cmd.args(["approve", "--admin", &url, "--admin-token-file"])
        .arg(&file)
        .args(args)
        .env_remove("EGRESS_PROXY_ADMIN_TOKEN");
    tokio::task::spawn_blocking(move || cmd.output().expect("run egress-proxy approve"))
        .await
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test]
async fn approve_lists_the_pending_and_decides_one() {
    let (origin, proxy) = setup(&[]).await;
    let none = approve(&proxy, ADMIN_TOKEN, &[]).await;
    assert!(none.status.success(), "{none:?}");
    assert_eq!(
        text(&none.stdout).trim(),
        "no request is waiting for approval"
    );

    let s = asking_session(&proxy, 30).await;
    let url = format!("http://other.test:{}/page", origin.port());
    let held = get_in_background(&proxy, &url, Some(&s));
    wait_pending(&proxy, 1, 1).await;
    // A second request on the same approval: the listing shows each one it releases.
    let second = format!("http://other.test:{}/second", origin.port());
    let held2 = get_in_background(&proxy, &second, Some(&s));
    let listed = wait_pending(&proxy, 1, 2).await;
    let id = listed[0]["id"].as_str().unwrap();
    let out = approve(&proxy, ADMIN_TOKEN, &[]).await;
    let shown = text(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(shown.starts_with(id), "{shown}");
    assert!(shown.contains(&format!("session={}", s.id)), "{shown}");
    assert!(shown.contains("GET /page"), "{shown}");
    assert!(
        shown.contains(&format!("entry=other.test:{}", origin.port())),
        "{shown}"
    );
    let held_lines: Vec<&str> = shown.lines().filter(|l| l.starts_with("  held ")).collect();
    assert_eq!(held_lines.len(), 2, "{shown}");
    assert!(
        held_lines[0].starts_with("  held GET /page since="),
        "{shown}"
    );
    assert!(
        held_lines[1].starts_with("  held GET /second since="),
        "{shown}"
    );

    let out = approve(&proxy, ADMIN_TOKEN, &[id, "allow-once"]).await;
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        text(&out.stdout).trim(),
        format!("{id}: allow-once (2 waiting request(s) go on)")
    );
    assert_eq!(answer(held).await.status, 200);
    assert_eq!(answer(held2).await.status, 200);
    assert_eq!(origin.hits(), 2);

    // Decided: a second decision is the API's 404, said plainly, exit 2.
    let out = approve(&proxy, ADMIN_TOKEN, &[id, "deny"]).await;
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = text(&out.stderr);
    assert!(
        err.contains("404") && err.contains("no pending approval"),
        "{err}"
    );
}

#[tokio::test]
async fn approve_says_what_is_wrong() {
    let (_origin, proxy) = setup(&[]).await;
    let out = approve(&proxy, "wrong-token", &[]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("refused the token (401)"),
        "{out:?}"
    );
    let out = approve(&proxy, ADMIN_TOKEN, &["not-an-id", "deny"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("not an approval id"), "{out:?}");
    let out = approve(&proxy, ADMIN_TOKEN, &[&"a".repeat(32), "maybe"]).await;
    assert_eq!(out.status.code(), Some(2), "a usage error");
}
