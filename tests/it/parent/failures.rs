//! When the parent fails: a dead parent and a parent that refuses (its own 407) are
//! 502s whose `detail` says what the parent did; flags that cannot work stop the start.

use std::process::Command;

use crate::support::client::{connect_via_proxy, get_via_proxy};
use crate::support::org::{allowlist_json, Org};
use crate::support::origin::Origin;
use crate::support::proxy::{binary, free_port, ProxyBuilder};
use crate::support::squid::{require_squid, Squid};

#[tokio::test]
async fn a_dead_parent_is_a_502_naming_it_for_requests_and_tunnels() {
    let origin = Origin::start().await;
    let dead = free_port("127.0.0.1".parse().unwrap());
    let proxy = ProxyBuilder::standard(origin.port())
        .arg("--upstream-proxy")
        .arg(&format!("http://{dead}"))
        .start()
        .await;
    let authority = format!("allowed.test:{}", origin.port());
    let resp = get_via_proxy(proxy.addr, &format!("http://{authority}/"), &[]).await;
    assert_eq!(resp.status, 502, "{resp:?}");
    let error = &resp.json()["error"];
    assert_eq!(error["type"], "upstream_error");
    let detail = error["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains(&format!("cannot connect to the parent proxy {dead}")),
        "{error}"
    );
    let (resp, _) = connect_via_proxy(proxy.addr, &authority, &[]).await;
    assert_eq!(resp.status, 502, "{resp:?}");
    assert!(resp.json()["error"]["detail"]
        .as_str()
        .unwrap_or_default()
        .contains("parent proxy"));
    assert_eq!(origin.hits(), 0, "nothing went around the parent");
    // The same proxy without the parent reaches the origin: the probe works.
    let direct = ProxyBuilder::standard(origin.port()).start().await;
    let resp = get_via_proxy(direct.addr, &format!("http://{authority}/"), &[]).await;
    assert_eq!(resp.status, 200);
}

#[tokio::test]
async fn a_parent_that_refuses_is_a_502_with_its_status_in_detail() {
    require_squid!();
    let origin = Origin::start().await;
    // Squid asks for credentials, and this proxy gives none.
    let squid = Squid::start(true, &["allowed.test"]);
    let proxy = ProxyBuilder::standard(origin.port())
        .arg("--upstream-proxy")
        .arg(&squid.url(None))
        .start()
        .await;
    let authority = format!("allowed.test:{}", origin.port());
    let (resp, _) = connect_via_proxy(proxy.addr, &authority, &[]).await;
    assert_eq!(resp.status, 502, "{resp:?}");
    let detail = resp.json()["error"]["detail"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(detail.contains("answered 407"), "{detail}");
    let resp = get_via_proxy(proxy.addr, &format!("http://{authority}/"), &[]).await;
    assert_eq!(resp.status, 502, "{resp:?}");
    let detail = resp.json()["error"]["detail"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(detail.contains("answered 407"), "{detail}");
    assert_eq!(origin.hits(), 0);
    squid.wait_logged(|l| l.status == 407).await;
}

#[tokio::test]
async fn a_parent_url_that_cannot_work_stops_the_start_with_a_clear_error() {
    let dir = crate::support::unique_temp_dir("parent-flags");
    let org = dir.join("org.toml");
    std::fs::write(&org, Org::standard(80).to_toml()).unwrap();
    let policy = dir.join("policy.json");
    std::fs::write(&policy, allowlist_json(&["allowed.test"])).unwrap();
    for (flags, says) in [
        (
            vec!["--upstream-proxy", "https://127.0.0.1:3129"],
            "only http://",
        ),
        (
            vec!["--upstream-proxy", "127.0.0.1:3129"],
            "http://[USER:PASS@]HOST:PORT",
        ),
        (vec!["--upstream-proxy", "http://127.0.0.1"], "port"),
        (
            vec![
                "--upstream-proxy",
                "http://127.0.0.1:3129",
                "--upstream-no-proxy",
                "*",
            ],
            "--upstream-no-proxy",
        ),
        (vec!["--upstream-proxy-by-address"], "--upstream-proxy"),
    ] {
        let out = Command::new(binary())
            .arg("serve")
            .arg("--org")
            .arg(&org)
            .args(["--listen", "127.0.0.1:0"])
            .args(&flags)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {stderr}");
        assert!(stderr.contains(says), "{flags:?}: {stderr}");
    }
}

#[tokio::test]
async fn the_parent_is_dialed_without_the_address_guard_but_origins_are_not() {
    require_squid!();
    // The org opens 127.0.0.2 only: the parent on 127.0.0.1 is still reached (it is the
    // operator's), and a name that resolves to 127.0.0.1 is still refused.
    let origin = Origin::start_at("origin", "127.0.0.2:0".parse().unwrap())
        .await
        .unwrap();
    let squid = Squid::start(false, &[]);
    let org = Org::new()
        .allow("allowed.test")
        .allow("other.test")
        .ports(&[origin.port()])
        .cidr("127.0.0.2/32")
        .to_toml();
    let proxy = ProxyBuilder::new(org)
        .policy(allowlist_json(&["allowed.test", "other.test"]))
        .pin_to("allowed.test", "127.0.0.2")
        .pin_to("other.test", "127.0.0.1")
        .arg("--upstream-proxy")
        .arg(&squid.url(None))
        .arg("--upstream-proxy-by-address")
        .start()
        .await;
    let refused = format!("http://other.test:{}/", origin.port());
    let resp = get_via_proxy(proxy.addr, &refused, &[]).await;
    assert_eq!(resp.status, 403, "{resp:?}");
    assert_eq!(resp.header("x-egress-denied"), Some("private_address"));
    let allowed = format!("http://allowed.test:{}/", origin.port());
    let resp = get_via_proxy(proxy.addr, &allowed, &[]).await;
    assert_eq!(resp.status, 200, "{resp:?}\n{}", squid.diagnostics());
    assert_eq!(origin.hits(), 1);
    let line = squid.wait_logged(|l| l.method == "GET").await;
    assert_eq!(line.target, format!("http://127.0.0.2:{}/", origin.port()));
    assert_eq!(squid.logged().len(), 1, "{:#?}", squid.logged());
}
