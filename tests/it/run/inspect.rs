//! Inspected hosts inside the jail (docs/reference/confinement.md, "Inspected hosts"):
//! CMD's TLS clients trust a bundle of the system roots plus the proxy's CA, so an
//! intercepted tunnel works whether CMD uses the proxy or ignores it, and the CA's key
//! is out of CMD's reach.

use super::{require_jail, Jailed};
use crate::support::org::Org;
use crate::support::origin::HttpsOrigin;
use crate::support::tls::{ca_init, write_pem};
use crate::support::unique_temp_dir;

const READ_ONLY: &str = r#"{ host = "secure.test", access = "read-only" }"#;

/// A jail whose policy inspects `secure.test` read-only, trusting the origin upstream.
fn jailed(origin: &HttpsOrigin) -> Jailed {
    let dir = unique_temp_dir("run-inspect");
    let upstream_ca = dir.join("origin.pem");
    write_pem(&upstream_ca, &origin.cert_der());
    let org = Org::new()
        .allow_entry(READ_ONLY)
        .ports(&[origin.port()])
        .loopback()
        .to_toml();
    let policy =
        r#"{"type":"allowlist","allowed_domains":[{"host":"secure.test","access":"read-only"}]}"#;
    Jailed::new(org)
        .policy(policy)
        .arg("--resolve")
        .arg("secure.test=127.0.0.1")
        .arg("--upstream-ca")
        .arg(upstream_ca)
        .arg("--audit-allowed")
}

#[tokio::test]
async fn an_inspected_host_works_in_the_jail_with_a_throw_away_ca_by_proxy_and_transparently() {
    require_jail!();
    let origin = HttpsOrigin::start().await;
    let url = format!("https://secure.test:{}/docs", origin.port());
    // curl reads CURL_CA_BUNDLE; every variable names the same bundle.
    let script = format!(
        r#"
for v in SSL_CERT_FILE REQUESTS_CA_BUNDLE CURL_CA_BUNDLE NODE_EXTRA_CA_CERTS GIT_SSL_CAINFO PIP_CERT; do
  eval echo "$v=\$$v"
done
echo "proxied: $(curl -sS {url})"
echo "posted: $(curl -sS -o /dev/null -w '%{{http_code}}' -X POST -d x {url})"
echo "direct: $(curl -sS --noproxy '*' {url})"
echo "ca-env: ${{EGRESS_PROXY_JAIL_CA:-unset}}"
"#
    );
    let out = jailed(&origin).sh(&script).await;
    assert_eq!(out.code(), Some(0), "{out}");
    for var in [
        "SSL_CERT_FILE",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "NODE_EXTRA_CA_CERTS",
        "GIT_SSL_CAINFO",
        "PIP_CERT",
    ] {
        let line = format!("{var}=/run/egress-proxy/ca-bundle.pem");
        assert!(out.stdout.contains(&line), "{var} is not the bundle: {out}");
    }
    assert!(out.stdout.contains("proxied: origin:secure"), "{out}");
    assert!(out.stdout.contains("posted: 403"), "{out}");
    assert!(out.stdout.contains("direct: origin:secure"), "{out}");
    assert!(
        out.stdout.contains("ca-env: unset"),
        "the CA's variable leaked to CMD: {out}"
    );
    let refused = out
        .audit
        .iter()
        .find(|r| r["reason"] == "method_not_allowed")
        .unwrap_or_else(|| panic!("no record of the refused POST: {out}"));
    assert_eq!(refused["method"], "POST", "{out}");
    // Two GETs reached the origin (proxied and transparent); the POST did not.
    let methods: Vec<String> = origin.requests().into_iter().map(|r| r.method).collect();
    assert_eq!(methods, ["GET", "GET"], "{out}");
    assert!(
        out.audit.iter().any(|r| r["via"] == "transparent"),
        "the direct request was not taken transparently: {out}"
    );
}

