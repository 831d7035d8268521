//! Entries with rules on plain HTTP (docs/reference/policy-files.md, "Entries with
//! rules"): methods and paths judged on the wire, path tricks failing closed, narrowing
//! with rules in `X-Network-Policy`, and one audit record per refusal.

use serde_json::Value;

use crate::support::client::{request_bytes, send_raw, Response};
use crate::support::expect::{assert_single_denial, Denial};
use crate::support::org::{allowlist_json, Org};
use crate::support::origin::Origin;
use crate::support::proxy::{Proxy, ProxyBuilder};

const READ_ONLY: &str = r#"{ host = "x.test", access = "read-only" }"#;
const PUBLIC_ONLY: &str =
    r#"{ host = "x.test", methods = ["GET", "POST"], paths = ["/pub/*", "/about"] }"#;

fn org(entry: &str, origin: &Origin) -> Org {
    Org::new()
        .allow_entry(entry)
        .ports(&[80, 443, origin.port()])
        .loopback()
}

/// A proxy whose organization allows `entry` (inline TOML) on the origin's port, and
/// whose `--policy` is `policy` (JSON): under an entry with rules, a request level must
/// carry rules within them (a plain `x.test` would widen it).
/// Entries with rules are intercepted on `CONNECT`, so the proxy needs a CA to start.
async fn proxy_with(entry: &str, policy: &str, origin: &Origin) -> Proxy {
    let ca = crate::support::tls::ca_init(&crate::support::unique_temp_dir("rules-ca"));
    ProxyBuilder::new(org(entry, origin).to_toml())
        .policy(policy)
        .pin("x.test")
        .arg("--ca")
        .arg(ca.to_str().unwrap())
        .start()
        .await
}

fn policy(entry: Value) -> String {
    serde_json::json!({"type": "allowlist", "allowed_domains": [entry]}).to_string()
}

fn url(origin: &Origin, path: &str) -> String {
    format!("http://x.test:{}{path}", origin.port())
}

async fn send(proxy: &Proxy, method: &str, url: &str, headers: &[(&str, &str)]) -> Response {
    let body: &[u8] = if method == "POST" { b"data" } else { b"" };
    send_raw(proxy.addr, &request_bytes(method, url, headers, body)).await
}

/// The denial's record names method, url, reason and rule.
fn assert_record_names(record: &Value, method: &str, url: &str, rule: &str) {
    assert_eq!(record["method"], method, "{record}");
    assert_eq!(record["url"], url, "{record}");
    assert_eq!(record["rule"], rule, "{record}");
}

#[tokio::test]
async fn read_only_lets_get_through_and_refuses_post_before_the_origin() {
    let origin = Origin::start().await;
    let same = policy(serde_json::json!({"host": "x.test", "access": "read-only"}));
    let proxy = proxy_with(READ_ONLY, &same, &origin).await;
    let get = send(&proxy, "GET", &url(&origin, "/repo"), &[]).await;
    assert_eq!(get.status, 200, "{get:?}\n{}", proxy.diagnostics());
    let options = send(&proxy, "OPTIONS", &url(&origin, "/repo"), &[]).await;
    assert_eq!(options.status, 200, "{options:?}\n{}", proxy.diagnostics());
    let post_url = url(&origin, "/repo");
    let post = send(&proxy, "POST", &post_url, &[]).await;
    let want = Denial::new(403, "method_not_allowed")
        .at("x.test", origin.port())
        .level("org");
    let record = assert_single_denial(&post, &want, &proxy).await;
    assert_record_names(&record, "POST", &post_url, READ_ONLY);
    let methods: Vec<String> = origin.requests().into_iter().map(|r| r.method).collect();
    assert_eq!(methods, ["GET", "OPTIONS"], "the origin never saw the POST");
}

fn public_only_json() -> String {
    policy(
        serde_json::json!({"host": "x.test", "methods": ["GET", "POST"], "paths": ["/pub/*", "/about"]}),
    )
}

#[tokio::test]
async fn a_path_outside_paths_is_path_not_allowed() {
    let origin = Origin::start().await;
    let proxy = proxy_with(PUBLIC_ONLY, &public_only_json(), &origin).await;
    for path in ["/pub/a", "/about", "/pub/"] {
        let resp = send(&proxy, "GET", &url(&origin, path), &[]).await;
        assert_eq!(
            resp.status,
            200,
            "{path}: {resp:?}\n{}",
            proxy.diagnostics()
        );
    }
    let secret = url(&origin, "/secret?token=1");
    let resp = send(&proxy, "POST", &secret, &[]).await;
    let want = Denial::new(403, "path_not_allowed")
        .at("x.test", origin.port())
        .level("org");
    let record = assert_single_denial(&resp, &want, &proxy).await;
    assert_record_names(&record, "POST", &secret, PUBLIC_ONLY);
    let delete = send(&proxy, "DELETE", &url(&origin, "/pub/a"), &[]).await;
    assert_eq!(delete.header("x-egress-denied"), Some("method_not_allowed"));
    assert_eq!(origin.hits(), 3, "{:?}", origin.requests());
}

