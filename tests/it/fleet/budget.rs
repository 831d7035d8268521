//! One upload budget for the fleet (docs/scale-out.md, "One upload budget"): replicas on
//! one real `redis-server`, a session's bytes sent through several of them, counted on
//! the origins' side, never taken from the proxies' word.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::support::admin::Created;
use crate::support::client::{connect_via_proxy, request_bytes, Conn, Response};
use crate::support::expect::{assert_denied_response, Denial};
use crate::support::org::Org;
use crate::support::origin::Origin;
use crate::support::proxy::{Proxy, ProxyBuilder};
use crate::support::redis::RedisServer;
use crate::support::sessions::{allowlist, ADMIN_TOKEN};

/// A TCP origin that counts every byte it is sent and answers nothing: where tunnels go.
struct Sink {
    addr: SocketAddr,
    got: Arc<AtomicUsize>,
}

impl Sink {
    async fn start() -> Sink {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let got = Arc::new(AtomicUsize::new(0));
        let counted = got.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let got = counted.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    while let Ok(n @ 1..) = stream.read(&mut buf).await {
                        got.fetch_add(n, Ordering::SeqCst);
                    }
                });
            }
        });
        Sink { addr, got }
    }

    fn got(&self) -> usize {
        self.got.load(Ordering::SeqCst)
    }
}

/// Replicas on one Redis, an HTTP origin and a tunnel sink, both `allowed.test`.
pub(crate) struct Fleet {
    pub replicas: Vec<Proxy>,
    pub redis: RedisServer,
    pub origin: Origin,
    sink: Sink,
}

impl Fleet {
    pub(crate) async fn start(test: &str, n: usize) -> Option<Fleet> {
        Fleet::start_with(test, n, &[]).await
    }

    /// [`Fleet::start`], each replica with the flags `extra`.
    pub(crate) async fn start_with(test: &str, n: usize, extra: &[&str]) -> Option<Fleet> {
        let redis = RedisServer::start(test)?;
        let origin = Origin::start().await;
        let sink = Sink::start().await;
        let org = Org::new()
            .allow("allowed.test")
            .ports(&[origin.port(), sink.addr.port()])
            .loopback()
            .to_toml();
        let mut replicas = Vec::new();
        for _ in 0..n {
            let mut builder = ProxyBuilder::new(org.clone())
                .pin("allowed.test")
                .admin(ADMIN_TOKEN)
                .arg("--session-store")
                .arg(&redis.url())
                .arg("--session-store-timeout")
                .arg("1");
            for arg in extra {
                builder = builder.arg(arg);
            }
            replicas.push(builder.start().await);
        }
        Some(Fleet {
            replicas,
            redis,
            origin,
            sink,
        })
    }

    /// A session whose policy has an upload budget of `budget` bytes.
    pub(crate) async fn session(&self, budget: u64) -> Created {
        let mut policy = allowlist(&["allowed.test"]);
        policy["max_upload_bytes"] = budget.into();
        self.replicas[0]
            .admin()
            .create_session(&policy, Some(600))
            .await
    }

    /// `POST` of `len` bytes to the origin through replica `i`: its answer, or `None`
    /// when the connection was reset before it could be read (an early refusal, sent
    /// while the body was still being written, can be lost so). What reached the
    /// origin is counted there either way.
    pub(crate) async fn post(&self, i: usize, session: &Created, len: usize) -> Option<Response> {
        let url = format!("http://allowed.test:{}/", self.origin.port());
        let auth = session.proxy_auth();
        let body = vec![b'x'; len];
        let req = request_bytes("POST", &url, &[("Proxy-Authorization", &auth)], &body);
        // A refusal may come (and the connection close) before the body is all written.
        let mut conn = Conn::open(self.replicas[i].addr).await;
        conn.send_lossy(&req).await;
        conn.next_response().await
    }

    /// A tunnel to the sink through replica `i`, or its refusal.
    pub(crate) async fn tunnel(&self, i: usize, session: &Created) -> Result<TcpStream, Response> {
        let target = format!("allowed.test:{}", self.sink.addr.port());
        let auth = session.proxy_auth();
        let (resp, conn) = connect_via_proxy(
            self.replicas[i].addr,
            &target,
            &[("Proxy-Authorization", &auth)],
        )
        .await;
        match resp.status {
            200 => Ok(conn.into_stream()),
            _ => Err(resp),
        }
    }

    /// What the origins received.
    pub(crate) fn received(&self) -> u64 {
        (self.origin.http_bytes() + self.sink.got()) as u64
    }
}

/// A write into a tunnel that may have been closed by the budget: false once it fails.
pub(crate) async fn write(stream: &mut TcpStream, bytes: &[u8]) -> bool {
    matches!(
        tokio::time::timeout(Duration::from_secs(2), stream.write_all(bytes)).await,
        Ok(Ok(()))
    )
}

/// 200, or the budget's refusal (checked whole, when it could be read): true when
/// refused.
pub(crate) fn refused(resp: &Option<Response>, proxy: &Proxy) -> bool {
    let Some(resp) = resp else {
        return true;
    };
    if resp.status == 200 {
        return false;
    }
    assert_denied_response(resp, &Denial::new(403, "upload_budget_exceeded"), proxy);
    true
}

/// Let the relays finish writing what they granted before counting.
pub(crate) async fn settle() {
    tokio::time::sleep(Duration::from_millis(500)).await;
}

