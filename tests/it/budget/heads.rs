//! Request heads pay the upload budget (docs/reference/policy-files.md, "Upload
//! budget"): a flood of large headers and long query strings, on one kept-alive
//! connection, plain and inside an intercepted tunnel, reaches the origin only up to
//! the budget, counted as the raw bytes the origin read. The same flood without a
//! budget reaches it whole, so the probe is real.

use super::*;
use crate::support::tls::Testbed;

const BUDGET: usize = 2_000;
/// Requests in a flood: with `LEAK` and `QUERY` each head is over 600 bytes, so the
/// flood is about five times the budget.
const FLOOD: usize = 16;
const LEAK: usize = 300;
const QUERY: usize = 200;

/// The `n`th request of a flood: its number in the path, a long query and a big
/// header. Every one is different, so the origin shows which arrived.
fn leaky(n: usize) -> (String, String) {
    let path = format!("/leak/{n:03}?q={}", "s".repeat(QUERY));
    (path, "x".repeat(LEAK))
}

/// The records with `reason`, once `n` came.
async fn refusals(proxy: &Proxy, n: usize) -> Vec<Value> {
    records_with(proxy, "upload_budget_exceeded", n).await
}

/// Which flood requests the origin saw, by number.
fn seen(targets: impl Iterator<Item = String>) -> Vec<usize> {
    targets
        .map(|t| t["/leak/".len().."/leak/".len() + 3].parse().unwrap())
        .collect()
}

/// The first refused request's answer and record: 403 `upload_budget_exceeded`, the
/// organization's budget as its rule, its URL, and no later request got through.
async fn assert_refused_from(proxy: &Proxy, answers: &[u16], url_of: impl Fn(usize) -> String) {
    let allowed = answers.iter().take_while(|s| **s == 200).count();
    assert!(allowed >= 1, "some requests fit: {answers:?}");
    assert!(
        answers[allowed..].iter().all(|s| *s == 403),
        "once one is refused, every later one is: {answers:?}\n{}",
        proxy.diagnostics()
    );
    let refused = FLOOD - allowed;
    assert!(refused >= 1, "the flood outgrew the budget: {answers:?}");
    let records = refusals(proxy, refused).await;
    let first = &records[0];
    assert_eq!(first["event"], "egress.denied", "{first}");
    assert_eq!(first["rule"], format!("upload_bytes = {BUDGET}"), "{first}");
    assert_eq!(first["policy_level"], "org", "{first}");
    assert_eq!(first["url"], url_of(allowed), "{first}");
}

#[tokio::test]
async fn plain_request_heads_reach_the_origin_only_up_to_the_budget() {
    let origin = Origin::start().await;
    let port = origin.port();
    let proxy = ProxyBuilder::new(org(port, Some(BUDGET as u64)))
        .policy(allowlist(None).to_string())
        .pin("sink.test")
        .audit_allowed()
        .start()
        .await;
    let mut conn = Conn::open(proxy.addr).await;
    let mut answers = Vec::new();
    for n in 0..FLOOD {
        let (path, leak) = leaky(n);
        let req = format!(
            "GET http://sink.test:{port}{path} HTTP/1.1\r\nHost: sink.test:{port}\r\nX-Leak: {leak}\r\n\r\n"
        );
        conn.send(req.as_bytes()).await;
        let resp = conn.read_response().await;
        if resp.status == 403 {
            assert_eq!(resp.json()["error"]["reason"], "upload_budget_exceeded");
        }
        answers.push(resp.status);
    }
    assert!(
        origin.http_bytes() <= BUDGET,
        "the origin read {} bytes of heads under a {BUDGET}-byte budget\n{}",
        origin.http_bytes(),
        proxy.diagnostics()
    );
    let url = |n: usize| format!("http://sink.test:{port}{}", leaky(n).0);
    assert_refused_from(&proxy, &answers, url).await;
    // No refused head reached the origin: it saw exactly the allowed ones, in order.
    let allowed = answers.iter().filter(|s| **s == 200).count();
    let got = seen(origin.requests().into_iter().map(|r| r.target));
    assert_eq!(got, (0..allowed).collect::<Vec<_>>());
    // The proxy's count of each allowed request is what the origin read.
    let up: u64 = proxy
        .audit_lines()
        .iter()
        .filter(|r| r["event"] == "egress.allowed")
        .map(|r| r["bytes_up"].as_u64().unwrap())
        .sum();
    assert_eq!(up as usize, origin.http_bytes(), "bytes_up is the wire");
}

