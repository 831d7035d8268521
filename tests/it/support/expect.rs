//! Assertions on denials: the answer (docs/reference/answers.md) and its audit record
//! (docs/reference/audit-log.md).

use serde_json::Value;

use super::client::Response;
use super::proxy::Proxy;

/// What a denial must look like.
pub(crate) struct Denial<'a> {
    pub status: u16,
    pub reason: &'a str,
    /// Expected `host` in the body and audit record, when the test knows it.
    pub host: Option<&'a str>,
    pub port: Option<u16>,
    /// Expected `policy_level` in the audit record, when the order of judgement fixes it.
    pub level: Option<&'a str>,
    /// The table row this denial belongs to, named in every failure message.
    pub case: Option<&'a str>,
}

impl<'a> Denial<'a> {
    pub(crate) fn new(status: u16, reason: &'a str) -> Denial<'a> {
        Denial {
            status,
            reason,
            host: None,
            port: None,
            level: None,
            case: None,
        }
    }

    pub(crate) fn at(mut self, host: &'a str, port: u16) -> Self {
        self.host = Some(host);
        self.port = Some(port);
        self
    }

    pub(crate) fn level(mut self, level: &'a str) -> Self {
        self.level = Some(level);
        self
    }

    /// Name the table row in every failure message.
    pub(crate) fn case(mut self, name: &'a str) -> Self {
        self.case = Some(name);
        self
    }

    /// `case NAME: ` for a row's denial, nothing otherwise.
    fn label(&self) -> String {
        self.case.map(|c| format!("case {c}: ")).unwrap_or_default()
    }
}

/// Assert the answer: status, `X-Egress-Denied`, and the JSON error body.
/// Returns the body's `request_id`.
pub(crate) fn assert_denied_response(resp: &Response, want: &Denial, proxy: &Proxy) -> String {
    let ctx = || {
        format!(
            "{}response: {resp:?}\n{}",
            want.label(),
            proxy.diagnostics()
        )
    };
    assert_eq!(resp.status, want.status, "status\n{}", ctx());
    assert_eq!(
        resp.header("x-egress-denied"),
        Some(want.reason),
        "X-Egress-Denied header\n{}",
        ctx()
    );
    let body: Value = serde_json::from_slice(&resp.body)
        .unwrap_or_else(|e| panic!("denial body is not JSON ({e})\n{}", ctx()));
    let error = &body["error"];
    assert_eq!(error["type"], "egress_denied", "error.type\n{}", ctx());
    assert_eq!(error["reason"], want.reason, "error.reason\n{}", ctx());
    if let Some(host) = want.host {
        assert_eq!(error["host"], host, "error.host\n{}", ctx());
    }
    if let Some(port) = want.port {
        assert_eq!(error["port"], port, "error.port\n{}", ctx());
    }
    let id = error["request_id"]
        .as_str()
        .unwrap_or_else(|| panic!("error.request_id is not a string\n{}", ctx()));
    assert!(!id.is_empty(), "empty request_id\n{}", ctx());
    id.to_string()
}

/// Assert one audit record describes this denial (and the same request id).
pub(crate) fn assert_denied_record(record: &Value, want: &Denial, request_id: &str, proxy: &Proxy) {
    let ctx = || format!("{}record: {record}\n{}", want.label(), proxy.diagnostics());
    assert_eq!(record["event"], "egress.denied", "event\n{}", ctx());
    assert_eq!(record["reason"], want.reason, "reason\n{}", ctx());
    assert_eq!(record["request_id"], request_id, "request_id\n{}", ctx());
    if let Some(level) = want.level {
        assert_eq!(record["policy_level"], level, "policy_level\n{}", ctx());
    }
    if let Some(host) = want.host {
        assert_eq!(record["host"], host, "host\n{}", ctx());
    }
    if let Some(port) = want.port {
        assert_eq!(record["port"], port, "port\n{}", ctx());
    }
}

/// The whole check for a single denied request: the answer, exactly one audit
/// record, and that record matching. Returns the record.
pub(crate) async fn assert_single_denial(
    resp: &Response,
    want: &Denial<'_>,
    proxy: &Proxy,
) -> Value {
    let id = assert_denied_response(resp, want, proxy);
    let record = proxy.single_audit().await;
    assert_denied_record(&record, want, &id, proxy);
    record
}

/// Assert a refusal whose reason is one of `reasons` (for inputs where the order of judgement lets the
/// proxy call a target either unparseable or an invalid host). Returns the body's
/// `request_id` and the reason seen.
pub(crate) fn assert_refused_as_one_of(
    resp: &Response,
    status: u16,
    reasons: &[&str],
    proxy: &Proxy,
) -> (String, String) {
    let reason = resp
        .header("x-egress-denied")
        .unwrap_or_default()
        .to_string();
    assert!(
        reasons.contains(&reason.as_str()),
        "X-Egress-Denied {reason:?}, expected one of {reasons:?}: {resp:?}\n{}",
        proxy.diagnostics()
    );
    let id = assert_denied_response(resp, &Denial::new(status, &reason), proxy);
    (id, reason)
}

/// Assert the audit log holds exactly one `egress.denied` record per refusal in
/// `refusals` (`(request_id, reason)`), and nothing else: one attempt, one line.
pub(crate) async fn assert_denials_logged(proxy: &Proxy, refusals: &[(String, String)]) {
    let records = proxy.expect_audit_count(refusals.len()).await;
    for (id, reason) in refusals {
        let found = records
            .iter()
            .find(|r| r["request_id"] == id.as_str())
            .unwrap_or_else(|| {
                panic!(
                    "no audit record for request {id} ({reason})\n{}",
                    proxy.diagnostics()
                )
            });
        let ctx = || format!("record: {found}\n{}", proxy.diagnostics());
        assert_eq!(found["event"], "egress.denied", "event\n{}", ctx());
        assert_eq!(found["reason"], reason.as_str(), "reason\n{}", ctx());
    }
}
