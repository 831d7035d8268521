//! The OCSF event a record is written as (docs/reference/audit-log.md, "OCSF"): its
//! objects, in the order they are written, `unmapped` last, for the chain to close.

use std::net::SocketAddr;

use serde::Serialize;

use super::{activity, outcome, time_ms, Class};
use crate::audit::{Record, Via};

/// A record as an HTTP, Network or DNS Activity event. `category_uid` comes first: a
/// line that begins with it is read as OCSF ([`super::is_ocsf`]).
#[derive(Serialize)]
pub(super) struct Event<'a> {
    category_uid: u8,
    category_name: &'static str,
    class_uid: u16,
    class_name: &'static str,
    activity_id: u8,
    activity_name: &'static str,
    type_uid: u32,
    type_name: String,
    time: u64,
    severity_id: u8,
    severity: &'static str,
    status_id: u8,
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    status_detail: Option<&'a str>,
    action_id: u8,
    action: &'static str,
    disposition_id: u8,
    disposition: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    src_endpoint: Option<Endpoint<'a>>,
    #[serde(skip_serializing_if = "Endpoint::is_empty")]
    dst_endpoint: Endpoint<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    http_request: Option<HttpRequest<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    url: Option<Url<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    query: Option<Query<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    traffic: Option<Traffic>,
    #[serde(skip_serializing_if = "Option::is_none")]
    firewall_rule: Option<Named<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    actor: Option<Actor<'a>>,
    unmapped: Unmapped<'a>,
}

#[derive(Serialize, Default)]
pub(super) struct Endpoint<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    hostname: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ip: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    port: Option<u16>,
}

impl Endpoint<'_> {
    fn is_empty(&self) -> bool {
        self.hostname.is_none() && self.ip.is_none() && self.port.is_none()
    }
}

#[derive(Serialize)]
pub(super) struct HttpRequest<'a> {
    http_method: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    url: Option<Url<'a>>,
}

#[derive(Serialize)]
pub(super) struct Url<'a> {
    url_string: &'a str,
}

#[derive(Serialize)]
pub(super) struct Query<'a> {
    hostname: &'a str,
}

#[derive(Serialize)]
pub(super) struct Traffic {
    #[serde(skip_serializing_if = "Option::is_none")]
    bytes_out: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bytes_in: Option<u64>,
}

#[derive(Serialize)]
pub(super) struct Named<'a> {
    name: &'a str,
}

#[derive(Serialize)]
pub(super) struct Actor<'a> {
    session: Uid<'a>,
}

#[derive(Serialize)]
pub(super) struct Uid<'a> {
    uid: &'a str,
}

/// The record's fields with no OCSF place (or whose place would not give them back
/// unchanged).
#[derive(Serialize)]
pub(super) struct Unmapped<'a> {
    event: &'a str,
    request_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    ts: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    client: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    method: Option<&'a str>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    url_truncated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    policy_level: Option<&'a str>,
    shared_hosting: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    dlp: Option<&'a crate::dlp::Hit>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cause: Option<&'a str>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    intercepted: bool,
    via: Via,
    #[serde(skip_serializing_if = "Option::is_none")]
    approval_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    decision: Option<&'a str>,
}

/// `client` as an endpoint, when its text comes back from the endpoint's `ip` and
/// `port` unchanged.
fn client_endpoint(client: &str) -> Option<Endpoint<'_>> {
    let addr: SocketAddr = client.parse().ok()?;
    // As the reader builds it back: an IPv6 scope (`%2`) has no place in `ip`.
    let back = SocketAddr::new(addr.ip(), addr.port());
    (back.to_string() == client).then(|| Endpoint {
        hostname: None,
        ip: Some(addr.ip().to_string()),
        port: Some(addr.port()),
    })
}

