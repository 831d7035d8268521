//! The row of the denial table: what a row says, and how it is checked.

use serde_json::Value;

use super::{assert_untouched, url};
use crate::support::client::{get_via_proxy, send_raw, Response};
use crate::support::expect::{assert_single_denial, Denial};
use crate::support::org::allowlist_json;
use crate::support::origin::Origin;
use crate::support::proxy::{Proxy, ProxyBuilder};

/// What a row sends.
enum Request {
    /// `GET http://HOST:PORT/` in absolute form, with the row's `X-Network-Policy` headers.
    Get(&'static str),
    /// These bytes, with `{port}` replaced by the target origin's port.
    Raw(&'static str),
}

/// One row: the proxy, the request, and the denial it must draw.
pub(super) struct Case {
    setup: fn(u16) -> ProxyBuilder,
    request: Request,
    /// The `X-Network-Policy` values sent, in order.
    headers: Vec<String>,
    /// Send to a second origin while the org lists only the first one's port.
    unlisted_port: bool,
    status: u16,
    /// The reason the answer and its record carry: one of these.
    reasons: Vec<&'static str>,
    /// The `host` of the body and record; their port is the target origin's.
    host: Option<&'static str>,
    level: Option<&'static str>,
    /// Further fields the record holds.
    record: Vec<(&'static str, Value)>,
    /// A name the same proxy then allows, with the same headers: the denial was the
    /// rule's, not a proxy that refuses everything.
    then_allowed: Option<&'static str>,
}

pub(super) fn get(setup: fn(u16) -> ProxyBuilder, host: &'static str) -> Case {
    Case::new(setup, Request::Get(host))
}

pub(super) fn raw(setup: fn(u16) -> ProxyBuilder, bytes: &'static str) -> Case {
    Case::new(setup, Request::Raw(bytes))
}

impl Case {
    fn new(setup: fn(u16) -> ProxyBuilder, request: Request) -> Case {
        Case {
            setup,
            request,
            headers: Vec::new(),
            unlisted_port: false,
            status: 0,
            reasons: Vec::new(),
            host: None,
            level: None,
            record: Vec::new(),
            then_allowed: None,
        }
    }

    pub(super) fn header(mut self, value: &str) -> Self {
        self.headers.push(value.to_string());
        self
    }

    pub(super) fn policy_header(self, names: &[&str]) -> Self {
        self.header(&allowlist_json(names))
    }

    pub(super) fn on_an_unlisted_port(mut self) -> Self {
        self.unlisted_port = true;
        self
    }

    pub(super) fn denied(self, status: u16, reason: &'static str) -> Self {
        self.denied_as_one_of(status, &[reason])
    }

    pub(super) fn denied_as_one_of(mut self, status: u16, reasons: &[&'static str]) -> Self {
        self.status = status;
        self.reasons = reasons.to_vec();
        self
    }

    pub(super) fn at(mut self, host: &'static str) -> Self {
        self.host = Some(host);
        self
    }

    pub(super) fn level(mut self, level: &'static str) -> Self {
        self.level = Some(level);
        self
    }

    pub(super) fn record_has(mut self, field: &'static str, value: impl Into<Value>) -> Self {
        self.record.push((field, value.into()));
        self
    }

    pub(super) fn then_allowed(mut self, host: &'static str) -> Self {
        self.then_allowed = Some(host);
        self
    }

    /// Start the origin(s) and the proxy, send the request, and check the denial, that
    /// no origin was reached, and the allowed name after it.
    pub(super) async fn check(self, name: &str) {
        let (listed, unlisted) = if self.unlisted_port {
            let listed = Origin::start_named("listed").await;
            (listed, Some(Origin::start_named("unlisted").await))
        } else {
            (Origin::start().await, None)
        };
        let target = unlisted.as_ref().unwrap_or(&listed);
        let proxy = (self.setup)(listed.port()).start().await;
        let resp = self.send(&proxy, target).await;
        self.assert_denial(name, &resp, target, &proxy).await;
        assert_untouched(name, target, &proxy);
        if unlisted.is_some() {
            assert_untouched(name, &listed, &proxy);
        }
        if let Some(host) = self.then_allowed {
            let ok = get_via_proxy(proxy.addr, &url(host, &listed), &self.header_pairs()).await;
            assert_eq!(ok.status, 200, "{name}: {ok:?}\n{}", proxy.diagnostics());
            assert_eq!(listed.hits(), 1, "{name}: {host}\n{}", proxy.diagnostics());
        }
    }

    fn header_pairs(&self) -> Vec<(&str, &str)> {
        let pairs = self.headers.iter();
        pairs.map(|v| ("X-Network-Policy", v.as_str())).collect()
    }

    async fn send(&self, proxy: &Proxy, target: &Origin) -> Response {
        match self.request {
            Request::Get(host) => {
                get_via_proxy(proxy.addr, &url(host, target), &self.header_pairs()).await
            }
            Request::Raw(bytes) => {
                let bytes = bytes.replace("{port}", &target.port().to_string());
                send_raw(proxy.addr, bytes.as_bytes()).await
            }
        }
    }

    /// The answer and the single record: status, a reason among the row's, and the
    /// host, port, level and fields the row names.
    async fn assert_denial(&self, name: &str, resp: &Response, target: &Origin, proxy: &Proxy) {
        let reason = resp.header("x-egress-denied").unwrap_or_default();
        assert!(
            self.reasons.contains(&reason),
            "{name}: X-Egress-Denied {reason:?}, expected one of {:?}: {resp:?}\n{}",
            self.reasons,
            proxy.diagnostics()
        );
        let mut want = Denial::new(self.status, reason).case(name);
        if let Some(host) = self.host {
            want = want.at(host, target.port());
        }
        if let Some(level) = self.level {
            want = want.level(level);
        }
        let record = assert_single_denial(resp, &want, proxy).await;
        for (field, value) in &self.record {
            assert_eq!(&record[field], value, "{name}: {field}\n{record}");
        }
    }
}
