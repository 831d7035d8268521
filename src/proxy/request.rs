//! The explicit proxy's adapter to the judgement: what an HTTP request asks, read into
//! the listener-neutral [`Ask`] (docs/reference/answers.md, "Order of judgement"): its
//! head's size, its target (step 1) and the `Host` check, its upgrade, its credentials
//! (`Proxy-Authorization`) and its `X-Network-Policy`, as they came. A request read inside
//! an intercepted tunnel is read the same way, against the tunnel's target.

use std::borrow::Cow;

use hyper::ext::Protocol;
use hyper::header::{
    HeaderMap, HeaderName, HeaderValue, CONTENT_LENGTH, HOST, PROXY_AUTHORIZATION, UPGRADE,
};
use hyper::{Method, Request, Version};

use crate::dlp::{FoundIn, Hit};
use crate::judgement::ask::{self, Ask, Credentials, Exposed, Narrowing, What};
use crate::judgement::record::Asked;
use crate::judgement::refusal::Refusal;
use crate::judgement::request::split_host_port;
use crate::policy::{Host, Reason, Target};
use crate::session;

/// The header a client uses to narrow one request.
pub(crate) const NETWORK_POLICY_HEADER: &str = "x-network-policy";

/// The same, as a header name: looked up on every request, it is not parsed from its
/// text each time.
const NETWORK_POLICY: HeaderName = HeaderName::from_static(NETWORK_POLICY_HEADER);

/// What one pass over a request's header fields finds: the head's size, and the fields
/// the question reads (each a compare in the pass, not a lookup of its own).
struct Head<'r> {
    size: usize,
    upgrade: bool,
    host: Fields<'r>,
    auth: Fields<'r>,
    policy: Fields<'r>,
    length: Option<&'r HeaderValue>,
}

/// How many fields of one name, and the first.
#[derive(Default, Clone, Copy)]
struct Fields<'r> {
    count: usize,
    first: Option<&'r HeaderValue>,
}

impl<'r> Fields<'r> {
    fn add(&mut self, value: &'r HeaderValue) {
        self.count += 1;
        self.first.get_or_insert(value);
    }
}

/// Refuse a request head larger than `max` bytes (`--max-header-bytes`, 431). The first
/// head of a connection is measured before hyper reads it (`crate::proxy::preflight`); this
/// holds the later heads of a kept-alive connection to the same limit, counting the
/// request target and every header as they appear on the wire. The same pass notes the
/// fields the question reads ([`Head`]).
fn head_within<B>(req: &Request<B>, max: usize) -> Result<Head<'_>, Refusal> {
    let uri = req.uri();
    let target = uri.path_and_query().map_or(0, |p| p.as_str().len())
        + uri.authority().map_or(0, |a| a.as_str().len())
        + uri.scheme_str().map_or(0, |s| s.len() + 3);
    let mut head = Head {
        size: req.method().as_str().len() + target + 12,
        upgrade: false,
        host: Fields::default(),
        auth: Fields::default(),
        policy: Fields::default(),
        length: None,
    };
    for (name, value) in req.headers() {
        head.size += name.as_str().len() + value.len() + 4;
        if name == HOST {
            head.host.add(value);
        } else if name == PROXY_AUTHORIZATION {
            head.auth.add(value);
        } else if name == CONTENT_LENGTH {
            head.length.get_or_insert(value);
        } else if name == UPGRADE {
            head.upgrade = true;
        } else if name == NETWORK_POLICY {
            head.policy.add(value);
        }
    }
    if head.size > max {
        return Err(Refusal::head_too_large(format!(
            "request head larger than {max} bytes"
        )));
    }
    Ok(head)
}

