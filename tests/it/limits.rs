//! Limits and timeouts (issue 5, part 3), each with a small configured limit so the
//! tests stay fast and bounded: a slow client is cut off without hurting others, and
//! every limit hit is refused with the header, the JSON body and one audit line.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::client::{connect_via_proxy, get_via_proxy, send_raw, Conn};
use crate::support::expect::{assert_single_denial, Denial};
use crate::support::origin::Origin;
use crate::support::proxy::{Proxy, ProxyBuilder};

async fn proxy_with(origin: &Origin, args: &[&str]) -> Proxy {
    let mut builder = ProxyBuilder::standard(origin.port());
    for arg in args {
        builder = builder.arg(arg);
    }
    builder.start().await
}

/// Whether the proxy closes `stream` within `limit`.
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

#[tokio::test]
async fn slow_header_client_is_cut_off_and_others_are_served() {
    let origin = Origin::start().await;
    let proxy = proxy_with(&origin, &["--header-timeout", "1"]).await;
    let mut slow = TcpStream::connect(proxy.addr).await.unwrap();
    slow.write_all(b"GET http://allowed.test/ HTTP/1.1\r\nX-Slow: ")
        .await
        .unwrap();

    let url = format!("http://allowed.test:{}/", origin.port());
    let ok = get_via_proxy(proxy.addr, &url, &[]).await;
    assert_eq!(
        ok.status,
        200,
        "another client is served meanwhile\n{}",
        proxy.diagnostics()
    );

    assert!(
        closed_within(&mut slow, Duration::from_secs(4)).await,
        "a client that never finishes its head is disconnected\n{}",
        proxy.diagnostics()
    );
    assert_eq!(
        origin.hits(),
        1,
        "only the complete request reached the origin"
    );
    assert!(
        proxy
            .stderr_shows(
                "sent no complete request head in time",
                Duration::from_secs(2)
            )
            .await,
        "the header timeout is logged\n{}",
        proxy.diagnostics()
    );
}

#[tokio::test]
async fn connection_over_the_limit_waits_then_gets_503() {
    let origin = Origin::start().await;
    let proxy = proxy_with(
        &origin,
        &[
            "--max-connections",
            "1",
            "--connection-wait",
            "0.2",
            "--header-timeout",
            "5",
        ],
    )
    .await;
    // The one slot is held by an idle client.
    let _holder = TcpStream::connect(proxy.addr).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let url = format!("http://allowed.test:{}/", origin.port());
    let resp = get_via_proxy(proxy.addr, &url, &[]).await;
    assert_eq!(resp.header("retry-after"), Some("1"), "{resp:?}");
    assert_single_denial(&resp, &Denial::new(503, "limit_exceeded"), &proxy).await;
    assert_eq!(origin.connections(), 0);
}

#[tokio::test]
async fn tunnels_per_client_are_capped_with_429() {
    let origin = Origin::start().await;
    let proxy = proxy_with(&origin, &["--max-tunnels-per-client", "1"]).await;
    let target = format!("allowed.test:{}", origin.port());
    let (first, conn) = connect_via_proxy(proxy.addr, &target, &[]).await;
    assert_eq!(first.status, 200, "{first:?}\n{}", proxy.diagnostics());
    let held = conn.into_stream();

    let (second, _conn) = connect_via_proxy(proxy.addr, &target, &[]).await;
    assert_eq!(second.header("retry-after"), Some("1"), "{second:?}");
    let want = Denial::new(429, "limit_exceeded").at("allowed.test", origin.port());
    assert_single_denial(&second, &want, &proxy).await;

    // Closing the first tunnel frees the slot.
    drop(held);
    let mut reopened = false;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (third, _conn) = connect_via_proxy(proxy.addr, &target, &[]).await;
        if third.status == 200 {
            reopened = true;
            break;
        }
    }
    assert!(
        reopened,
        "a freed slot opens again\n{}",
        proxy.diagnostics()
    );
}

#[tokio::test]
async fn idle_tunnel_is_closed_after_the_idle_timeout() {
    let origin = Origin::start().await;
    let proxy = proxy_with(&origin, &["--tunnel-idle-timeout", "1"]).await;
    let target = format!("allowed.test:{}", origin.port());
    let (resp, conn) = connect_via_proxy(proxy.addr, &target, &[]).await;
    assert_eq!(resp.status, 200, "{resp:?}\n{}", proxy.diagnostics());
    let mut tunnel = conn.into_stream();
    assert!(
        !closed_within(&mut tunnel, Duration::from_millis(300)).await,
        "a fresh tunnel stays open"
    );
    assert!(
        closed_within(&mut tunnel, Duration::from_secs(4)).await,
        "an idle tunnel is closed\n{}",
        proxy.diagnostics()
    );
}

