//! Request bodies under an upload budget.

use super::*;

fn post(port: u16, body: &[u8], extra: &str) -> Vec<u8> {
    let mut req = format!(
        "POST http://sink.test:{port}/up HTTP/1.1\r\nHost: sink.test:{port}\r\n\
         Content-Length: {}\r\n{extra}\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(body);
    req
}

/// A body whose `Content-Length` is more than what is left is refused before anything
/// is sent; one that fits goes through, and spends the budget (its head too).
#[tokio::test]
async fn a_content_length_over_the_budget_is_refused_and_the_origin_sees_nothing() {
    let origin = Origin::start().await;
    let proxy = proxy(origin.port(), 1000).await;
    let resp = send_raw(proxy.addr, &post(origin.port(), &[b'x'; 1001], "")).await;
    let want = Denial::new(403, "upload_budget_exceeded")
        .at("sink.test", origin.port())
        .level("org");
    assert_denied_response(&resp, &want, &proxy);
    assert_eq!(origin.connections(), 0, "{}", proxy.diagnostics());
    let record = &records_with(&proxy, "upload_budget_exceeded", 1).await[0];
    assert!(record["url"].as_str().unwrap().ends_with("/up"), "{record}");
    let resp = send_raw(proxy.addr, &post(origin.port(), &[b'y'; 100], "")).await;
    assert_eq!(resp.status, 200, "{resp:?}\n{}", proxy.diagnostics());
    assert_eq!(origin.requests()[0].body, vec![b'y'; 100]);
    // The whole budget no longer fits: the first request's head and body spent some.
    let resp = send_raw(proxy.addr, &post(origin.port(), &[b'z'; 900], "")).await;
    assert_denied_response(&resp, &want, &proxy);
    // A body-less request pays only its head, so it still goes.
    let get = format!(
        "GET http://sink.test:{0}/ HTTP/1.1\r\nHost: sink.test:{0}\r\n\r\n",
        origin.port()
    );
    assert_eq!(send_raw(proxy.addr, get.as_bytes()).await.status, 200);
    assert_eq!(origin.hits(), 2);
    assert!(origin.http_bytes() <= 1000, "{}", origin.http_bytes());
}

/// A narrower `X-Network-Policy` budget applies to its request.
#[tokio::test]
async fn a_header_budget_narrows_its_request() {
    let origin = Origin::start().await;
    let proxy = proxy(origin.port(), 1000).await;
    let header = format!("X-Network-Policy: {}\r\n", allowlist(Some(10)));
    let resp = send_raw(proxy.addr, &post(origin.port(), &[b'x'; 11], &header)).await;
    let want = Denial::new(403, "upload_budget_exceeded").level("request");
    assert_denied_response(&resp, &want, &proxy);
    let record = &records_with(&proxy, "upload_budget_exceeded", 1).await[0];
    assert_eq!(record["rule"], "max_upload_bytes = 10", "{record}");
    assert_eq!(origin.connections(), 0);
}

/// Decode a chunked body as far as it goes: the payload, and whether it ended.
fn dechunk(mut bytes: &[u8]) -> (Vec<u8>, bool) {
    let mut payload = Vec::new();
    loop {
        let Some(eol) = bytes.windows(2).position(|w| w == b"\r\n") else {
            return (payload, false);
        };
        let size_text = std::str::from_utf8(&bytes[..eol]).unwrap();
        let size = usize::from_str_radix(size_text.split(';').next().unwrap(), 16).unwrap();
        if size == 0 {
            return (payload, true);
        }
        let data = &bytes[eol + 2..];
        let take = size.min(data.len());
        payload.extend_from_slice(&data[..take]);
        if data.len() < size + 2 {
            return (payload, false);
        }
        bytes = &data[size + 2..];
    }
}

/// A chunked body is never delivered past the budget: the origin gets the bytes that
/// fit and no end of the body; the client, with no answer started, gets 403.
#[tokio::test]
async fn a_chunked_body_is_cut_at_the_budget() {
    const BUDGET: usize = 1000;
    let sink = Sink::start().await;
    let port = sink.addr.port();
    let proxy = proxy(port, BUDGET as u64).await;
    let mut conn = Conn::open(proxy.addr).await;
    let head = format!(
        "POST http://sink.test:{port}/chunks HTTP/1.1\r\nHost: sink.test:{port}\r\n\
         Transfer-Encoding: chunked\r\n\r\n"
    );
    conn.send(head.as_bytes()).await;
    let sent = pattern(300 * 6);
    for chunk in sent.chunks(300) {
        let mut framed = format!("{:x}\r\n", chunk.len()).into_bytes();
        framed.extend_from_slice(chunk);
        framed.extend_from_slice(b"\r\n");
        if !conn.send_lossy(&framed).await {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = conn.send_lossy(b"0\r\n\r\n").await;
    let resp: Response = conn.read_response().await;
    let want = Denial::new(403, "upload_budget_exceeded").at("sink.test", port);
    assert_denied_response(&resp, &want, &proxy);
    let got = sink.ended(0).await;
    let at = crate::support::find(&got, b"\r\n\r\n").expect("a head upstream") + 4;
    let (payload, ended) = dechunk(&got[at..]);
    // The head paid its bytes first.
    assert_eq!(payload, sent[..BUDGET - at], "exactly the bytes that fit");
    assert!(!ended, "the body never ended upstream");
    let record = &records_with(&proxy, "upload_budget_exceeded", 1).await[0];
    assert_eq!(record["method"], "POST", "{record}");
    // The head's bytes are counted in `bytes_up` too (docs/reference/audit-log.md).
    let up = record["bytes_up"].as_u64().unwrap() as usize;
    assert!(up >= BUDGET, "{record}");
}

/// Upstream answered before the body was done: the answer has started, so when the
/// budget cuts the body the client's connection closes (no 403 can follow a 200 head),
/// and the record says why.
#[tokio::test]
async fn a_cut_body_after_the_answer_started_closes_the_connection() {
    const BUDGET: usize = 1000;
    let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\nearly";
    let sink = Sink::answering(Some(answer)).await;
    let port = sink.addr.port();
    let proxy = proxy(port, BUDGET as u64).await;
    let mut client = TcpStream::connect(proxy.addr).await.unwrap();
    let head = format!(
        "POST http://sink.test:{port}/chunks HTTP/1.1\r\nHost: sink.test:{port}\r\n\
         Transfer-Encoding: chunked\r\n\r\n"
    );
    client.write_all(head.as_bytes()).await.unwrap();
    let sent = pattern(300 * 6);
    for chunk in sent.chunks(300) {
        let mut framed = format!("{:x}\r\n", chunk.len()).into_bytes();
        framed.extend_from_slice(chunk);
        framed.extend_from_slice(b"\r\n");
        if client.write_all(&framed).await.is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = client.write_all(b"0\r\n\r\n").await;
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), client.read_to_end(&mut got));
    let _ = read
        .await
        .expect("the proxy closes the client's connection");
    let text = String::from_utf8_lossy(&got);
    assert!(
        text.starts_with("HTTP/1.1 200"),
        "the answer had started: {text:?}"
    );
    assert!(
        got.len() < 100_000,
        "and never finished: {} bytes",
        got.len()
    );
    let upstream = sink.ended(0).await;
    let at = crate::support::find(&upstream, b"\r\n\r\n").unwrap() + 4;
    let (payload, ended) = dechunk(&upstream[at..]);
    assert!(
        payload.len() <= BUDGET && sent.starts_with(&payload),
        "{}",
        payload.len()
    );
    assert!(!ended, "the body never ended upstream");
    let record = &records_with(&proxy, "upload_budget_exceeded", 1).await[0];
    assert_eq!(record["method"], "POST", "{record}");
}
