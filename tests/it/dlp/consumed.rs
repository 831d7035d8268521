//! The header fields the proxy takes for itself (docs/reference/dlp.md, "Where the proxy
//! looks"): `Proxy-Authorization` and `X-Network-Policy` are never sent on, so they are
//! not looked in. A `[[dlp.patterns]]` regex that a session's own `Proxy-Authorization`
//! matches leaves the session's requests alone, while the same value in a header field
//! that is sent on is refused `secret_detected` and never reaches the origin.

use super::detectors::dlp_records;
use crate::support::client::get_via_proxy;
use crate::support::origin::Origin;
use crate::support::sessions;

#[tokio::test]
async fn the_proxys_own_header_fields_are_not_looked_in_and_the_same_value_elsewhere_is() {
    let origin = Origin::start().await;
    // Every `Basic` credential: a session's own `Proxy-Authorization` value matches it.
    let org = sessions::org(origin.port()).raw_line(
        "[dlp]\n[[dlp.patterns]]\nname = \"basic-credentials\"\nregex = \"Basic [A-Za-z0-9+/]{24}\"",
    );
    let proxy = sessions::proxy_with(&org, &[]).await;
    let session = proxy
        .admin()
        .create_session(&sessions::allowlist(&["allowed.test"]), None)
        .await;
    let auth = session.proxy_auth();
    assert!(auth.starts_with("Basic "), "{auth}");
    let url = format!("http://allowed.test:{}/", origin.port());

    let policy = r#"{"type":"allowlist","allowed_domains":["allowed.test"]}"#;
    let own = get_via_proxy(
        proxy.addr,
        &url,
        &[("proxy-authorization", &auth), ("x-network-policy", policy)],
    )
    .await;
    assert_eq!(own.status, 200, "{}", own.text());
    assert_eq!(
        origin.hits(),
        1,
        "the request under the session went through"
    );

    let sent_on = get_via_proxy(
        proxy.addr,
        &url,
        &[("proxy-authorization", &auth), ("x-forwarded-auth", &auth)],
    )
    .await;
    assert_eq!(sent_on.status, 403, "{}", sent_on.text());
    assert_eq!(sent_on.json()["error"]["reason"], "secret_detected");
    assert_eq!(
        origin.hits(),
        1,
        "the refused request never reached the origin"
    );
    let records = dlp_records(&proxy, "egress.denied", 1).await;
    assert_eq!(records.len(), 1, "{}", proxy.diagnostics());
    assert_eq!(
        records[0]["dlp"]["id"], "basic-credentials",
        "{}",
        records[0]
    );
    assert_eq!(records[0]["dlp"]["found_in"], "header");
}
