//! Sessions across replicas (docs/scale-out.md): one suite, two stores. With
//! `--session-store redis://` the fleet is two proxy processes, A and B, on one real
//! `redis-server`; with the memory store, A and B are the same proxy, and every test
//! here must pass for it too.

pub(crate) mod budget;
pub(crate) mod loss;
pub(crate) mod narrower;
pub(crate) mod outage;
pub(crate) mod tunnels;

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::admin::Created;
use crate::support::client::{connect_via_proxy, get_via_proxy, Response};
use crate::support::expect::{assert_denied_response, Denial};
use crate::support::origin::Origin;
use crate::support::proxy::{Proxy, ProxyBuilder};
use crate::support::redis::RedisServer;
use crate::support::sessions::{allowlist, org, ADMIN_TOKEN};

/// How long after a DELETE on one replica a tunnel on another may stay open.
const REVOCATION: Duration = Duration::from_secs(2);

#[derive(Clone, Copy, Debug)]
pub(crate) enum Kind {
    Memory,
    Redis,
}

/// Two replicas (or one, twice, for the memory store) and the origin they reach.
pub(crate) struct Fleet {
    pub a: Proxy,
    b: Option<Proxy>,
    pub redis: Option<RedisServer>,
    pub origin: Origin,
}

impl Fleet {
    /// `None` (the reason printed) for Redis when `redis-server` is missing.
    pub(crate) async fn start(kind: Kind, test: &str, extra: &[&str]) -> Option<Fleet> {
        let origin = Origin::start().await;
        let redis = match kind {
            Kind::Memory => None,
            Kind::Redis => Some(RedisServer::start(test)?),
        };
        let a = replica(&origin, redis.as_ref(), extra).await;
        let b = match &redis {
            Some(_) => Some(replica(&origin, redis.as_ref(), extra).await),
            None => None,
        };
        Some(Fleet {
            a,
            b,
            redis,
            origin,
        })
    }

    pub(crate) fn b(&self) -> &Proxy {
        self.b.as_ref().unwrap_or(&self.a)
    }

    pub(crate) fn url(&self) -> String {
        format!("http://allowed.test:{}/", self.origin.port())
    }

    pub(crate) async fn create_on_a(&self, idle: u64) -> Created {
        self.a
            .admin()
            .create_session(&allowlist(&["allowed.test"]), Some(idle))
            .await
    }
}

/// One replica: the admin API, and the shared store when there is one.
pub(crate) async fn replica(origin: &Origin, redis: Option<&RedisServer>, extra: &[&str]) -> Proxy {
    replica_for(origin.port(), redis, extra).await
}

/// [`replica`] for an origin of any kind listening on `port` (a raw TCP one for tunnels).
pub(crate) async fn replica_for(port: u16, redis: Option<&RedisServer>, extra: &[&str]) -> Proxy {
    let mut builder = ProxyBuilder::new(org(port).to_toml())
        .pin("allowed.test")
        .pin("other.test")
        .admin(ADMIN_TOKEN);
    if let Some(redis) = redis {
        builder = builder
            .arg("--session-store")
            .arg(&redis.url())
            .arg("--session-store-timeout")
            .arg("1");
    }
    for arg in extra {
        builder = builder.arg(arg);
    }
    builder.start().await
}

/// `GET url` through `proxy` with the session's credentials.
pub(crate) async fn get_as(proxy: &Proxy, url: &str, session: &Created) -> Response {
    let auth = session.proxy_auth();
    get_via_proxy(proxy.addr, url, &[("Proxy-Authorization", &auth)]).await
}

/// Run a test for both stores.
macro_rules! both_stores {
    ($name:ident) => {
        mod $name {
            #[tokio::test]
            async fn memory() {
                super::$name(super::Kind::Memory, concat!(stringify!($name), "::memory")).await
            }
            #[tokio::test]
            async fn redis() {
                super::$name(super::Kind::Redis, concat!(stringify!($name), "::redis")).await
            }
        }
    };
}