#[tokio::test]
async fn without_a_budget_the_same_flood_reaches_the_origin_whole() {
    let origin = Origin::start().await;
    let port = origin.port();
    let proxy = ProxyBuilder::new(org(port, None))
        .policy(allowlist(None).to_string())
        .pin("sink.test")
        .start()
        .await;
    let mut conn = Conn::open(proxy.addr).await;
    for n in 0..FLOOD {
        let (path, leak) = leaky(n);
        let req = format!(
            "GET http://sink.test:{port}{path} HTTP/1.1\r\nHost: sink.test:{port}\r\nX-Leak: {leak}\r\n\r\n"
        );
        conn.send(req.as_bytes()).await;
        assert_eq!(conn.read_response().await.status, 200);
    }
    assert_eq!(origin.hits(), FLOOD);
    assert!(origin.http_bytes() > 4 * BUDGET, "{}", origin.http_bytes());
}

/// An organization inspecting `secure.test` on the test bed's origin port, with
/// `upload_bytes` if given.
fn inspecting(bed: &Testbed, upload_bytes: Option<usize>) -> ProxyBuilder {
    let mut org = Org::new()
        .allow_entry(r#"{ host = "secure.test", inspect = true }"#)
        .ports(&[bed.origin.port()])
        .loopback();
    if let Some(n) = upload_bytes {
        org = org.raw_line(&format!("[limits]\nupload_bytes = {n}"));
    }
    let policy = r#"{"type":"allowlist","allowed_domains":["secure.test"]}"#;
    bed.proxy(ProxyBuilder::new(org.to_toml()).policy(policy))
}

/// Send the flood inside one intercepted tunnel; the statuses.
async fn inner_flood(bed: &Testbed, proxy: &Proxy) -> Vec<u16> {
    let mut inner = bed.inner(proxy, &[]).await;
    let mut answers = Vec::new();
    for n in 0..FLOOD {
        let (path, leak) = leaky(n);
        let resp = inner.request("GET", &path, &[("X-Leak", &leak)], b"").await;
        if resp.status == 403 {
            assert_eq!(resp.json()["error"]["reason"], "upload_budget_exceeded");
        }
        answers.push(resp.status);
    }
    answers
}

#[tokio::test]
async fn inspected_request_heads_reach_the_origin_only_up_to_the_budget() {
    let bed = Testbed::start("budget-heads").await;
    let proxy = inspecting(&bed, Some(BUDGET)).start().await;
    let answers = inner_flood(&bed, &proxy).await;
    let origin = &bed.origin;
    assert!(
        origin.http_bytes() <= BUDGET,
        "the origin read {} bytes of heads under a {BUDGET}-byte budget\n{}",
        origin.http_bytes(),
        proxy.diagnostics()
    );
    let port = origin.port();
    let url = |n: usize| format!("https://secure.test:{port}{}", leaky(n).0);
    assert_refused_from(&proxy, &answers, url).await;
    let allowed = answers.iter().filter(|s| **s == 200).count();
    let got = seen(origin.requests().into_iter().map(|r| r.target));
    assert_eq!(got, (0..allowed).collect::<Vec<_>>());
    // The control: the same flood, no budget, all of it arrives.
    let bed = Testbed::start("budget-heads-none").await;
    let proxy = inspecting(&bed, None).start().await;
    let answers = inner_flood(&bed, &proxy).await;
    assert_eq!(answers, [200; FLOOD]);
    assert!(
        bed.origin.http_bytes() > 4 * BUDGET,
        "{}",
        bed.origin.http_bytes()
    );
}

/// A head with the body it declares must fit whole: one that fits alone but not with its
/// body is refused before either is sent.
#[tokio::test]
async fn a_head_that_fits_only_without_its_body_is_refused_before_anything_is_sent() {
    let origin = Origin::start().await;
    let port = origin.port();
    let proxy = proxy(port, 400).await;
    let post = |body: usize| {
        let mut req = format!(
            "POST http://sink.test:{port}/up HTTP/1.1\r\nHost: sink.test:{port}\r\nContent-Length: {body}\r\n\r\n"
        )
        .into_bytes();
        req.extend(vec![b'b'; body]);
        req
    };
    // Under 400 alone, over it with the head.
    let resp = send_raw(proxy.addr, &post(350)).await;
    let want = Denial::new(403, "upload_budget_exceeded").at("sink.test", port);
    assert_denied_response(&resp, &want, &proxy);
    assert_eq!(origin.connections(), 0, "{}", proxy.diagnostics());
    let record = &records_with(&proxy, "upload_budget_exceeded", 1).await[0];
    assert_eq!(record["rule"], "upload_bytes = 400", "{record}");
    // A small one fits, head and body.
    let resp = send_raw(proxy.addr, &post(10)).await;
    assert_eq!(resp.status, 200, "{resp:?}\n{}", proxy.diagnostics());
    assert_eq!(origin.requests()[0].body, vec![b'b'; 10]);
    assert!(origin.http_bytes() <= 400);
}
