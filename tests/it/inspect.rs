//! Interception (docs/reference/inspection.md): tunnels to inspected hosts are
//! terminated with a certificate from the proxy's CA, and each request inside is judged
//! by method, path and `Host`, answered through the one answer function, forwarded over
//! TLS verified against `--upstream-ca`. Every test uses a real TLS origin and a client
//! that trusts only the proxy's CA.
//!
//! The requests judged inside a tunnel are here; [`credentials`] holds the header the
//! org sets on them, [`record`] the tunnel's own record, [`refusals`] the configurations
//! that do not load.

mod credentials;
mod record;
mod refusals;

use serde_json::Value;

use crate::support::org::Org;
use crate::support::proxy::{Proxy, ProxyBuilder};
use crate::support::tls::{Inner, Testbed};

/// An HTTPS origin for `secure.test`, and a proxy that inspects it under `entry` (an
/// organization entry), with a `--policy` of the same entry.
struct Setup {
    bed: Testbed,
    proxy: Proxy,
}

impl Setup {
    async fn start(entry: &str) -> Setup {
        Setup::with(entry, |b| b).await
    }

    async fn with(entry: &str, more: impl FnOnce(ProxyBuilder) -> ProxyBuilder) -> Setup {
        let bed = Testbed::start("inspect").await;
        let org = Org::new()
            .allow_entry(entry)
            .ports(&[443, bed.origin.port()])
            .loopback()
            .to_toml();
        let builder = bed.proxy(
            ProxyBuilder::new(org)
                .policy(policy_of(entry))
                .audit_allowed(),
        );
        let proxy = more(builder).start().await;
        Setup { bed, proxy }
    }

    async fn inner(&self) -> Inner {
        self.inner_with(&[]).await
    }

    async fn inner_with(&self, headers: &[(&str, &str)]) -> Inner {
        self.bed.inner(&self.proxy, headers).await
    }

    fn url(&self, path: &str) -> String {
        format!("https://secure.test:{}{path}", self.bed.origin.port())
    }

    async fn denial(&self, reason: &str) -> Value {
        self.proxy
            .wait_audit(
                |r| r["event"] == "egress.denied" && r["reason"] == reason,
                std::time::Duration::from_secs(5),
            )
            .await
    }
}

/// A request policy holding the organization entry `inline_toml`, as JSON.
fn policy_of(inline_toml: &str) -> String {
    let doc: toml::Table = toml::from_str(&format!("e = {inline_toml}")).expect("entry TOML");
    let mut entry = serde_json::to_value(&doc["e"]).expect("entry as JSON");
    if let Some(map) = entry.as_object_mut() {
        // `inspect` is the organization's alone.
        map.remove("inspect");
    }
    serde_json::json!({"type": "allowlist", "allowed_domains": [entry]}).to_string()
}

const READ_ONLY: &str = r#"{ host = "secure.test", access = "read-only" }"#;

#[tokio::test]
async fn an_allowed_get_inside_an_intercepted_tunnel_reaches_the_origin_over_verified_tls() {
    let s = Setup::start(READ_ONLY).await;
    let mut inner = s.inner().await;
    let answer = inner.request("GET", "/repos/acme?page=2", &[], b"").await;
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(answer.text(), s.bed.origin.body());
    let seen = s.bed.origin.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].method, "GET");
    assert_eq!(seen[0].target, "/repos/acme?page=2");
    let host = format!("secure.test:{}", s.bed.origin.port());
    assert_eq!(seen[0].header("host"), Some(host.as_str()));
    // The same tunnel serves the next request (keep-alive inside).
    let again = inner.request("GET", "/repos", &[], b"").await;
    assert_eq!(again.status, 200);
    assert_eq!(s.bed.origin.hits(), 2);
    let allowed = s
        .proxy
        .wait_audit(
            |r| r["event"] == "egress.allowed" && r["method"] == "GET",
            std::time::Duration::from_secs(5),
        )
        .await;
    assert_eq!(allowed["url"], s.url("/repos/acme?page=2"));
    assert_eq!(allowed["rule"], READ_ONLY);
}