both_stores!(a_session_made_on_a_works_on_b);
async fn a_session_made_on_a_works_on_b(kind: Kind, test: &str) {
    let Some(fleet) = Fleet::start(kind, test, &[]).await else {
        return;
    };
    let session = fleet.create_on_a(600).await;
    let resp = get_as(fleet.b(), &fleet.url(), &session).await;
    assert_eq!(resp.status, 200, "{resp:?}\n{}", fleet.b().diagnostics());
    assert_eq!(fleet.origin.hits(), 1);
    // B judges by the session's policy: other.test is not in it.
    let other = format!("http://other.test:{}/", fleet.origin.port());
    let resp = get_as(fleet.b(), &other, &session).await;
    assert_denied_response(&resp, &Denial::new(403, "not_in_request_policy"), fleet.b());
    let wrong = Created {
        token: "0".repeat(64),
        ..session.clone()
    };
    let resp = get_as(fleet.b(), &fleet.url(), &wrong).await;
    assert_denied_response(&resp, &Denial::new(407, "auth_required"), fleet.b());
    let path = format!("/v1/sessions/{}", session.id);
    let view = fleet.b().admin().call("GET", &path, None).await;
    assert_eq!(view.status, 200, "{view:?}");
    assert_eq!(view.json()["label"], "it");
    assert!(view.json().get("token").is_none(), "{view:?}");
    let listed: Value = fleet
        .b()
        .admin()
        .call("GET", "/v1/sessions", None)
        .await
        .json();
    assert_eq!(listed["sessions"][0]["id"], session.id.as_str(), "{listed}");
    assert_eq!(
        fleet.origin.hits(),
        1,
        "only the allowed request reached the origin"
    );
}

both_stores!(delete_on_b_closes_a_tunnel_open_on_a_within_2s);
async fn delete_on_b_closes_a_tunnel_open_on_a_within_2s(kind: Kind, test: &str) {
    let Some(fleet) = Fleet::start(kind, test, &[]).await else {
        return;
    };
    let session = fleet.create_on_a(600).await;
    let target = format!("allowed.test:{}", fleet.origin.port());
    let auth = session.proxy_auth();
    let (resp, mut tunnel) =
        connect_via_proxy(fleet.a.addr, &target, &[("Proxy-Authorization", &auth)]).await;
    assert_eq!(resp.status, 200, "{resp:?}\n{}", fleet.a.diagnostics());
    let path = format!("/v1/sessions/{}", session.id);
    let deleted_at = Instant::now();
    assert_eq!(
        fleet.b().admin().call("DELETE", &path, None).await.status,
        204
    );
    assert!(tunnel.closed_by_peer().await, "the tunnel on A stayed open");
    let took = deleted_at.elapsed();
    assert!(
        took < REVOCATION,
        "the tunnel on A closed {took:?} after the DELETE on B"
    );
    let resp = get_as(&fleet.a, &fleet.url(), &session).await;
    assert_denied_response(&resp, &Denial::new(407, "auth_required"), &fleet.a);
    assert_eq!(fleet.a.admin().call("GET", &path, None).await.status, 404);
    assert_eq!(
        fleet.b().admin().call("DELETE", &path, None).await.status,
        404
    );
}

both_stores!(traffic_only_on_b_keeps_the_session_alive_for_a);
async fn traffic_only_on_b_keeps_the_session_alive_for_a(kind: Kind, test: &str) {
    let Some(fleet) = Fleet::start(kind, test, &[]).await else {
        return;
    };
    let session = fleet.create_on_a(2).await;
    // Traffic on B for well over the idle timeout, none on A.
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        let resp = get_as(fleet.b(), &fleet.url(), &session).await;
        assert_eq!(resp.status, 200, "{resp:?}\n{}", fleet.b().diagnostics());
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let resp = get_as(&fleet.a, &fleet.url(), &session).await;
    assert_eq!(
        resp.status,
        200,
        "B's traffic did not keep the session alive for A: {resp:?}\n{}",
        fleet.a.diagnostics()
    );
    // Then no traffic anywhere: it expires for both.
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    for proxy in [&fleet.a, fleet.b()] {
        let resp = get_as(proxy, &fleet.url(), &session).await;
        assert_denied_response(&resp, &Denial::new(407, "auth_required"), proxy);
    }
}