/// The one upgrade the proxy passes on is a WebSocket's (docs/reference/inspection.md,
/// "WebSocket"): a request asking for any other (`h2c`, anything else) is refused
/// `invalid_request`, rather than forwarded without it.
/// Whether it is a WebSocket's, to be forwarded with its upgrade.
fn upgrade<B>(req: &Request<B>, target: &Target) -> Result<bool, Refusal> {
    let Some(value) = req.headers().get(UPGRADE) else {
        return Ok(false);
    };
    if !asks_upgrade(req.headers()) {
        // `Upgrade` without `Connection: upgrade` asks for nothing: it is removed with
        // the other hop-by-hop headers.
        return Ok(false);
    }
    let websocket = req.method() == Method::GET
        && req.headers().get_all(UPGRADE).iter().count() == 1
        && value.as_bytes().eq_ignore_ascii_case(b"websocket");
    if websocket {
        return Ok(true);
    }
    Err(
        Refusal::new(Reason::InvalidRequest, target.host.to_string(), target.port).with_detail(
            "the only upgrade passed on is a WebSocket's (GET with `Upgrade: websocket`)",
        ),
    )
}

/// The request's W3C `traceparent` header, for its span (the header is forwarded as it
/// came: docs/reference/opentelemetry.md).
pub(crate) fn traceparent<B>(req: &Request<B>) -> Option<&[u8]> {
    req.headers().get("traceparent").map(HeaderValue::as_bytes)
}

/// Whether `Connection` names `upgrade`: the request asks to switch protocols.
pub(crate) fn asks_upgrade(headers: &HeaderMap) -> bool {
    headers
        .get_all(hyper::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|token| token.trim().eq_ignore_ascii_case("upgrade"))
}

/// The destination of a request: an absolute-form `http://` URL, or a `CONNECT`
/// authority. Refuses anything else with `invalid_request`, a host that does not
/// survive normalisation with `invalid_host`, and a `Host` header naming another
/// authority with `host_mismatch`.
fn target<B>(req: &Request<B>, head: &Head<'_>) -> Result<Target, Refusal> {
    let uri = req.uri();
    let connect = req.method() == Method::CONNECT;
    let (authority, default_port) = if connect {
        if uri.scheme().is_some() || uri.path_and_query().is_some_and(|p| p.as_str() != "/") {
            return Err(Refusal::malformed("CONNECT needs a host:port target"));
        }
        (uri.authority(), None)
    } else {
        match uri.scheme_str() {
            Some("http") => {}
            Some(other) => {
                return Err(Refusal::malformed(format!(
                    "scheme `{other}` is not forwarded; use CONNECT for https"
                )))
            }
            None => {
                return Err(Refusal::malformed(
                    "a proxy request needs an absolute URL (http://host/path)",
                ))
            }
        }
        (uri.authority(), Some(80))
    };
    let authority = authority
        .ok_or_else(|| Refusal::malformed("the request target has no host"))?
        .as_str();
    if authority.contains('@') {
        return Err(Refusal::malformed(
            "userinfo in the request target is refused",
        ));
    }
    let (host_text, port) = split_host_port(authority).ok_or_else(|| {
        Refusal::malformed(format!("cannot read host and port from `{authority}`"))
    })?;
    let port = match port.or(default_port) {
        Some(0) => return Err(Refusal::malformed("port 0 is not a destination")),
        Some(p) => p,
        None => return Err(Refusal::malformed("CONNECT needs a port")),
    };
    let host = Host::parse(host_text).map_err(|e| {
        Refusal::new(Reason::InvalidHost, host_text.to_string(), port)
            .with_detail(format!("invalid host: {e}"))
    })?;
    let target = Target { host, port };
    check_host_headers(req.headers(), head, authority, &target)?;
    Ok(target)
}

