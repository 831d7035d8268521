//! Idle sessions and their tunnels (docs/reference/control-plane.md, "Ending"): a
//! session's traffic is its requests and the bytes its tunnels relay, either way. A
//! tunnel that relays nothing does not keep its session alive: the session expires after
//! its idle timeout and the tunnel closes, for the client and for the origin. A tunnel
//! relaying a few bytes every [`BEAT`], from the client or from the origin only, keeps
//! it alive well past the timeout. On one proxy (memory store), and on two replicas
//! sharing a real `redis-server`, where bytes on A keep the session alive on B and a
//! silent tunnel on A lets it end on both.

mod tunnel_origin;

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::fleet::replica_for;
use crate::support::admin::Created;
use crate::support::client::{connect_via_proxy, Response};
use crate::support::expect::{assert_denied_response, Denial};
use crate::support::org::Org;
use crate::support::proxy::{Proxy, ProxyBuilder};
use crate::support::redis::RedisServer;
use crate::support::sessions::{allowlist, org, proxy_with, ADMIN_TOKEN};
use crate::support::tls::Testbed;
use tunnel_origin::TunnelOrigin;

/// The sessions' idle timeout, in seconds.
const IDLE: u64 = 2;
/// How often a relaying tunnel carries a byte.
const BEAT: Duration = Duration::from_millis(300);
/// How long a relaying tunnel is kept at it: well past the idle timeout.
const BUSY_FOR: Duration = Duration::from_millis(2_500 * IDLE);
/// From a silent tunnel's opening, by when its session must have ended everywhere.
const ENDED_WITHIN: Duration = Duration::from_secs(IDLE + 3);
/// Once the session has ended, how long the origin may still hold the tunnel.
const CLOSED_WITHIN: Duration = Duration::from_secs(3);

/// A proxy, or two replicas on one Redis, and the tunnels' origin.
struct Setup {
    a: Proxy,
    b: Option<Proxy>,
    _redis: Option<RedisServer>,
    origin: TunnelOrigin,
}

impl Setup {
    /// One proxy with the memory store.
    async fn single(talks: bool) -> Setup {
        let origin = TunnelOrigin::start(talks).await;
        let a = proxy_with(&org(origin.port), &[]).await;
        Setup {
            a,
            b: None,
            _redis: None,
            origin,
        }
    }

    /// Two replicas sharing a `redis-server`; `None` (the reason printed) without one.
    async fn fleet(test: &str, talks: bool) -> Option<Setup> {
        let redis = RedisServer::start(test)?;
        let origin = TunnelOrigin::start(talks).await;
        let a = replica_for(origin.port, Some(&redis), &[]).await;
        let b = replica_for(origin.port, Some(&redis), &[]).await;
        Some(Setup {
            a,
            b: Some(b),
            _redis: Some(redis),
            origin,
        })
    }

    /// Every replica, A first.
    fn replicas(&self) -> Vec<&Proxy> {
        std::iter::once(&self.a).chain(self.b.as_ref()).collect()
    }

    /// The replica the session is checked on: B, or the one proxy.
    fn other(&self) -> &Proxy {
        self.b.as_ref().unwrap_or(&self.a)
    }

    /// A session on A, and a tunnel to the origin through A with its credentials.
    async fn tunnel(&self) -> (Created, TcpStream) {
        let session = self
            .a
            .admin()
            .create_session(&allowlist(&["allowed.test"]), Some(IDLE))
            .await;
        let (resp, conn) = self.connect(&self.a, &session).await;
        assert_eq!(resp.status, 200, "{resp:?}\n{}", self.a.diagnostics());
        (session, conn.into_stream())
    }

    /// `CONNECT` to the origin through `proxy` with the session's credentials.
    async fn connect(
        &self,
        proxy: &Proxy,
        session: &Created,
    ) -> (Response, crate::support::client::Conn) {
        let target = format!("allowed.test:{}", self.origin.port);
        let auth = session.proxy_auth();
        connect_via_proxy(proxy.addr, &target, &[("Proxy-Authorization", &auth)]).await
    }
}

