//! The head upstream sees, and its length held to the bytes hyper writes.

use super::*;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full, StreamBody};
use hyper::body::Frame;
use hyper::Request;
use hyper_util::rt::TokioIo;
use tokio::io::AsyncReadExt;

use crate::proxy::Body;

#[test]
fn strip_removes_the_set_and_what_connection_names_and_keeps_the_rest() {
    let mut headers = HeaderMap::new();
    for name in HOP_BY_HOP.iter() {
        headers.insert(name.clone(), HeaderValue::from_static("x"));
    }
    headers.insert(CONNECTION, HeaderValue::from_static("close, X-Named"));
    headers.insert("x-named", HeaderValue::from_static("hop"));
    headers.insert("x-kept", HeaderValue::from_static("end to end"));
    strip_hop_by_hop(&mut headers);
    let left: Vec<&str> = headers.keys().map(HeaderName::as_str).collect();
    assert_eq!(left, ["x-kept"]);
}

#[test]
fn hop_index_finds_each_of_the_set_and_nothing_else() {
    for (i, name) in HOP_BY_HOP.iter().enumerate() {
        assert_eq!(hop_index(name.as_str()), Some(i), "{name}");
    }
    for name in [
        "host",
        "content-length",
        "connections",
        "t",
        "x-network-policies",
    ] {
        assert_eq!(hop_index(name), None, "{name}");
    }
}

#[test]
fn a_client_host_is_kept_only_when_it_is_the_approved_text() {
    let name = Host::parse("a.test").unwrap();
    let ip = Host::parse("127.0.0.1").unwrap();
    let cases: &[(&Host, u16, &str, bool)] = &[
        (&name, 80, "a.test", true),
        (&name, 8080, "a.test:8080", true),
        (&name, 8080, "a.test", false),
        (&name, 80, "a.test:80", false),
        (&name, 8080, "a.test:08080", false),
        (&name, 8080, "a.test:808", false),
        (&name, 8080, "A.test:8080", false),
        (&name, 8080, "a.tester:8080", false),
        (&name, 1, "a.test:1", true),
        (&name, 65535, "a.test:65535", true),
        (&ip, 8080, "127.0.0.1:8080", false),
    ];
    for &(host, port, value, kept) in cases {
        let value = HeaderValue::from_str(value).unwrap();
        assert_eq!(
            names(&value, host, port, 80),
            kept,
            "{value:?} for {host}:{port}"
        );
        if kept {
            assert_eq!(value, host_value(host, port, 80));
        }
    }
    // Two values are replaced by the one approved.
    let mut headers = HeaderMap::new();
    headers.append(HOST, HeaderValue::from_static("a.test"));
    headers.append(HOST, HeaderValue::from_static("a.test"));
    set_host(&mut headers, &name, 80, 80);
    assert_eq!(headers.get_all(HOST).iter().count(), 1);
    let mut headers = HeaderMap::new();
    set_host(&mut headers, &name, 8080, 80);
    assert_eq!(headers[HOST], "a.test:8080");
}

#[test]
fn decimal_digits_counts_the_digits_of_a_length() {
    for (n, want) in [(0, 1), (9, 1), (10, 2), (99, 2), (100, 3), (u64::MAX, 20)] {
        assert_eq!(decimal_digits(n), want, "{n}");
    }
}

/// A body of unknown length: one data frame, no size hint.
fn streamed(data: &'static [u8]) -> Body {
    let frames = futures_util::stream::iter([Ok::<_, crate::proxy::BoxError>(Frame::data(
        Bytes::from_static(data),
    ))]);
    StreamBody::new(frames).boxed()
}

fn empty() -> Body {
    Empty::new().map_err(|never| match never {}).boxed()
}

fn full(data: &'static [u8]) -> Body {
    Full::new(Bytes::from_static(data))
        .map_err(|never| match never {})
        .boxed()
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// What hyper's client writes before the body when it sends `req`.
async fn written_head(req: Request<Body>) -> Vec<u8> {
    let (client, mut server) = tokio::io::duplex(1 << 20);
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(client))
        .await
        .unwrap();
    let driver = tokio::spawn(conn);
    let sent = tokio::spawn(async move { sender.send_request(req).await });
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while find(&got, b"\r\n\r\n").is_none() {
        let n = server.read(&mut buf).await.unwrap();
        assert_ne!(n, 0, "hyper closed before the head ended");
        got.extend_from_slice(&buf[..n]);
    }
    sent.abort();
    driver.abort();
    let end = find(&got, b"\r\n\r\n").unwrap() + 4;
    got.truncate(end);
    got
}

#[tokio::test]
async fn wire_len_is_what_hyper_writes() {
    type Case = (
        &'static str,
        &'static str,
        Version,
        &'static [(&'static str, &'static str)],
        fn() -> Body,
    );
    let cases: &[Case] = &[
        ("GET", "/", Version::HTTP_11, &[("host", "a.test")], empty),
        (
            "GET",
            "/path/x?q=1&long=aaaaaaaaaaaaaaaaaaaaaaa",
            Version::HTTP_11,
            &[("host", "a.test:8080"), ("x-big", "v"), ("x-big", "again")],
            empty,
        ),
        (
            "POST",
            "/up",
            Version::HTTP_11,
            &[("host", "a"), ("content-length", "3")],
            || full(b"abc"),
        ),
        ("POST", "/up", Version::HTTP_11, &[("host", "a")], || {
            full(b"abcdefghijkl")
        }),
        (
            "POST",
            "/chunks",
            Version::HTTP_11,
            &[("host", "a")],
            || streamed(b"abc"),
        ),
        ("PUT", "/", Version::HTTP_10, &[("host", "a")], || {
            streamed(b"abc")
        }),
        ("GET", "/", Version::HTTP_11, &[("host", "a")], || {
            streamed(b"abc")
        }),
        // The absolute form a parent proxy is sent (docs/reference/parent-proxy.md).
        (
            "GET",
            "http://a.test:8080/p?q=1",
            Version::HTTP_11,
            &[
                ("host", "a.test:8080"),
                ("proxy-authorization", "Basic dTpw"),
            ],
            empty,
        ),
        (
            "POST",
            "http://[2001:db8::1]:80/",
            Version::HTTP_11,
            &[("host", "a")],
            || full(b"abc"),
        ),
    ];
    for (method, target, version, headers, body) in cases {
        let mut req = Request::builder()
            .method(*method)
            .uri(*target)
            .version(*version);
        for (name, value) in *headers {
            req = req.header(*name, *value);
        }
        let req = req.body(body()).unwrap();
        let (parts, b) = req.into_parts();
        let counted = wire_len(&parts, &b);
        let written = written_head(Request::from_parts(parts, b)).await;
        assert_eq!(
            counted,
            written.len() as u64,
            "{method} {target}: {}",
            String::from_utf8_lossy(&written)
        );
    }
}

#[test]
fn through_a_parent_the_target_is_absolute_and_carries_its_credentials() {
    let (mut parts, _) = Request::builder()
        .uri("/p?q=1")
        .header("host", "a.test")
        .body(())
        .unwrap()
        .into_parts();
    let mut auth = HeaderValue::from_static("Basic dTpw");
    auth.set_sensitive(true);
    through_parent(&mut parts, "a.test:80", Some(&auth));
    assert_eq!(parts.uri.to_string(), "http://a.test:80/p?q=1");
    assert_eq!(parts.headers[PROXY_AUTHORIZATION], "Basic dTpw");
    assert!(parts.headers[PROXY_AUTHORIZATION].is_sensitive());
    assert_eq!(parts.headers[HOST], "a.test");
}
