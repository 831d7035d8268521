//! Sessions over SOCKS5 (docs/reference/socks5.md, "Sessions"): RFC 1929's user name
//! is the session id and its password the token, the same session
//! `Proxy-Authorization` names, judged by the same levels. The org's default is closed,
//! so only a session opens the network.

use super::{assert_socks_record, Setup, Socks, To, CONNECT};
use crate::support::admin::metric;
use crate::support::sessions::{allowlist, assert_no_secrets, ADMIN_TOKEN};
use crate::support::IO_TIMEOUT;

/// The admin API on, no `--policy`, and `extra` flags.
async fn with_sessions(extra: &'static [&'static str]) -> Setup {
    Setup::start_custom(
        |org| org,
        move |mut builder| {
            builder = builder.admin(ADMIN_TOKEN);
            for arg in extra {
                builder = builder.arg(arg);
            }
            builder
        },
    )
    .await
}

#[tokio::test]
async fn a_session_by_username_and_password_opens_what_its_policy_allows() {
    let s = with_sessions(&[]).await;
    let session = s
        .proxy
        .admin()
        .create_session(&allowlist(&["allowed.test"]), None)
        .await;
    let mut socks = Socks::open(s.socks).await;
    assert_eq!(
        socks.greet(&[0, 2]).await,
        2,
        "credentials offered are used"
    );
    assert_eq!(socks.user_pass(&session.id, &session.token).await, 0);
    let port = s.origin.port();
    let (code, _) = socks
        .request(CONNECT, &To::name("allowed.test"), port)
        .await;
    assert_eq!(code, 0x00);
    let response = socks.http_get("allowed.test").await;
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    let record = s.proxy.allowed_record().await;
    assert_socks_record(&record, "egress.allowed", None);
    assert_eq!(record["session"], session.id.as_str());

    // The same session, another name its policy lacks: refused at the request level.
    let mut socks = Socks::open(s.socks).await;
    assert_eq!(socks.greet(&[2]).await, 2);
    assert_eq!(socks.user_pass(&session.id, &session.token).await, 0);
    let (code, _) = socks.request(CONNECT, &To::name("other.test"), port).await;
    assert_eq!(code, 0x02);
    let denied = s
        .proxy
        .wait_audit(
            |r| r["event"] == "egress.denied",
            crate::support::proxy::AUDIT_TIMEOUT,
        )
        .await;
    assert_eq!(denied["session"], session.id.as_str(), "{denied}");
    assert_eq!(s.dns.queries_for("other.test"), 0);
    assert_no_secrets(&s.proxy, &[&session.token]);
}

#[tokio::test]
async fn without_a_session_the_closed_default_refuses() {
    let s = with_sessions(&[]).await;
    let (code, _) = Socks::connect(s.socks, &To::name("allowed.test"), s.origin.port()).await;
    assert_eq!(code, 0x02);
    let record = s.proxy.single_audit().await;
    assert_socks_record(&record, "egress.denied", record["reason"].as_str());
    assert!(record["session"].is_null());
    // Counted as the CONNECT is: one denied connection, by its reason.
    let reason = record["reason"].as_str().unwrap();
    let text = s.proxy.admin().metrics().await;
    let series = format!(r#"egress_connections_total{{decision="denied",reason="{reason}"}}"#);
    assert_eq!(metric(&text, &series), Some(1.0), "{text}");
}

#[tokio::test]
async fn wrong_credentials_get_status_0x01_and_are_audited_auth_required() {
    let s = with_sessions(&[]).await;
    let session = s
        .proxy
        .admin()
        .create_session(&allowlist(&["allowed.test"]), None)
        .await;
    for (user, pass) in [
        (session.id.as_str(), "not-the-token"),
        ("no-such-session", session.token.as_str()),
        ("", ""),
    ] {
        let mut socks = Socks::open(s.socks).await;
        assert_eq!(socks.greet(&[2]).await, 2);
        assert_eq!(socks.user_pass(user, pass).await, 0x01, "{user}");
        assert!(socks.closed_within(IO_TIMEOUT).await);
    }
    let records = s.proxy.expect_audit_count(3).await;
    for record in &records {
        assert_socks_record(record, "egress.denied", Some("auth_required"));
    }
    assert_no_secrets(&s.proxy, &[&session.token]);
    assert_eq!(s.origin.connections(), 0);
}

#[tokio::test]
async fn require_session_refuses_a_client_without_username_password_with_0xff() {
    let s = with_sessions(&["--require-session"]).await;
    let mut socks = Socks::open(s.socks).await;
    assert_eq!(socks.greet(&[0]).await, 0xFF, "no acceptable method");
    assert!(socks.closed_within(IO_TIMEOUT).await);
    let record = s.proxy.single_audit().await;
    assert_socks_record(&record, "egress.denied", Some("auth_required"));

    // With credentials, the same proxy serves.
    let session = s
        .proxy
        .admin()
        .create_session(&allowlist(&["allowed.test"]), None)
        .await;
    let mut socks = Socks::open(s.socks).await;
    assert_eq!(socks.greet(&[0, 2]).await, 2);
    assert_eq!(socks.user_pass(&session.id, &session.token).await, 0);
    let (code, _) = socks
        .request(CONNECT, &To::name("allowed.test"), s.origin.port())
        .await;
    assert_eq!(code, 0x00);
}