#[tokio::test]
async fn a_post_under_read_only_is_method_not_allowed_inside_and_never_reaches_the_origin() {
    let s = Setup::start(READ_ONLY).await;
    let mut inner = s.inner().await;
    let answer = inner.request("POST", "/gists", &[], b"secret data").await;
    assert_eq!(answer.status, 403, "{answer:?}");
    assert_eq!(answer.json()["error"]["reason"], "method_not_allowed");
    assert_eq!(s.bed.origin.hits(), 0, "the origin saw the refused POST");
    let record = s.denial("method_not_allowed").await;
    assert_eq!(record["method"], "POST");
    assert_eq!(record["url"], s.url("/gists"));
    assert_eq!(record["rule"], READ_ONLY);
    assert_eq!(record["host"], "secure.test");
    // The connection stays usable: a GET after the refusal goes through.
    let after = inner.request("GET", "/", &[], b"").await;
    assert_eq!(after.status, 200);
    assert_eq!(s.bed.origin.hits(), 1);
}

#[tokio::test]
async fn a_path_outside_the_rules_is_path_not_allowed() {
    let entry =
        r#"{ host = "secure.test", methods = ["GET"], paths = ["/repos/acme/*", "/user"] }"#;
    let s = Setup::start(entry).await;
    let mut inner = s.inner().await;
    for allowed in ["/repos/acme/widgets", "/user", "/repos/acme/a/../b"] {
        let answer = inner.request("GET", allowed, &[], b"").await;
        assert_eq!(answer.status, 200, "{allowed}: {answer:?}");
    }
    for refused in [
        "/repos/other",
        "/user/keys",
        "/repos/acme",
        "/repos/acme/../other",
    ] {
        let answer = inner.request("GET", refused, &[], b"").await;
        assert_eq!(answer.status, 403, "{refused}: {answer:?}");
        assert_eq!(
            answer.json()["error"]["reason"],
            "path_not_allowed",
            "{refused}"
        );
    }
    let seen: Vec<String> = s
        .bed
        .origin
        .requests()
        .into_iter()
        .map(|r| r.target)
        .collect();
    // What the origin got is the normalised path that was judged.
    assert_eq!(seen, ["/repos/acme/widgets", "/user", "/repos/acme/b"]);
    s.denial("path_not_allowed").await;
}

#[tokio::test]
async fn path_tricks_inside_the_tunnel_fail_closed_on_the_wire() {
    let entry = r#"{ host = "secure.test", paths = ["/public/*"] }"#;
    let s = Setup::start(entry).await;
    let tricks = [
        "/public/..%2fprivate",
        "/public/%2e%2e/private",
        "/public/..%2Fprivate",
        "/public%2f..%2fprivate",
        "/public/%252e%252e/private",
        "/public//../private",
        "/public/..;/private",
        "/public/..\\private",
        "/public/%00/x",
        "/public/%5c../private",
        "/public/%ff/x",
    ];
    for trick in tricks {
        // A fresh tunnel each time: a 400 may close the connection.
        let mut inner = s.inner().await;
        let answer = inner.request("GET", trick, &[], b"").await;
        assert!(
            answer.status == 400 || answer.status == 403,
            "{trick} answered {answer:?}"
        );
    }
    for r in s.bed.origin.requests() {
        assert!(
            r.target.starts_with("/public/"),
            "forwarded outside the rules: {}",
            r.target
        );
    }
    let mut inner = s.inner().await;
    let fine = inner.request("GET", "/public/%61.txt", &[], b"").await;
    assert_eq!(
        fine.status, 200,
        "an encoded unreserved character is decoded: {fine:?}"
    );
    assert_eq!(
        s.bed.origin.requests().last().unwrap().target,
        "/public/a.txt"
    );
}

#[tokio::test]
async fn a_host_other_than_the_connect_host_is_host_mismatch() {
    let s = Setup::start(READ_ONLY).await;
    let mut inner = s.inner().await;
    let answer = inner
        .request("GET", "/", &[("Host", "elsewhere.test")], b"")
        .await;
    assert_eq!(answer.status, 403, "{answer:?}");
    assert_eq!(answer.json()["error"]["reason"], "host_mismatch");
    assert_eq!(s.bed.origin.hits(), 0);
    let record = s.denial("host_mismatch").await;
    assert_eq!(record["host"], "secure.test");
}

#[tokio::test]
async fn an_upstream_certificate_that_does_not_verify_is_a_502() {
    let bed = Testbed::start("inspect-untrusted").await;
    let org = Org::new()
        .allow_entry(READ_ONLY)
        .ports(&[bed.origin.port()])
        .loopback()
        .to_toml();
    // No --upstream-ca: the origin's self-signed certificate is in no root store.
    let proxy = ProxyBuilder::new(org)
        .policy(policy_of(READ_ONLY))
        .pin("secure.test")
        .arg("--ca")
        .arg(bed.ca.to_str().unwrap())
        .start()
        .await;
    let mut inner = bed.inner(&proxy, &[]).await;
    let answer = inner.request("GET", "/", &[], b"").await;
    assert_eq!(answer.status, 502, "{answer:?}");
    assert_eq!(bed.origin.hits(), 0, "a request went over unverified TLS");
}