#[tokio::test]
async fn bodies_through_two_replicas_never_pass_one_budget() {
    const BUDGET: u64 = 100_000;
    let test = "bodies_through_two_replicas_never_pass_one_budget";
    let Some(fleet) = Fleet::start(test, 2).await else {
        return;
    };
    let session = fleet.session(BUDGET).await;
    let mut refusals = [0; 2];
    for i in 0..120 {
        let r = i % 2;
        let resp = fleet.post(r, &session, 2_000).await;
        if refused(&resp, &fleet.replicas[r]) {
            refusals[r] += 1;
        }
    }
    settle().await;
    let got = fleet.received();
    assert!(
        got <= BUDGET,
        "the origin received {got} of a {BUDGET} budget"
    );
    assert!(
        got >= BUDGET * 9 / 10,
        "only {got} of {BUDGET} could be spent: too much stranded"
    );
    assert!(
        refusals.iter().all(|n| *n > 10),
        "both replicas refuse once the budget is spent: {refusals:?}"
    );
}

#[tokio::test]
async fn tunnels_and_bodies_through_two_replicas_never_pass_one_budget() {
    const BUDGET: u64 = 200_000;
    let test = "tunnels_and_bodies_through_two_replicas_never_pass_one_budget";
    let Some(fleet) = Fleet::start(test, 2).await else {
        return;
    };
    let session = fleet.session(BUDGET).await;
    let mut a = fleet.tunnel(0, &session).await.expect("tunnel through A");
    let mut b = fleet.tunnel(1, &session).await.expect("tunnel through B");
    let chunk = vec![b'y'; 3_000];
    let (mut a_open, mut b_open) = (true, true);
    for round in 0..120 {
        if a_open {
            a_open = write(&mut a, &chunk).await;
        }
        if b_open {
            b_open = write(&mut b, &chunk).await;
        }
        if round % 3 == 0 {
            let r = round % 2;
            let resp = fleet.post(r, &session, 2_000).await;
            refused(&resp, &fleet.replicas[r]);
        }
        // Let the relays move what was written.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    settle().await;
    let got = fleet.received();
    assert!(
        got <= BUDGET,
        "the origins received {got} of a {BUDGET} budget"
    );
    // What a closed tunnel's replica held goes back within a second or two (a slow
    // machine may have ended the writes early): the rest is spendable by requests.
    drop((a, b));
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let mut in_a_row = [0; 2];
    for i in 0..200 {
        let r = i % 2;
        let resp = fleet.post(r, &session, 1_000).await;
        in_a_row[r] = if refused(&resp, &fleet.replicas[r]) {
            in_a_row[r] + 1
        } else {
            0
        };
        if in_a_row.iter().all(|n| *n >= 3) {
            break;
        }
    }
    settle().await;
    let got = fleet.received();
    assert!(
        got <= BUDGET,
        "the origins received {got} of a {BUDGET} budget"
    );
    assert!(
        got >= BUDGET * 9 / 10,
        "only {got} of {BUDGET} could be spent: too much stranded"
    );
    // Spent: a new tunnel on either replica carries nothing, or is refused.
    let before = fleet.received();
    for r in 0..2 {
        match fleet.tunnel(r, &session).await {
            Ok(mut t) => {
                write(&mut t, &chunk).await;
            }
            Err(resp) => assert!(refused(&Some(resp), &fleet.replicas[r])),
        }
    }
    settle().await;
    assert!(
        fleet.received() <= BUDGET,
        "{} after the end",
        fleet.received()
    );
    assert!(
        fleet.received() - before < 3_000,
        "a new tunnel carried a chunk"
    );
}

#[tokio::test]
async fn uploaded_bytes_counts_every_replica() {
    let test = "uploaded_bytes_counts_every_replica";
    let Some(fleet) = Fleet::start(test, 2).await else {
        return;
    };
    let session = fleet.session(1_000_000).await;
    for r in [0, 1, 1] {
        let resp = fleet.post(r, &session, 3_000).await.expect("an answer");
        assert_eq!(resp.status, 200, "{resp:?}");
    }
    settle().await;
    let want = fleet.origin.http_bytes() as u64;
    let path = format!("/v1/sessions/{}", session.id);
    // Each replica adds what it sent within 5 s (docs/scale-out.md).
    for proxy in &fleet.replicas {
        let started = Instant::now();
        loop {
            let view: Value = proxy.admin().call("GET", &path, None).await.json();
            if view["uploaded_bytes"] == want {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(8),
                "uploaded_bytes {} where the origin received {want}",
                view["uploaded_bytes"]
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        // The list says the same (all of its sessions' counts in one round trip).
        let listed: Value = proxy.admin().call("GET", "/v1/sessions", None).await.json();
        let mine = listed["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == session.id.as_str())
            .cloned()
            .expect("the session is listed");
        assert_eq!(mine["uploaded_bytes"], want, "{listed}");
    }
}

#[tokio::test]
async fn three_replicas_spend_a_budget_to_within_one_percent() {
    const BUDGET: u64 = 1_000_000;
    let test = "three_replicas_spend_a_budget_to_within_one_percent";
    let Some(fleet) = Fleet::start(test, 3).await else {
        return;
    };
    let session = fleet.session(BUDGET).await;
    // Round-robin until every replica has refused three times in a row.
    let mut in_a_row = [0; 3];
    for i in 0..5_000 {
        let r = i % 3;
        let resp = fleet.post(r, &session, 400).await;
        in_a_row[r] = if refused(&resp, &fleet.replicas[r]) {
            in_a_row[r] + 1
        } else {
            0
        };
        if in_a_row.iter().all(|n| *n >= 3) {
            break;
        }
    }
    settle().await;
    let got = fleet.received();
    let stranded = BUDGET - got.min(BUDGET);
    eprintln!("{test}: {got} of {BUDGET} spent, {stranded} stranded");
    assert!(
        got <= BUDGET,
        "the origin received {got} of a {BUDGET} budget"
    );
    assert!(stranded * 100 <= BUDGET, "{stranded} of {BUDGET} stranded");
}