/// Every trick of the path table (crates/policy/src/path_tests.rs) on the wire: refused with
/// 400 `invalid_request` or 403 `path_not_allowed`, or forwarded as its normal form,
/// which lies inside an allowed path. One audit record per refusal.
#[tokio::test]
async fn path_tricks_fail_closed_on_the_wire() {
    let origin = Origin::start().await;
    let proxy = proxy_with(PUBLIC_ONLY, &public_only_json(), &origin).await;
    #[rustfmt::skip]
    let refused: &[(&str, u16, &str)] = &[
        ("/pub/../secret", 403, "path_not_allowed"),
        ("/pub/%2e%2e/secret", 403, "path_not_allowed"),
        ("/pub/%2E%2E/secret", 403, "path_not_allowed"),
        ("/pub/..", 403, "path_not_allowed"),
        ("/pub/a%2Fb", 400, "invalid_request"),
        ("/pub/a%2f..%2f..%2fsecret", 400, "invalid_request"),
        ("/pub/a%5C..%5Csecret", 400, "invalid_request"),
        ("/pub/a%00", 400, "invalid_request"),
        ("/pub/%252e%252e/secret", 400, "invalid_request"),
        ("/pub/%252Fsecret", 400, "invalid_request"),
        ("/pub//../secret", 400, "invalid_request"),
        ("//pub/x", 400, "invalid_request"),
        ("/pub/..;/secret", 400, "invalid_request"),
        ("/pub;x=1/a", 400, "invalid_request"),
        ("/pub/a\\..\\..\\secret", 400, "invalid_request"),
        ("/pub/%FF", 400, "invalid_request"),
        ("/../pub/a", 400, "invalid_request"),
        ("/PUB/a", 403, "path_not_allowed"),
    ];
    for (path, status, reason) in refused {
        let resp = send(&proxy, "GET", &url(&origin, path), &[]).await;
        assert_eq!(
            (resp.status, resp.header("x-egress-denied")),
            (*status, Some(*reason)),
            "{path}: {resp:?}\n{}",
            proxy.diagnostics()
        );
    }
    assert_eq!(origin.hits(), 0, "forwarded: {:?}", origin.requests());
    let records = proxy.expect_audit_count(refused.len()).await;
    for (record, (path, _, reason)) in records.iter().zip(refused) {
        assert_eq!(record["reason"], *reason, "{path}: {record}");
        assert_eq!(record["event"], "egress.denied", "{path}: {record}");
    }
    // What is forwarded is the normal form, inside the allowed path.
    let forwarded: &[(&str, &str)] = &[
        ("/pub/%61", "/pub/a"),
        ("/pub/./x/../y?q=%2F", "/pub/y?q=%2F"),
        ("/pub/%7e%41", "/pub/~A"),
        ("/pub/%c3%a9", "/pub/%C3%A9"),
    ];
    for (path, _) in forwarded {
        let resp = send(&proxy, "GET", &url(&origin, path), &[]).await;
        assert_eq!(
            resp.status,
            200,
            "{path}: {resp:?}\n{}",
            proxy.diagnostics()
        );
    }
    let targets: Vec<String> = origin.requests().into_iter().map(|r| r.target).collect();
    let want: Vec<&str> = forwarded.iter().map(|(_, seen)| *seen).collect();
    assert_eq!(targets, want);
}