#[tokio::test]
async fn a_ca_given_to_run_keeps_its_key_out_of_cmds_reach_even_as_root() {
    require_jail!();
    let origin = HttpsOrigin::start().await;
    let ca = ca_init(&unique_temp_dir("run-ca"));
    let key = ca.join("ca-key.pem");
    // Readable from outside: the probe below can tell a hidden key from a missing one.
    assert!(std::fs::metadata(&key).unwrap().len() > 100);
    // The bundle ends with the CA's certificate: its last base64 line is in both. (The
    // whole CA directory is covered in the jail: the line comes from outside.)
    let cert = std::fs::read_to_string(ca.join("ca.pem")).unwrap();
    let last = cert.lines().rev().nth(1).unwrap();
    let script = format!(
        "echo key=$(cat {key} 2>/dev/null | wc -c); \
         grep -qF '{last}' \"$SSL_CERT_FILE\" && echo bundle-ok",
        key = key.display(),
    );
    let out = jailed(&origin).arg("--ca").arg(&ca).sh(&script).await;
    assert_eq!(out.code(), Some(0), "{out}");
    assert!(out.stdout.contains("key=0"), "CMD read the CA's key: {out}");
    assert!(
        out.stdout.contains("bundle-ok"),
        "the bundle lacks the CA: {out}"
    );
}

/// The attack of docs/reference/inspection.md, "Credentials", from inside the jail: CMD
/// ignores the proxy and speaks plain HTTP to the credential's host (the transparent
/// listener takes it); the origin never gets the credential, nor CMD's own header of
/// that name. The same host over TLS, intercepted, does get it.
#[tokio::test]
async fn a_credential_never_leaves_the_jail_in_plain_http_and_does_over_inspected_tls() {
    require_jail!();
    const SECRET: &str = "Bearer egress-it-jail-credential-77c1";
    let plain = crate::support::origin::Origin::start_named("plain").await;
    let origin = HttpsOrigin::start().await;
    let dir = unique_temp_dir("run-credentials");
    let upstream_ca = dir.join("origin.pem");
    write_pem(&upstream_ca, &origin.cert_der());
    let secret = dir.join("token");
    std::fs::write(&secret, format!("{SECRET}\n")).unwrap();
    let org = Org::new()
        .allow_entry(r#"{ host = "secure.test", inspect = true }"#)
        .ports(&[plain.port(), origin.port()])
        .loopback()
        .raw_line(&format!(
            "[[credentials]]\nhost = \"secure.test\"\nheader = \"Authorization\"\nvalue_file = {:?}",
            secret.to_str().unwrap()
        ))
        .to_toml();
    let script = format!(
        "echo \"plain: $(curl -sS --noproxy '*' -H 'Authorization: Bearer cmd-own' http://secure.test:{}/)\"\n\
         echo \"tls: $(curl -sS --noproxy '*' https://secure.test:{}/)\"\n",
        plain.port(),
        origin.port()
    );
    let out = Jailed::new(org)
        .policy(r#"{"type":"allowlist","allowed_domains":["secure.test"]}"#)
        .arg("--resolve")
        .arg("secure.test=127.0.0.1")
        .arg("--upstream-ca")
        .arg(upstream_ca)
        .arg("--audit-allowed")
        .sh(&script)
        .await;
    assert!(out.stdout.contains("plain: origin:plain"), "{out}");
    assert!(out.stdout.contains("tls: origin:secure"), "{out}");
    let seen = plain.requests();
    assert_eq!(seen.len(), 1, "{out}");
    assert_eq!(
        seen[0].header_all("authorization"),
        Vec::<&str>::new(),
        "{out}"
    );
    assert_eq!(origin.requests()[0].header_all("authorization"), [SECRET]);
    let plain_record = out
        .audit
        .iter()
        .find(|r| r["via"] == "transparent" && r["port"] == plain.port())
        .unwrap_or_else(|| panic!("the plain request was not taken transparently: {out}"));
    assert_eq!(plain_record["method"], "GET", "{out}");
}