/// `GET /v1/sessions/{id}` on `proxy`: its status.
async fn status_of(proxy: &Proxy, session: &Created) -> u16 {
    let path = format!("/v1/sessions/{}", session.id);
    proxy.admin().call("GET", &path, None).await.status
}

/// Wait (polling, until `deadline`) for `GET /v1/sessions/{id}` on `proxy` to be 404.
async fn gone_by(proxy: &Proxy, session: &Created, deadline: Instant) -> bool {
    for _ in 0..200 {
        if status_of(proxy, session).await == 404 {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// Whether the proxy closed `stream` within `limit` (EOF or reset; stray bytes skipped).
async fn closed_within(stream: &mut TcpStream, limit: Duration) -> bool {
    let mut buf = [0u8; 256];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

/// A tunnel that relays nothing: the session ends on every replica after its idle
/// timeout, the client and the origin see the tunnel close, and its credentials are
/// refused everywhere.
async fn a_silent_tunnel_lets_its_session_expire(setup: Setup) {
    let (session, mut tunnel) = setup.tunnel().await;
    let deadline = Instant::now() + ENDED_WITHIN;
    for proxy in setup.replicas() {
        assert_eq!(status_of(proxy, &session).await, 200, "the session is live");
    }
    for proxy in setup.replicas() {
        assert!(
            gone_by(proxy, &session, deadline).await,
            "a session whose only tunnel is silent did not expire\n{}",
            proxy.diagnostics()
        );
    }
    assert!(
        closed_within(&mut tunnel, CLOSED_WITHIN).await,
        "the expired session's tunnel stayed open for the client\n{}",
        setup.a.diagnostics()
    );
    assert!(
        setup.origin.closed_within(CLOSED_WITHIN).await,
        "the origin still holds the expired session's tunnel"
    );
    for proxy in setup.replicas() {
        let (resp, _) = setup.connect(proxy, &session).await;
        assert_denied_response(&resp, &Denial::new(407, "auth_required"), proxy);
    }
}

/// Which way a busy tunnel's bytes go.
#[derive(Clone, Copy, Debug)]
enum Way {
    /// The client writes, the origin only reads.
    ClientToOrigin,
    /// The origin writes, the client only reads.
    OriginToClient,
}

/// A tunnel relaying a byte every [`BEAT`] for [`BUSY_FOR`] (past the idle timeout):
/// the session lives on the other replica, the tunnel still relays, and the session's
/// credentials open a new tunnel there.
async fn a_relaying_tunnel_keeps_its_session_alive(setup: Setup, way: Way) {
    let (session, mut tunnel) = setup.tunnel().await;
    let until = Instant::now() + BUSY_FOR;
    let mut beats = 0;
    while Instant::now() < until && beats < 100 {
        relay_one(&setup, &mut tunnel, way, beats).await;
        beats += 1;
        if matches!(way, Way::ClientToOrigin) {
            tokio::time::sleep(BEAT).await;
        }
    }
    let other = setup.other();
    assert_eq!(
        status_of(other, &session).await,
        200,
        "{way:?} bytes through a tunnel every {BEAT:?} did not keep its session alive\n{}\n{}",
        setup.a.diagnostics(),
        other.diagnostics()
    );
    relay_one(&setup, &mut tunnel, way, beats).await;
    let (resp, _) = setup.connect(other, &session).await;
    assert_eq!(resp.status, 200, "{resp:?}\n{}", other.diagnostics());
}

/// One byte through the tunnel the given way (the `n`th): the client writes it and the
/// origin receives it, or the client reads one the origin wrote.
async fn relay_one(setup: &Setup, tunnel: &mut TcpStream, way: Way, n: usize) {
    let wait = Duration::from_secs(2);
    match way {
        Way::ClientToOrigin => {
            tunnel.write_all(b"c").await.expect("write into the tunnel");
            let started = Instant::now();
            while setup.origin.received() <= n && started.elapsed() < wait {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            assert!(
                setup.origin.received() > n,
                "byte {n} did not reach the origin\n{}",
                setup.a.diagnostics()
            );
        }
        Way::OriginToClient => {
            let mut one = [0u8; 1];
            let read = tokio::time::timeout(wait, tunnel.read_exact(&mut one)).await;
            assert!(
                matches!(read, Ok(Ok(_))),
                "byte {n} from the origin did not arrive: {read:?}\n{}",
                setup.a.diagnostics()
            );
        }
    }
}

#[tokio::test]
async fn a_silent_tunnel_does_not_keep_its_session_alive() {
    a_silent_tunnel_lets_its_session_expire(Setup::single(false).await).await;
}

#[tokio::test]
async fn bytes_from_the_client_through_a_tunnel_keep_its_session_alive() {
    let setup = Setup::single(false).await;
    a_relaying_tunnel_keeps_its_session_alive(setup, Way::ClientToOrigin).await;
}

#[tokio::test]
async fn bytes_from_the_origin_through_a_tunnel_keep_its_session_alive() {
    let setup = Setup::single(true).await;
    a_relaying_tunnel_keeps_its_session_alive(setup, Way::OriginToClient).await;
}

/// Requests inside an intercepted tunnel are traffic too: the bytes of each reach the
/// proxy through the tunnel, whose session they keep alive past its timeout.
#[tokio::test]
async fn requests_inside_an_intercepted_tunnel_keep_its_session_alive() {
    let bed = Testbed::start("idle-inspect").await;
    let entry = r#"{ host = "secure.test", access = "read-only" }"#;
    let org = Org::new()
        .allow_entry(entry)
        .ports(&[443, bed.origin.port()])
        .loopback();
    let proxy = bed
        .proxy(ProxyBuilder::new(org.to_toml()).admin(ADMIN_TOKEN))
        .start()
        .await;
    let policy = serde_json::json!({"type": "allowlist", "allowed_domains": [
        {"host": "secure.test", "access": "read-only"}
    ]});
    let session = proxy.admin().create_session(&policy, Some(IDLE)).await;
    let auth = session.proxy_auth();
    let mut inner = bed
        .inner(&proxy, &[("Proxy-Authorization", auth.as_str())])
        .await;
    let until = Instant::now() + BUSY_FOR;
    let mut requests = 0;
    while Instant::now() < until && requests < 100 {
        let resp = inner.request("GET", "/", &[], b"").await;
        assert_eq!(resp.status, 200, "{resp:?}\n{}", proxy.diagnostics());
        requests += 1;
        tokio::time::sleep(BEAT).await;
    }
    assert_eq!(
        status_of(&proxy, &session).await,
        200,
        "{requests} requests inside an intercepted tunnel did not keep its session alive\n{}",
        proxy.diagnostics()
    );
    assert_eq!(
        bed.origin.hits(),
        requests,
        "every request reached the origin"
    );
}

#[tokio::test]
async fn fleet_a_silent_tunnel_on_a_lets_the_session_expire_on_both() {
    let test = "idle::fleet_a_silent_tunnel_on_a_lets_the_session_expire_on_both";
    let Some(setup) = Setup::fleet(test, false).await else {
        return;
    };
    a_silent_tunnel_lets_its_session_expire(setup).await;
}

#[tokio::test]
async fn fleet_bytes_from_the_client_on_a_keep_the_session_alive_on_b() {
    let test = "idle::fleet_bytes_from_the_client_on_a_keep_the_session_alive_on_b";
    let Some(setup) = Setup::fleet(test, false).await else {
        return;
    };
    a_relaying_tunnel_keeps_its_session_alive(setup, Way::ClientToOrigin).await;
}

#[tokio::test]
async fn fleet_bytes_from_the_origin_on_a_keep_the_session_alive_on_b() {
    let test = "idle::fleet_bytes_from_the_origin_on_a_keep_the_session_alive_on_b";
    let Some(setup) = Setup::fleet(test, true).await else {
        return;
    };
    a_relaying_tunnel_keeps_its_session_alive(setup, Way::OriginToClient).await;
}
