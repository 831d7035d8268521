//! Credentials (docs/reference/inspection.md): the org's header value is set on the
//! requests inside an intercepted tunnel to its host, and on nothing else, and is shown
//! nowhere.

use crate::support::client::get_via_proxy;
use crate::support::org::Org;
use crate::support::origin::Origin;
use crate::support::proxy::ProxyBuilder;
use crate::support::tls::Testbed;

/// The credential the org gives `secure.test` in the credential tests.
const SECRET: &str = "Bearer egress-it-credential-5f1e";

#[tokio::test]
async fn a_credential_is_set_on_requests_to_its_host_only_and_never_shown() {
    let plain = Origin::start_named("plain").await;
    let bed = Testbed::start("inspect-credentials").await;
    let origin = &bed.origin;
    let secret_file = bed.dir.join("github-token");
    std::fs::write(&secret_file, format!("{SECRET}\n")).unwrap();
    let entry = r#"{ host = "secure.test", inspect = true }"#;
    let org = Org::new()
        .allow_entry(entry)
        .allow("allowed.test")
        .ports(&[443, origin.port(), plain.port()])
        .loopback()
        .raw_line(&format!(
            "[[credentials]]\nhost = \"secure.test\"\nheader = \"Authorization\"\nvalue_file = {:?}",
            secret_file.to_str().unwrap()
        ))
        .to_toml();
    let policy = r#"{"type":"allowlist","allowed_domains":["secure.test","allowed.test"]}"#;
    let builder = ProxyBuilder::new(org)
        .policy(policy)
        .pin("allowed.test")
        .audit_allowed()
        .admin("it-admin-token")
        .log("debug");
    let proxy = bed.proxy(builder).start().await;
    let mut inner = bed.inner(&proxy, &[]).await;
    let first = inner.request("GET", "/user", &[], b"").await;
    assert_eq!(first.status, 200, "{first:?}");
    // The client's own Authorization is replaced, not added to.
    let replaced = inner
        .request(
            "GET",
            "/user",
            &[("Authorization", "Bearer the-sandbox-guess")],
            b"",
        )
        .await;
    assert_eq!(replaced.status, 200);
    for seen in origin.requests() {
        assert_eq!(seen.header_all("authorization"), [SECRET], "{seen:?}");
    }
    // Another allowed host never gets it, even when the client names it.
    let url = format!("http://allowed.test:{}/", plain.port());
    let other = get_via_proxy(proxy.addr, &url, &[]).await;
    assert_eq!(other.status, 200);
    assert!(plain.requests()[0].header("authorization").is_none());
    // A refusal inside the tunnel does not echo it either.
    let refused = inner
        .request("GET", "/", &[("Host", "elsewhere.test")], b"")
        .await;
    assert_eq!(refused.status, 403);
    let metrics = proxy.admin().metrics().await;
    proxy
        .wait_audit(
            |r| r["reason"] == "host_mismatch",
            std::time::Duration::from_secs(5),
        )
        .await;
    let shown = [
        ("the audit log", proxy.audit_text()),
        ("the proxy's debug log", proxy.stderr()),
        ("/metrics", metrics),
        (
            "the answers",
            format!("{first:?}{replaced:?}{other:?}{refused:?}"),
        ),
    ];
    for (place, text) in shown {
        assert!(
            !text.contains("egress-it-credential"),
            "the credential is in {place}:\n{text}"
        );
    }
    // The probe is real: the debug log did record these requests.
    assert!(
        proxy.stderr().contains("DEBUG"),
        "no debug log to search:\n{}",
        proxy.stderr()
    );
}