#[tokio::test]
async fn the_client_side_offers_h2_and_http1() {
    let s = Setup::start(READ_ONLY).await;
    let inner = s.inner().await;
    assert_eq!(
        inner.alpn().as_deref(),
        Some(&b"http/1.1"[..]),
        "offered http/1.1 alone"
    );
    let port = s.bed.origin.port();
    for (offer, chosen) in [
        (&[&b"h2"[..], b"http/1.1"][..], &b"h2"[..]),
        (&[&b"http/1.1"[..], b"h2"][..], &b"h2"[..]),
    ] {
        let authority = format!("secure.test:{port}");
        let (answer, conn) =
            crate::support::client::connect_via_proxy(s.proxy.addr, &authority, &[]).await;
        assert_eq!(answer.status, 200);
        let trust = crate::support::tls::ca_cert(&s.bed.ca);
        let inner = Inner::handshake_offering(conn, "secure.test", trust, offer).await;
        assert_eq!(inner.alpn().as_deref(), Some(chosen), "offered {offer:?}");
    }
}

#[tokio::test]
async fn x_network_policy_on_the_connect_narrows_every_request_inside() {
    let s = Setup::start(r#"{ host = "secure.test", inspect = true }"#).await;
    let narrower =
        r#"{"type":"allowlist","allowed_domains":[{"host":"secure.test","methods":["GET"]}]}"#;
    let mut inner = s.inner_with(&[("X-Network-Policy", narrower)]).await;
    assert_eq!(inner.request("GET", "/", &[], b"").await.status, 200);
    let post = inner.request("POST", "/", &[], b"x").await;
    assert_eq!(post.status, 403, "{post:?}");
    assert_eq!(post.json()["error"]["reason"], "method_not_allowed");
    assert_eq!(
        s.denial("method_not_allowed").await["policy_level"],
        "request"
    );
    assert_eq!(s.bed.origin.hits(), 1);
    // And a header inside narrows that one request only.
    let only_docs = r#"{"type":"allowlist","allowed_domains":[{"host":"secure.test","methods":["GET"],"paths":["/docs/*"]}]}"#;
    let get = inner
        .request("GET", "/", &[("X-Network-Policy", only_docs)], b"")
        .await;
    assert_eq!(get.json()["error"]["reason"], "path_not_allowed");
    // One asking for more than the tunnel's header allows is refused whole.
    let wider = r#"{"type":"allowlist","allowed_domains":[{"host":"secure.test","methods":["GET","POST"]}]}"#;
    let widened = inner
        .request("GET", "/", &[("X-Network-Policy", wider)], b"")
        .await;
    assert_eq!(widened.json()["error"]["reason"], "policy_widening");
    assert_eq!(inner.request("GET", "/", &[], b"").await.status, 200);
}

#[tokio::test]
async fn requests_inside_an_intercepted_tunnel_pay_the_upload_budget() {
    let bed = Testbed::start("inspect-budget").await;
    let origin = &bed.origin;
    let entry = r#"{ host = "secure.test", inspect = true }"#;
    let org = Org::new()
        .allow_entry(entry)
        .ports(&[origin.port()])
        .loopback()
        .raw_line("[limits]\nupload_bytes = 400")
        .to_toml();
    let builder =
        ProxyBuilder::new(org).policy(r#"{"type":"allowlist","allowed_domains":["secure.test"]}"#);
    let proxy = bed.proxy(builder).start().await;
    let mut inner = bed.inner(&proxy, &[]).await;
    let fits = inner.request("POST", "/a", &[], b"123456").await;
    assert_eq!(fits.status, 200, "{fits:?}");
    // The first request's head and body spent some: 400 bytes no longer fit.
    let over = inner.request("POST", "/b", &[], &[b'7'; 400]).await;
    assert_eq!(over.status, 403, "{over:?}");
    assert_eq!(over.json()["error"]["reason"], "upload_budget_exceeded");
    let bodies: Vec<Vec<u8>> = origin.requests().into_iter().map(|r| r.body).collect();
    assert_eq!(
        bodies,
        [b"123456".to_vec()],
        "the origin got more than the budget"
    );
    let record = proxy
        .wait_audit(
            |r| r["reason"] == "upload_budget_exceeded",
            std::time::Duration::from_secs(5),
        )
        .await;
    assert_eq!(
        record["url"],
        format!("https://secure.test:{}/b", origin.port())
    );
}