impl<'a> Event<'a> {
    pub(super) fn of(rec: &'a Record) -> Event<'a> {
        let class = Class::of(&rec.method);
        let (category_uid, category_name) = class.category();
        let (activity_id, activity_name) = activity(class, rec.event, &rec.method);
        let o = outcome(rec.event);
        let time = time_ms(&rec.ts);
        let src_endpoint = client_endpoint(&rec.client);
        let url = rec.url.as_deref().map(|url_string| Url { url_string });
        let (http_request, url) = match class {
            Class::Http => (
                Some(HttpRequest {
                    http_method: &rec.method,
                    url,
                }),
                None,
            ),
            _ => (None, url),
        };
        let traffic = (rec.bytes_up.is_some() || rec.bytes_down.is_some()).then_some(Traffic {
            bytes_out: rec.bytes_up,
            bytes_in: rec.bytes_down,
        });
        let host = (!rec.host.is_empty()).then_some(rec.host.as_str());
        Event {
            category_uid,
            category_name,
            class_uid: class.uid(),
            class_name: class.name(),
            activity_id,
            activity_name,
            type_uid: u32::from(class.uid()) * 100 + u32::from(activity_id),
            type_name: format!("{}: {activity_name}", class.name()),
            time: time.unwrap_or(0),
            severity_id: o.severity.0,
            severity: o.severity.1,
            status_id: o.status.0,
            status: o.status.1,
            status_detail: rec.reason,
            action_id: o.action.0,
            action: o.action.1,
            disposition_id: o.disposition.0,
            disposition: o.disposition.1,
            dst_endpoint: Endpoint {
                hostname: host,
                ip: rec.resolved_ip.clone(),
                port: rec.port,
            },
            http_request,
            url,
            query: match class {
                Class::Dns => host.map(|hostname| Query { hostname }),
                _ => None,
            },
            traffic,
            firewall_rule: rec.rule.as_deref().map(|name| Named { name }),
            actor: rec.session.as_deref().map(|uid| Actor {
                session: Uid { uid },
            }),
            unmapped: Unmapped {
                event: rec.event,
                request_id: &rec.request_id,
                ts: time.is_none().then_some(rec.ts.as_str()),
                client: match src_endpoint {
                    None if !rec.client.is_empty() => Some(&rec.client),
                    _ => None,
                },
                method: match class {
                    Class::Network if !rec.method.is_empty() => Some(&rec.method),
                    _ => None,
                },
                url_truncated: rec.url_truncated,
                policy_level: rec.policy_level,
                shared_hosting: rec.shared_hosting,
                dlp: rec.dlp.as_ref(),
                cause: rec.cause,
                intercepted: rec.intercepted,
                via: rec.via,
                approval_id: rec.approval_id.as_deref(),
                decision: rec.decision,
            },
            src_endpoint,
        }
    }
}

/// A checkpoint as an Event Log Activity event.
#[derive(Serialize)]
pub(super) struct Checkpoint<'a> {
    category_uid: u8,
    category_name: &'static str,
    class_uid: u16,
    class_name: &'static str,
    activity_id: u8,
    activity_name: &'static str,
    type_uid: u32,
    type_name: &'static str,
    time: u64,
    severity_id: u8,
    severity: &'static str,
    status_id: u8,
    status: &'static str,
    log_name: &'static str,
    unmapped: CheckpointUnmapped<'a>,
}

#[derive(Serialize)]
pub(super) struct CheckpointUnmapped<'a> {
    event: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    ts: Option<&'a str>,
    key: &'a str,
}

impl<'a> Checkpoint<'a> {
    pub(super) fn of(ts: &'a str, key: &'a str) -> Checkpoint<'a> {
        let class = Class::EventLog;
        let time = time_ms(ts);
        Checkpoint {
            category_uid: class.category().0,
            category_name: class.category().1,
            class_uid: class.uid(),
            class_name: class.name(),
            activity_id: 99,
            activity_name: "Other",
            type_uid: 100_899,
            type_name: "Event Log Activity: Other",
            time: time.unwrap_or(0),
            severity_id: 1,
            severity: "Informational",
            status_id: 1,
            status: "Success",
            log_name: "egress-proxy audit log",
            unmapped: CheckpointUnmapped {
                event: "audit.checkpoint",
                ts: time.is_none().then_some(ts),
                key,
            },
        }
    }
}