/// The destination of a request read inside an intercepted tunnel: the tunnel's own
/// (docs/reference/inspection.md). Its `Host` (and an absolute-form target's authority)
/// must name the `CONNECT` host: anything else is `host_mismatch`, so no request is
/// fronted through a tunnel judged for another name.
fn inner_target<B>(req: &Request<B>, head: &Head<'_>, tunnel: &Target) -> Result<Target, Refusal> {
    let mismatch = || {
        Refusal::new(Reason::HostMismatch, tunnel.host.to_string(), tunnel.port)
            .with_detail("the request names another host than the tunnel's CONNECT host")
    };
    if req.method() == Method::CONNECT {
        // An h2 stream is a request whose method the rules judge: `CONNECT` is never
        // one they allow (docs/reference/inspection.md, "HTTP/2"). An extended
        // `CONNECT` for a WebSocket never gets here (`crate::proxy::websocket` makes it
        // the HTTP/1.1 handshake it stands for); one for another `:protocol` asks for
        // another upgrade, refused as an HTTP/1.1 client's would be.
        if req.extensions().get::<Protocol>().is_some() {
            let refusal =
                Refusal::new(Reason::InvalidRequest, tunnel.host.to_string(), tunnel.port);
            let only =
                "the only extended CONNECT passed on is a WebSocket's (`:protocol websocket`)";
            return Err(refusal.with_detail(only));
        }
        if req.version() == Version::HTTP_2 {
            return Err(Refusal::new(
                Reason::MethodNotAllowed,
                tunnel.host.to_string(),
                tunnel.port,
            )
            .with_detail("CONNECT inside a tunnel is refused"));
        }
        return Err(Refusal::malformed("CONNECT inside a tunnel is refused"));
    }
    if let Some(authority) = req.uri().authority() {
        let named = split_host_port(authority.as_str())
            .and_then(|(h, p)| Some((Host::parse(h).ok()?, p.unwrap_or(tunnel.port))));
        if named.is_none_or(|(h, p)| h != tunnel.host || p != tunnel.port) {
            return Err(mismatch());
        }
    }
    if head.host.count == 0 {
        // An h2 request names its host in `:authority` (checked above), and `Host` is
        // optional.
        if req.version() == Version::HTTP_2 && req.uri().authority().is_some() {
            return Ok(tunnel.clone());
        }
        return Err(
            Refusal::new(Reason::InvalidRequest, tunnel.host.to_string(), tunnel.port)
                .with_detail("a request inside a tunnel needs a Host header"),
        );
    }
    let authority = tunnel.host.authority(tunnel.port);
    check_host_headers(req.headers(), head, &authority, tunnel).map_err(|r| match r.reason {
        Reason::HostMismatch => mismatch(),
        _ => r,
    })?;
    Ok(tunnel.clone())
}

/// Every `Host` header must name the target's authority: a client that says one thing in
/// the URL and another in `Host` is trying to make someone downstream see a different
/// destination than the one judged here. A `Host` with the very text of the request
/// target's `authority` (the usual case) names it without being parsed again.
fn check_host_headers(
    headers: &HeaderMap,
    head: &Head<'_>,
    authority: &str,
    target: &Target,
) -> Result<(), Refusal> {
    let names = |value: &HeaderValue| {
        value.as_bytes() == authority.as_bytes()
            || value
                .to_str()
                .ok()
                .and_then(split_host_port)
                .and_then(|(h, p)| Some((Host::parse(h).ok()?, p.unwrap_or(target.port))))
                .is_some_and(|(h, p)| h == target.host && p == target.port)
    };
    let mismatch = || {
        Refusal::new(Reason::HostMismatch, target.host.to_string(), target.port)
            .with_detail("the Host header names another authority than the request target")
    };
    // The usual case, one field or none, from the pass over the head.
    if head.host.count <= 1 {
        return match head.host.first {
            Some(value) if !names(value) => Err(mismatch()),
            _ => Ok(()),
        };
    }
    if !headers.get_all(HOST).iter().all(names) {
        return Err(mismatch());
    }
    Err(Refusal::malformed("more than one Host header"))
}

/// The client's `X-Network-Policy`, as it came: the judge reads it (step 3).
fn narrowing<'r>(head: &Head<'r>) -> Narrowing<'r> {
    match (head.policy.count, head.policy.first) {
        (0, _) | (_, None) => Narrowing::Absent,
        (1, Some(value)) => match value.to_str() {
            Ok(text) => Narrowing::One(text),
            Err(_) => Narrowing::NotText,
        },
        _ => Narrowing::Several,
    }
}

