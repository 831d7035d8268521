//! The admin listener's start-up checks (docs/reference/control-plane.md) and its
//! address, which is one of the proxy's own and never a destination.

use crate::support::client::connect_via_proxy;
use crate::support::expect::{assert_denied_response, Denial};
use crate::support::org::Org;
use crate::support::proxy::{run_expect_exit, ProxyBuilder};
use crate::support::unique_temp_dir;

#[tokio::test]
async fn admin_address_is_never_a_destination() {
    // A port the admin API can take: reserved, then released for the proxy.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let org = Org::standard(port).default_policy(
        r#"{ type = "allowlist", allowed_domains = ["allowed.test"], allowed_cidrs = ["127.0.0.0/8"] }"#,
    );
    let admin = format!("127.0.0.1:{port}");
    let proxy = ProxyBuilder::new(org.to_toml())
        .pin("allowed.test")
        .arg("--admin-listen")
        .arg(&admin)
        .start()
        .await;
    let (resp, _conn) = connect_via_proxy(proxy.addr, &admin, &[]).await;
    let want = Denial::new(403, "private_address").level("address");
    assert_denied_response(&resp, &want, &proxy);
}

#[tokio::test]
async fn admin_listener_refuses_unsafe_starts() {
    let dir = unique_temp_dir("admin-start");
    let org_path = dir.join("org.toml");
    std::fs::write(&org_path, Org::standard(80).to_toml()).unwrap();
    let empty = dir.join("empty-token");
    std::fs::write(&empty, " \n").unwrap();
    let org = org_path.to_str().unwrap();
    let base = [
        "serve",
        "--org",
        org,
        "--listen",
        "127.0.0.1:0",
        "--resolve",
        "a.test=127.0.0.1",
    ];
    let cases: Vec<Vec<&str>> = vec![
        vec!["--admin-listen", "0.0.0.0:0"],
        vec!["--require-session"],
        vec!["--admin-token-file", empty.to_str().unwrap()],
        vec![
            "--admin-listen",
            "127.0.0.1:0",
            "--admin-token-file",
            empty.to_str().unwrap(),
        ],
    ];
    for extra in cases {
        let args: Vec<&str> = base.iter().copied().chain(extra.iter().copied()).collect();
        let (code, stderr) = run_expect_exit(&args);
        assert_eq!(code, Some(2), "{extra:?}: {stderr}");
        assert!(stderr.contains("admin"), "{extra:?}: {stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
