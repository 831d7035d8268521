//! The Redis store only (docs/scale-out.md): the token is nowhere in Redis; a paused,
//! killed and restarted Redis gives 503 `session_store_unavailable` within the call
//! timeout and never an allow, then recovers by itself; a reload on one replica ends
//! what it no longer covers on the others; a replica on an older policy refuses a
//! session its policy does not cover.

use std::time::{Duration, Instant};

use crate::fleet::{get_as, Fleet, Kind};
use crate::support::admin::basic;
use crate::support::client::{connect_via_proxy, Response};
use crate::support::expect::{assert_denied_response, Denial};
use crate::support::org::Org;
use crate::support::proxy::Proxy;
use crate::support::sessions::allowlist;

/// `--session-store-timeout` of the fleet's replicas, and what a refusal may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a verified session is trusted without asking Redis (VERIFY_EVERY).
const CACHE: Duration = Duration::from_secs(1);

#[tokio::test]
async fn the_token_is_nowhere_in_redis() {
    let Some(fleet) = Fleet::start(Kind::Redis, "the_token_is_nowhere_in_redis", &[]).await else {
        return;
    };
    let session = fleet.create_on_a(600).await;
    let target = format!("allowed.test:{}", fleet.origin.port());
    let auth = session.proxy_auth();
    // Traffic and an open tunnel on B, so every kind of write has happened.
    assert_eq!(get_as(fleet.b(), &fleet.url(), &session).await.status, 200);
    let (resp, _tunnel) =
        connect_via_proxy(fleet.b().addr, &target, &[("Proxy-Authorization", &auth)]).await;
    assert_eq!(resp.status, 200, "{resp:?}");
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let dump = fleet.redis.as_ref().unwrap().dump();
    assert!(
        dump.iter().any(|v| v.contains(&session.id)),
        "the session is not in Redis: {dump:?}"
    );
    let encoded = basic(&session.id, &session.token);
    let encoded = encoded.trim_start_matches("Basic ");
    for value in &dump {
        assert!(
            !value.contains(&session.token),
            "the token is in Redis: {value}"
        );
        assert!(
            !value.contains(encoded),
            "the credentials are in Redis: {value}"
        );
    }
}

/// A credentialed request must be refused 503 `session_store_unavailable` within the
/// call timeout (and a margin for the machine), never allowed.
async fn assert_unavailable(proxy: &Proxy, url: &str, auth: &crate::support::admin::Created) {
    let started = Instant::now();
    let resp = get_as(proxy, url, auth).await;
    let took = started.elapsed();
    assert_denied_response(&resp, &Denial::new(503, "session_store_unavailable"), proxy);
    assert!(took < CALL_TIMEOUT * 3, "the refusal took {took:?}");
}

async fn health(proxy: &Proxy) -> u16 {
    proxy
        .admin()
        .call_as("GET", "/healthz", None, None)
        .await
        .status
}