#[tokio::test]
async fn x_network_policy_with_rules_narrows_one_request() {
    let origin = Origin::start().await;
    let org = org(r#""x.test""#, &origin);
    let proxy = ProxyBuilder::new(org.to_toml())
        .policy(allowlist_json(&["x.test"]))
        .pin("x.test")
        .start()
        .await;
    let header =
        policy(serde_json::json!({"host": "x.test", "methods": ["GET"], "paths": ["/pub/*"]}));
    let narrowed = [("X-Network-Policy", header.as_str())];
    let ok = send(&proxy, "GET", &url(&origin, "/pub/a"), &narrowed).await;
    assert_eq!(ok.status, 200, "{ok:?}\n{}", proxy.diagnostics());
    let post_url = url(&origin, "/pub/a");
    let post = send(&proxy, "POST", &post_url, &narrowed).await;
    let want = Denial::new(403, "method_not_allowed")
        .at("x.test", origin.port())
        .level("request");
    let record = assert_single_denial(&post, &want, &proxy).await;
    let rule = r#"{ host = "x.test", methods = ["GET"], paths = ["/pub/*"] }"#;
    assert_record_names(&record, "POST", &post_url, rule);
    // Without the header the same POST goes through: the narrowing was for that request.
    let plain = send(&proxy, "POST", &post_url, &[]).await;
    assert_eq!(plain.status, 200, "{plain:?}\n{}", proxy.diagnostics());
    let methods: Vec<String> = origin.requests().into_iter().map(|r| r.method).collect();
    assert_eq!(methods, ["GET", "POST"]);
}

#[tokio::test]
async fn a_header_entry_wider_than_the_org_entry_is_policy_widening() {
    let origin = Origin::start().await;
    let same = policy(serde_json::json!({"host": "x.test", "access": "read-only"}));
    let proxy = proxy_with(READ_ONLY, &same, &origin).await;
    let cases: &[(Value, &str)] = &[
        (serde_json::json!("x.test"), "x.test: allows methods that"),
        (
            serde_json::json!({"host": "x.test", "methods": ["GET", "POST"]}),
            "methods = [\"GET\", \"POST\"] }: allows methods that",
        ),
    ];
    let mut records = 0;
    for (entry, why) in cases {
        let header = policy(entry.clone());
        let target = url(&origin, "/");
        let resp = send(&proxy, "GET", &target, &[("X-Network-Policy", &header)]).await;
        assert_eq!(
            resp.header("x-egress-denied"),
            Some("policy_widening"),
            "{resp:?}"
        );
        assert_eq!(resp.status, 403);
        records += 1;
        let lines = proxy.expect_audit_count(records).await;
        let rule = lines[records - 1]["rule"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(rule.contains(why) && rule.contains(READ_ONLY), "{rule}");
    }
    // `inspect` is the organization's alone: in a header it is invalid_policy.
    let header = policy(serde_json::json!({"host": "x.test", "inspect": true}));
    let resp = send(
        &proxy,
        "GET",
        &url(&origin, "/"),
        &[("X-Network-Policy", &header)],
    )
    .await;
    assert_eq!(
        (resp.status, resp.header("x-egress-denied")),
        (400, Some("invalid_policy"))
    );
    let both =
        policy(serde_json::json!({"host": "x.test", "access": "read-only", "methods": ["GET"]}));
    let resp = send(
        &proxy,
        "GET",
        &url(&origin, "/"),
        &[("X-Network-Policy", &both)],
    )
    .await;
    assert_eq!(
        (resp.status, resp.header("x-egress-denied")),
        (400, Some("invalid_policy"))
    );
    proxy.expect_audit_count(records + 2).await;
    assert_eq!(origin.hits(), 0);
}

#[tokio::test]
async fn a_policy_file_wider_than_the_org_rules_refuses_to_start() {
    let origin = Origin::start().await;
    let org = org(READ_ONLY, &origin);
    let dir = std::env::temp_dir().join(format!("rules-widen-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (org_path, policy_path) = (dir.join("org.toml"), dir.join("policy.json"));
    std::fs::write(&org_path, org.to_toml()).unwrap();
    std::fs::write(&policy_path, allowlist_json(&["x.test"])).unwrap();
    let (code, stderr) = crate::support::proxy::run_expect_exit(&[
        "serve",
        "--org",
        org_path.to_str().unwrap(),
        "--policy",
        policy_path.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
    ]);
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("x.test: allows methods that"), "{stderr}");
}

/// A session's policy goes through the same compile: rules in it narrow every request
/// under its credentials, and rules wider than the organization's are a 422 naming them.
#[tokio::test]
async fn a_session_policy_with_rules_judges_its_requests() {
    let origin = Origin::start().await;
    let org = Org::new()
        .allow("x.test")
        .allow_entry(READ_ONLY.replace("x.test", "ro.test").as_str())
        .ports(&[80, 443, origin.port()])
        .loopback();
    // `ro.test` has rules: a proxy with them needs a CA to start.
    let ca = crate::support::tls::ca_init(&crate::support::unique_temp_dir("rules-ca"));
    let proxy = ProxyBuilder::new(org.to_toml())
        .admin("rules-token")
        .pin("x.test")
        .arg("--ca")
        .arg(ca.to_str().unwrap())
        .start()
        .await;
    let session = proxy
        .admin()
        .create_session(
            &serde_json::json!({"type": "allowlist", "allowed_domains": [
                {"host": "x.test", "access": "read-only"}]}),
            None,
        )
        .await;
    let auth = session.proxy_auth();
    let with_auth = [("Proxy-Authorization", auth.as_str())];
    let get = send(&proxy, "GET", &url(&origin, "/a"), &with_auth).await;
    assert_eq!(get.status, 200, "{get:?}\n{}", proxy.diagnostics());
    let post = send(&proxy, "POST", &url(&origin, "/a"), &with_auth).await;
    let want = Denial::new(403, "method_not_allowed")
        .at("x.test", origin.port())
        .level("request");
    crate::support::expect::assert_denied_response(&post, &want, &proxy);
    assert_eq!(origin.hits(), 1, "{:?}", origin.requests());
    let wider = serde_json::json!({"network_policy": {"type": "allowlist",
        "allowed_domains": ["ro.test"]}});
    let resp = proxy
        .admin()
        .call("POST", "/v1/sessions", Some(&wider.to_string()))
        .await;
    assert_eq!(resp.status, 422, "{resp:?}");
    assert!(
        resp.text().contains("ro.test: allows methods that"),
        "{}",
        resp.text()
    );
}