/// The credentials of `Proxy-Authorization`, as presented.
fn credentials(head: &Head<'_>) -> Credentials {
    match session::credentials_of(head.auth.count, head.auth.first) {
        Ok(None) => Credentials::None,
        Ok(Some((id, token))) => Credentials::Presented { id, token },
        Err(why) => Credentials::Unreadable(why),
    }
}

/// A request's `Content-Length`, when it declares one that parses.
pub(crate) fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers.get(CONTENT_LENGTH).and_then(length)
}

/// A `Content-Length` value that parses.
fn length(value: &HeaderValue) -> Option<u64> {
    value
        .to_str()
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
}

/// A method's name; the standard ones borrowed, so the common request allocates
/// nothing for it.
pub(crate) fn method_name(method: &Method) -> ask::Method {
    let name = match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        Method::PATCH => "PATCH",
        Method::CONNECT => "CONNECT",
        Method::TRACE => "TRACE",
        ref other => return Cow::Owned(other.as_str().to_string()),
    };
    Cow::Borrowed(name)
}

/// What `req` asks, read on a connection of its own (`inside`: `None`) or inside an
/// intercepted tunnel to `inside`; `url` gives its records' URL. A head over
/// `max_head` bytes, a target that does not read, a `Host` that names another
/// authority and an upgrade other than a WebSocket's stop here, before the judge.
pub(crate) fn ask<'r, B: Sync>(
    req: &'r Request<B>,
    inside: Option<&Target>,
    max_head: usize,
    url: Option<&'r (dyn Fn() -> String + Send + Sync)>,
) -> Result<Ask<'r>, Refusal> {
    let head = head_within(req, max_head)?;
    let target = match inside {
        None => target(req, &head)?,
        Some(tunnel) => inner_target(req, &head, tunnel)?,
    };
    let connect = req.method() == Method::CONNECT && inside.is_none();
    let what = match connect {
        true => What::Tunnel,
        false => What::Request(ask::Request {
            method: method_name(req.method()),
            path: req.uri().path_and_query().map_or("/", |p| p.as_str()),
            declared_length: head.length.and_then(length),
            websocket: head.upgrade && upgrade(req, &target)?,
        }),
    };
    Ok(Ask {
        target,
        credentials: match inside {
            None => credentials(&head),
            Some(_) => Credentials::None,
        },
        what,
        narrowing: narrowing(&head),
        head_bytes: head.size,
        url,
        exposed: Some(req),
    })
}

/// A request's line and header fields, for the canaries and detectors: its path and
/// query (the authority is the target, looked at by the judge), then each field's value
/// but the two the proxy takes for itself and never sends on, `Proxy-Authorization` (a
/// session's own token) and `X-Network-Policy` (docs/reference/dlp.md, "Where the proxy
/// looks"): nothing in them can leave, and a session's token is never a secret found.
impl<B> Exposed for Request<B> {
    fn scan(&self, find: &dyn Fn(&[u8], FoundIn) -> Option<Hit>) -> Option<Hit> {
        let target = self.uri().path_and_query().map_or("", |p| p.as_str());
        find(target.as_bytes(), FoundIn::Url).or_else(|| {
            self.headers()
                .iter()
                .filter(|(name, _)| **name != PROXY_AUTHORIZATION && **name != NETWORK_POLICY)
                .find_map(|(_, value)| find(value.as_bytes(), FoundIn::Header))
        })
    }
}

/// A request's audit record's `Asked`: a `CONNECT`, or a request with its method.
pub(crate) fn asked<B>(req: &Request<B>) -> Asked {
    match *req.method() {
        Method::CONNECT => Asked::Connect,
        ref m => Asked::Request(method_name(m)),
    }
}

/// The URL of a plain-HTTP request, for the audit record; `None` for `CONNECT`.
pub(crate) fn plain_url<B>(req: &Request<B>) -> Option<String> {
    (req.method() != Method::CONNECT).then(|| req.uri().to_string())
}

/// The URL of a request read inside an intercepted tunnel to `target`.
pub(crate) fn inspected_url<B>(req: &Request<B>, target: &Target) -> String {
    let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
    crate::judgement::record::inspected_url(path, target)
}