#[tokio::test]
async fn oversized_request_head_is_431_with_the_denial_body() {
    let origin = Origin::start().await;
    let proxy = proxy_with(&origin, &["--max-header-bytes", "2048"]).await;
    let big = "a".repeat(4096);
    let req = format!(
        "GET http://allowed.test:{}/ HTTP/1.1\r\nHost: allowed.test:{}\r\nX-Big: {big}\r\n\r\n",
        origin.port(),
        origin.port()
    );
    let resp = send_raw(proxy.addr, req.as_bytes()).await;
    assert_single_denial(&resp, &Denial::new(431, "invalid_request"), &proxy).await;
    assert_eq!(origin.connections(), 0);
    let mut conn = Conn::open(proxy.addr).await;
    conn.send(
        format!(
            "GET http://allowed.test:{}/ HTTP/1.1\r\nHost: allowed.test:{}\r\n\r\n",
            origin.port(),
            origin.port()
        )
        .as_bytes(),
    )
    .await;
    assert_eq!(
        conn.read_response().await.status,
        200,
        "a normal head still passes"
    );
}

#[tokio::test]
async fn tunnels_per_session_are_capped_with_429() {
    use crate::support::sessions::{allowlist, org, proxy_with};
    let origin = Origin::start().await;
    let proxy = proxy_with(&org(origin.port()), &["--max-tunnels-per-session", "1"]).await;
    let session = proxy
        .admin()
        .create_session(&allowlist(&["allowed.test"]), None)
        .await;
    let auth = session.proxy_auth();
    let target = format!("allowed.test:{}", origin.port());
    let headers = [("Proxy-Authorization", auth.as_str())];
    let (first, conn) = connect_via_proxy(proxy.addr, &target, &headers).await;
    assert_eq!(first.status, 200, "{first:?}\n{}", proxy.diagnostics());
    let _held = conn.into_stream();
    let (second, _conn) = connect_via_proxy(proxy.addr, &target, &headers).await;
    assert_eq!(second.header("retry-after"), Some("1"), "{second:?}");
    let want = Denial::new(429, "limit_exceeded").at("allowed.test", origin.port());
    let record = assert_single_denial(&second, &want, &proxy).await;
    assert_eq!(record["session"], session.id.as_str(), "{record}");
}

/// A client that connects and sends nothing is closed after `--header-timeout`, like a
/// slow one, and counted: silent sockets cannot hold every connection slot.
#[tokio::test]
async fn silent_connections_are_closed_after_the_header_timeout_and_free_their_slots() {
    use crate::support::admin::metric;

    let origin = Origin::start().await;
    let proxy = ProxyBuilder::standard(origin.port())
        .admin("silent-token")
        .arg("--header-timeout")
        .arg("1")
        .arg("--max-connections")
        .arg("2")
        .arg("--connection-wait")
        .arg("0.1")
        .start()
        .await;
    let mut silent = Vec::new();
    for _ in 0..2 {
        silent.push(TcpStream::connect(proxy.addr).await.unwrap());
    }
    // The two slots are held: a third client is refused while they last.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let url = format!("http://allowed.test:{}/", origin.port());
    let held = get_via_proxy(proxy.addr, &url, &[]).await;
    assert_eq!(held.status, 503, "{held:?}\n{}", proxy.diagnostics());
    for stream in &mut silent {
        assert!(
            closed_within(stream, Duration::from_secs(3)).await,
            "a silent client is disconnected within the header timeout\n{}",
            proxy.diagnostics()
        );
    }
    let freed = get_via_proxy(proxy.addr, &url, &[]).await;
    assert_eq!(freed.status, 200, "{freed:?}\n{}", proxy.diagnostics());
    let text = proxy.admin().metrics().await;
    assert_eq!(
        metric(&text, "egress_header_timeouts_total"),
        Some(2.0),
        "{text}"
    );
}

/// The soft and hard "Max open files" of a process, from `/proc/PID/limits`.
fn open_files_limits(pid: u32) -> (u64, u64) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap_or_else(|| panic!("no open-files line:\n{text}"));
    let mut numbers = line
        .split_whitespace()
        .filter_map(|w| w.parse::<u64>().ok());
    (numbers.next().unwrap(), numbers.next().unwrap())
}

