//! `[[credentials]]` only inside TLS (docs/reference/inspection.md, "Credentials"): the
//! header is set on requests forwarded over TLS to its host, never on one forwarded in
//! plain HTTP (which loses the client's own header of that name too), and `lint` warns
//! `credential-plain-http` where the host is allowed on a port that may carry plain HTTP.

use std::net::SocketAddr;

use serde_json::Value;

use crate::support::client::get_via_proxy;
use crate::support::org::Org;
use crate::support::origin::Origin;
use crate::support::proxy::ProxyBuilder;
use crate::support::tls::Testbed;

/// The credential the organization gives `secure.test`.
const SECRET: &str = "Bearer egress-it-plain-credential-0b7a";

/// A plain origin on port 80 where it can bind (as root, or where unprivileged ports
/// start low), else on any port: the rule does not depend on the number.
async fn plain_origin() -> Origin {
    let eighty: SocketAddr = "127.0.0.1:80".parse().unwrap();
    match Origin::start_at("plain", eighty).await {
        Ok(origin) => origin,
        Err(_) => Origin::start_named("plain").await,
    }
}

/// The organization file: `secure.test` inspected, allowed on 443 and `ports`, with its
/// credential read from `secret`.
fn org_with_credential(ports: &[u16], secret: &std::path::Path) -> String {
    Org::new()
        .allow_entry(r#"{ host = "secure.test", inspect = true }"#)
        .ports(ports)
        .loopback()
        .raw_line(&format!(
            "[[credentials]]\nhost = \"secure.test\"\nheader = \"Authorization\"\nvalue_file = {:?}",
            secret.to_str().unwrap()
        ))
        .to_toml()
}

#[tokio::test]
async fn a_credential_never_goes_in_plain_http_and_goes_over_inspected_tls() {
    let plain = plain_origin().await;
    let bed = Testbed::start("credentials-plain").await;
    let secret = bed.dir.join("token");
    std::fs::write(&secret, format!("{SECRET}\n")).unwrap();
    let ports = [443, plain.port(), bed.origin.port()];
    let policy = r#"{"type":"allowlist","allowed_domains":["secure.test"]}"#;
    let builder = ProxyBuilder::new(org_with_credential(&ports, &secret)).policy(policy);
    let proxy = bed.proxy(builder).start().await;
    // Plain HTTP to the host (`curl -x PROXY http://secure.test/`): never the
    // credential, and the client's own Authorization is gone as well.
    let url = match plain.port() {
        80 => "http://secure.test/".to_string(),
        port => format!("http://secure.test:{port}/"),
    };
    let bare = get_via_proxy(proxy.addr, &url, &[]).await;
    assert_eq!(bare.status, 200, "{bare:?}\n{}", proxy.diagnostics());
    let own = [("Authorization", "Bearer the-sandbox-own")];
    let with_own = get_via_proxy(proxy.addr, &url, &own).await;
    assert_eq!(with_own.status, 200, "{with_own:?}");
    let seen = plain.requests();
    assert_eq!(seen.len(), 2, "{seen:?}");
    for request in &seen {
        assert_eq!(
            request.header_all("authorization"),
            Vec::<&str>::new(),
            "plain HTTP carried an Authorization header: {request:?}"
        );
    }
    // The same host through an intercepted tunnel: upstream over TLS, with it.
    let mut inner = bed.inner(&proxy, &[]).await;
    let answer = inner.request("GET", "/user", &own, b"").await;
    assert_eq!(answer.status, 200, "{answer:?}");
    let tls_seen = bed.origin.requests();
    assert_eq!(tls_seen[0].header_all("authorization"), [SECRET]);
}

/// `lint` on an organization file in `dir`; the `credential-plain-http` findings.
fn lint_findings(dir: &std::path::Path, org: &str) -> (i32, Vec<Value>) {
    let path = dir.join("org.toml");
    std::fs::write(&path, org).unwrap();
    let out = std::process::Command::new(crate::support::proxy::binary())
        .args(["lint", "--format", "json", "--deny-warnings"])
        .arg(&path)
        .output()
        .expect("run lint");
    let doc: Value = serde_json::from_slice(&out.stdout).expect("lint JSON");
    let found = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["rule"] == "credential-plain-http")
        .cloned()
        .collect();
    (out.status.code().unwrap(), found)
}

#[test]
fn lint_warns_when_a_credential_host_is_allowed_on_a_plain_http_port() {
    let dir = crate::support::unique_temp_dir("credentials-lint");
    let secret = dir.join("token");
    // The proxy's own policy of the test above: open on 80 (or its port) and 443.
    let (code, found) = lint_findings(&dir, &org_with_credential(&[80, 443], &secret));
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0]["severity"], "warning");
    let message = found[0]["message"].as_str().unwrap();
    assert!(message.contains("port 80"), "{message}");
    assert!(message.contains("authorization"), "{message}");
    assert!(!message.contains("443,"), "443 is the TLS port: {message}");
    assert_eq!(code, 1, "a warning under --deny-warnings");
    // The host only on inspected 443: nothing to say.
    let only_tls = Org::new()
        .allow_entry(r#"{ host = "secure.test:443", inspect = true }"#)
        .allow("other.test")
        .ports(&[80, 443])
        .raw_line(&format!(
            "[[credentials]]\nhost = \"secure.test\"\nheader = \"Authorization\"\nvalue_file = {:?}",
            secret.to_str().unwrap()
        ))
        .to_toml();
    let (code, found) = lint_findings(&dir, &only_tls);
    assert_eq!(found, Vec::<Value>::new());
    assert_eq!(code, 0);
}

#[test]
fn a_credential_host_on_443_without_inspection_is_still_a_load_error() {
    let dir = crate::support::unique_temp_dir("credentials-load");
    let org = dir.join("org.toml");
    let toml = Org::new()
        .allow("secure.test")
        .ports(&[80, 443])
        .raw_line("[[credentials]]\nhost = \"secure.test\"\nheader = \"Authorization\"\nvalue_file = \"token\"")
        .to_toml();
    std::fs::write(&org, toml).unwrap();
    let (code, stderr) = crate::support::proxy::run_expect_exit(&[
        "check",
        "--org",
        org.to_str().unwrap(),
        "secure.test:443",
    ]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("without inspection"), "{stderr}");
    // And a host no entry allows.
    let toml = Org::new()
        .allow("other.test")
        .raw_line("[[credentials]]\nhost = \"secure.test\"\nheader = \"Authorization\"\nvalue_file = \"token\"")
        .to_toml();
    std::fs::write(&org, toml).unwrap();
    let (code, stderr) = crate::support::proxy::run_expect_exit(&[
        "check",
        "--org",
        org.to_str().unwrap(),
        "other.test:443",
    ]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("no allowed_domains entry allows it"),
        "{stderr}"
    );
}
