//! The parent's URL, its routes, and `CONNECT` through a parent on loopback.

use super::*;
use tokio::net::TcpListener;

fn parent(url: &str) -> Parent {
    Parent::new(url, false, Vec::new()).unwrap()
}

#[test]
fn parses_the_url_and_keeps_the_credentials_out_of_debug_and_name() {
    let p = parent("http://al%40ice:s%3Acret@127.0.0.1:3129");
    assert_eq!(p.name(), "127.0.0.1:3129");
    assert_eq!(p.addrs()[0].addr(), "127.0.0.1:3129".parse().unwrap());
    let auth = p.authorization().unwrap();
    assert!(auth.is_sensitive());
    // base64("al@ice:s:cret")
    assert_eq!(auth.to_str().unwrap(), "Basic YWxAaWNlOnM6Y3JldA==");
    let debug = format!("{p:?}");
    assert!(
        !debug.contains("YWxA") && !debug.contains("cret"),
        "{debug}"
    );
    assert!(debug.contains("<redacted>"), "{debug}");
}

#[test]
fn refuses_other_shapes() {
    for url in [
        "127.0.0.1:3129",
        "https://127.0.0.1:3129",
        "socks5://127.0.0.1:1080",
        "http://127.0.0.1",
        "http://127.0.0.1:0",
        "http://127.0.0.1:3129/path",
        "http://u:%zz@127.0.0.1:3129",
        "http://:3129",
    ] {
        assert!(Parent::new(url, false, Vec::new()).is_err(), "{url}");
    }
    assert!(Parent::new("http://[::1]:3129/", false, Vec::new()).is_ok());
}

#[test]
fn routes_by_name_by_address_or_directly() {
    let name = Host::parse("api.example.test").unwrap();
    let addrs = [CheckedAddr::unchecked_for_test(
        "203.0.113.5:443".parse().unwrap(),
    )];
    assert_eq!(
        parent("http://127.0.0.1:1")
            .route(&name, 443, &addrs)
            .as_deref(),
        Some("api.example.test:443")
    );
    let by_addr = Parent::new("http://127.0.0.1:1", true, Vec::new()).unwrap();
    assert_eq!(
        by_addr.route(&name, 443, &addrs).as_deref(),
        Some("203.0.113.5:443")
    );
    let v6 = Host::parse("[2001:db8::1]").unwrap();
    assert_eq!(
        by_addr.route(&v6, 22, &[]).as_deref(),
        Some("[2001:db8::1]:22")
    );
    let no_proxy = ["*.example.test:443", "10.0.0.0/8", "192.0.2.7"]
        .map(|s| NoProxy::parse(s).unwrap())
        .to_vec();
    let p = Parent::new("http://127.0.0.1:1", false, no_proxy).unwrap();
    assert_eq!(p.route(&name, 443, &addrs), None);
    assert!(
        p.route(&name, 80, &addrs).is_some(),
        "the pattern names port 443 only"
    );
    assert_eq!(p.route(&Host::parse("10.1.2.3").unwrap(), 80, &[]), None);
    assert_eq!(p.route(&Host::parse("192.0.2.7").unwrap(), 80, &[]), None);
    let internal = Host::parse("db.internal.test").unwrap();
    let ten = [CheckedAddr::unchecked_for_test(
        "10.9.9.9:5432".parse().unwrap(),
    )];
    assert_eq!(
        p.route(&internal, 5432, &ten),
        None,
        "by its checked address"
    );
    assert!(NoProxy::parse("*").is_err());
}

/// A parent that answers `answer` to the first request head and then sends `after`.
async fn fake_parent(
    answer: &'static [u8],
    after: &'static [u8],
) -> (Parent, tokio::task::JoinHandle<Vec<u8>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://u:p@{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 1024];
        while !got.ends_with(b"\r\n\r\n") {
            let n = s.read(&mut buf).await.unwrap();
            got.extend_from_slice(&buf[..n]);
        }
        // The answer and what follows in one write, as a server-first origin's
        // banner may come.
        s.write_all(&[answer, after].concat()).await.unwrap();
        got
    });
    (parent(&url), task)
}

#[tokio::test]
async fn a_tunnel_starts_at_the_first_byte_after_the_parents_answer() {
    let (p, task) = fake_parent(
        b"HTTP/1.1 200 Connection established\r\n\r\n",
        b"SSH-2.0-x\r\n",
    )
    .await;
    let mut stream = p
        .tunnel("git.example.test:22", Duration::from_secs(5))
        .await
        .unwrap();
    let mut banner = [0u8; 11];
    stream.read_exact(&mut banner).await.unwrap();
    assert_eq!(&banner, b"SSH-2.0-x\r\n");
    let sent = String::from_utf8(task.await.unwrap()).unwrap();
    assert!(
        sent.starts_with("CONNECT git.example.test:22 HTTP/1.1\r\n"),
        "{sent}"
    );
    assert!(
        sent.contains("Proxy-Authorization: Basic dTpw\r\n"),
        "{sent}"
    );
}

#[tokio::test]
async fn a_refusal_by_the_parent_names_its_status() {
    let (p, _task) = fake_parent(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n", b"").await;
    let err = p
        .tunnel("a.example.test:443", Duration::from_secs(5))
        .await
        .unwrap_err();
    let DialError::Parent(message) = err else {
        panic!("{err:?}")
    };
    assert!(message.contains("answered 403 Forbidden"), "{message}");
}

#[tokio::test]
async fn a_dead_parent_is_a_parent_failure() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let err = parent(&url)
        .tunnel("a.example.test:443", Duration::from_secs(5))
        .await
        .unwrap_err();
    let DialError::Parent(message) = err else {
        panic!("{err:?}")
    };
    assert!(
        message.contains("cannot connect to the parent proxy"),
        "{message}"
    );
}