/// The proxy raises the usual low soft limit of open files to the hard limit at start,
/// so accepts do not fail with `EMFILE` long before `--max-connections`.
#[tokio::test]
async fn the_open_files_soft_limit_is_raised_to_the_hard_limit() {
    if !std::path::Path::new("/usr/bin/prlimit").exists() {
        eprintln!("skipped: prlimit (util-linux) is needed to start the proxy with a low limit");
        return;
    }
    let own_hard = open_files_limits(std::process::id()).1;
    let hard = own_hard.min(16_384);
    let max_connections = ((hard - 64) / 2 - 1).to_string();
    let origin = Origin::start().await;
    let nofile = format!("--nofile=256:{hard}");
    let proxy = ProxyBuilder::standard(origin.port())
        .run_under(&["prlimit", &nofile])
        .arg("--max-connections")
        .arg(&max_connections)
        .start()
        .await;
    assert_eq!(
        open_files_limits(proxy.pid()),
        (hard, hard),
        "{}",
        proxy.diagnostics()
    );
    assert!(
        !proxy.stderr().contains("open-files hard limit"),
        "{}",
        proxy.diagnostics()
    );
}

/// When even the hard limit is short of what `--max-connections` needs, `serve` says so
/// at start, naming both numbers.
#[tokio::test]
async fn a_hard_limit_below_what_max_connections_needs_is_warned_at_start() {
    if !std::path::Path::new("/usr/bin/prlimit").exists() {
        eprintln!("skipped: prlimit (util-linux) is needed to start the proxy with a low limit");
        return;
    }
    let origin = Origin::start().await;
    let proxy = ProxyBuilder::standard(origin.port())
        .run_under(&["prlimit", "--nofile=256:512"])
        .arg("--max-connections")
        .arg("4096")
        .start()
        .await;
    assert_eq!(open_files_limits(proxy.pid()), (512, 512));
    let stderr = proxy.stderr();
    assert!(
        stderr.contains("hard limit is 512")
            && stderr.contains("the 8256 that --max-connections 4096 needs"),
        "{stderr}"
    );
}

/// `--max-header-bytes` holds for every head of a kept-alive connection, not only the
/// first (which is measured before hyper reads it).
#[tokio::test]
async fn a_later_oversized_head_on_a_kept_alive_connection_is_431_too() {
    let origin = Origin::start().await;
    let proxy = proxy_with(&origin, &["--max-header-bytes", "4096"]).await;
    let mut conn = Conn::open(proxy.addr).await;
    let authority = format!("allowed.test:{}", origin.port());
    assert_eq!(conn.get(&authority, "/").await.status, 200);
    let big = "a".repeat(6000);
    conn.send(
        format!("GET http://{authority}/big HTTP/1.1\r\nHost: {authority}\r\nX-Big: {big}\r\n\r\n")
            .as_bytes(),
    )
    .await;
    let resp = conn.read_response().await;
    assert_eq!(resp.status, 431, "{resp:?}\n{}", proxy.diagnostics());
    assert_eq!(resp.header("x-egress-denied"), Some("invalid_request"));
    assert_eq!(
        origin.hits(),
        1,
        "the oversized request did not reach upstream"
    );
}

/// `--header-timeout` holds for every head on a kept-alive connection, not only the
/// first: a later head left unfinished is closed within the timeout (a 1 s timeout, a
/// 4 s bound), while a later head that comes in time is answered.
#[tokio::test]
async fn a_later_head_on_a_kept_alive_connection_must_also_come_within_the_header_timeout() {
    let origin = Origin::start().await;
    let proxy = proxy_with(&origin, &["--header-timeout", "1"]).await;
    let authority = format!("allowed.test:{}", origin.port());
    // The control: a second head half a timeout after the first answer is served.
    let mut timely = Conn::open(proxy.addr).await;
    assert_eq!(timely.get(&authority, "/").await.status, 200);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(timely.get(&authority, "/").await.status, 200);
    let mut slow = Conn::open(proxy.addr).await;
    assert_eq!(slow.get(&authority, "/").await.status, 200);
    slow.send(format!("GET http://{authority}/slow HTTP/1.1\r\nX-Slow: ").as_bytes())
        .await;
    let mut slow = slow.into_stream();
    assert!(
        closed_within(&mut slow, Duration::from_secs(4)).await,
        "an unfinished later head is cut off\n{}",
        proxy.diagnostics()
    );
    assert_eq!(
        origin.hits(),
        3,
        "the unfinished request never reached upstream"
    );
}