/// Poll `probe` every 100 ms until it gives `want`, for at most `limit`; every answer
/// before must be one of `meanwhile`.
async fn until_status(
    limit: Duration,
    want: u16,
    meanwhile: &[u16],
    mut probe: impl AsyncFnMut() -> Response,
) {
    let started = Instant::now();
    loop {
        let resp = probe().await;
        if resp.status == want {
            return;
        }
        assert!(
            meanwhile.contains(&resp.status),
            "unexpected answer: {resp:?}"
        );
        assert!(
            started.elapsed() < limit,
            "no {want} within {limit:?}: last {resp:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_paused_then_restarted_store_refuses_503_never_allows_then_recovers() {
    let test = "a_paused_then_restarted_store_refuses_503_never_allows_then_recovers";
    let Some(mut fleet) = Fleet::start(Kind::Redis, test, &[]).await else {
        return;
    };
    let url = fleet.url();
    let session = fleet.create_on_a(600).await;
    for proxy in [&fleet.a, fleet.b()] {
        assert_eq!(get_as(proxy, &url, &session).await.status, 200);
    }
    let target = format!("allowed.test:{}", fleet.origin.port());
    let auth = session.proxy_auth();
    let (resp, mut tunnel) =
        connect_via_proxy(fleet.a.addr, &target, &[("Proxy-Authorization", &auth)]).await;
    assert_eq!(resp.status, 200, "{resp:?}");
    let hits = fleet.origin.hits();

    fleet.redis.as_ref().unwrap().pause();
    // Past the verified copies' lifetime, so every answer below asked Redis.
    tokio::time::sleep(CACHE + Duration::from_millis(200)).await;
    for proxy in [&fleet.a, fleet.b()] {
        assert_unavailable(proxy, &url, &session).await;
        assert_unavailable(proxy, &url, &session).await;
        assert_eq!(health(proxy).await, 503, "{}", proxy.diagnostics());
        let created = proxy
            .admin()
            .call(
                "POST",
                "/v1/sessions",
                Some(r#"{"network_policy": {"type": "disabled"}}"#),
            )
            .await;
        assert_eq!(created.status, 503, "{created:?}");
        assert_eq!(created.json()["error"]["type"], "session_store_unavailable");
    }
    fleet
        .a
        .wait_audit(
            |r| r["reason"] == "session_store_unavailable",
            Duration::from_secs(3),
        )
        .await;

    // Killed, and back empty on the same port: the old credentials are unknown, never
    // allowed, and the tunnel they opened closes.
    fleet.redis.as_mut().unwrap().restart();
    for proxy in [&fleet.a, fleet.b()] {
        let probe = async || get_as(proxy, &url, &session).await;
        until_status(Duration::from_secs(10), 407, &[503], probe).await;
        assert_eq!(health(proxy).await, 200, "{}", proxy.diagnostics());
    }
    assert!(
        tunnel.closed_by_peer().await,
        "the tunnel of a session gone from the store stayed open"
    );
    assert_eq!(
        fleet.origin.hits(),
        hits,
        "a request reached the origin during the outage"
    );

    // Recovered: a new session made on B works on A.
    let fresh = fleet
        .b()
        .admin()
        .create_session(&allowlist(&["allowed.test"]), None)
        .await;
    let resp = get_as(&fleet.a, &url, &fresh).await;
    assert_eq!(resp.status, 200, "{resp:?}\n{}", fleet.a.diagnostics());
}

#[tokio::test]
async fn a_reload_on_a_ends_what_it_no_longer_covers_on_b_and_old_b_refuses_new_sessions() {
    let test = "a_reload_on_a_ends_what_it_no_longer_covers_on_b";
    let Some(fleet) = Fleet::start(Kind::Redis, test, &[]).await else {
        return;
    };
    let port = fleet.origin.port();
    let both = allowlist(&["allowed.test", "other.test"]);
    let wide = fleet.a.admin().create_session(&both, None).await;
    let auth = wide.proxy_auth();
    let (resp, mut tunnel) = connect_via_proxy(
        fleet.b().addr,
        &format!("other.test:{port}"),
        &[("Proxy-Authorization", &auth)],
    )
    .await;
    assert_eq!(resp.status, 200, "{resp:?}");

    // A's organization drops other.test and A reloads: the session ends everywhere.
    let narrow = Org::standard(port).to_toml();
    std::fs::write(fleet.a.org_path(), narrow).unwrap();
    let reloaded = fleet.a.admin().call("POST", "/v1/reload", None).await;
    assert_eq!(reloaded.status, 200, "{reloaded:?}");
    assert_eq!(
        reloaded.json()["revoked_sessions"][0],
        wide.id.as_str(),
        "{reloaded:?}"
    );
    assert!(
        tunnel.closed_by_peer().await,
        "the revoked session's tunnel on B stayed open"
    );
    let resp = get_as(fleet.b(), &fleet.url(), &wide).await;
    assert_denied_response(&resp, &Denial::new(407, "auth_required"), fleet.b());
    fleet
        .a
        .wait_audit(|r| r["event"] == "session.revoked", Duration::from_secs(3))
        .await;

    // B still runs the wider policy: a session made there that A does not cover is
    // refused on A (policy_widening) and not ended: B keeps serving it.
    let on_b = fleet.b().admin().create_session(&both, None).await;
    let resp = get_as(&fleet.a, &fleet.url(), &on_b).await;
    assert_denied_response(&resp, &Denial::new(403, "policy_widening"), &fleet.a);
    let resp = get_as(fleet.b(), &fleet.url(), &on_b).await;
    assert_eq!(resp.status, 200, "{resp:?}");
}
