//! The head upstream sees (docs/reference/answers.md, "What upstream sees"): hop-by-hop
//! headers stripped, `Host` rewritten to the approved authority, `[[credentials]]` set
//! over TLS only, the request target in origin form; and its length on the wire, which
//! the upload budget counts (docs/reference/policy-files.md, "Upload budget").

use std::sync::LazyLock;

use bytes::Bytes;
use hyper::body::Body as HttpBody;
use hyper::header::{
    Entry, HeaderMap, HeaderName, HeaderValue, CONNECTION, CONTENT_LENGTH, HOST,
    PROXY_AUTHENTICATE, PROXY_AUTHORIZATION, TE, TRAILER, TRANSFER_ENCODING, UPGRADE,
};
use hyper::http::request::Parts;
use hyper::http::uri::PathAndQuery;
use hyper::{Method, Uri, Version};

use crate::judgement::approved::{Approved, Judged};
use crate::policy::{Host, NormalPath};

/// Headers that describe one hop and are never forwarded
/// (docs/reference/answers.md, "What upstream sees"), besides those the
/// `Connection` header names. `X-Network-Policy` is ours and stops here too. `Connection`
/// comes first: [`strip_hop_by_hop`] reads it before removing it.
static HOP_BY_HOP: LazyLock<[HeaderName; 10]> = LazyLock::new(|| {
    [
        CONNECTION,
        HeaderName::from_static("keep-alive"),
        HeaderName::from_static("proxy-connection"),
        PROXY_AUTHENTICATE,
        PROXY_AUTHORIZATION,
        TE,
        TRAILER,
        TRANSFER_ENCODING,
        UPGRADE,
        HeaderName::from_static(crate::proxy::request::NETWORK_POLICY_HEADER),
    ]
});

/// Make `parts` (a client's request head) the head upstream is sent for `approved`.
/// Inlined into its one caller on the request path (`forward::prepare`): thin LTO's
/// partitioning left it out of line once, for about 200 instructions a request
/// (docs/development.md, `benches/instructions.sh`).
#[inline]
pub(crate) fn rewrite(parts: &mut Parts, approved: &Approved) {
    // A WebSocket handshake's upgrade is this hop's to pass on, as the client asked
    // for it (docs/reference/inspection.md, "WebSocket"); every other is stripped.
    let upgrade = approved
        .websocket
        .then(|| parts.headers.get(UPGRADE).cloned())
        .flatten();
    strip_hop_by_hop(&mut parts.headers);
    if let Some(value) = upgrade {
        parts
            .headers
            .insert(CONNECTION, HeaderValue::from_static("upgrade"));
        parts.headers.insert(UPGRADE, value);
    }
    let tls = approved.upstream_tls.is_some();
    let default_port = if tls { 443 } else { 80 };
    let target = &approved.target;
    set_host(&mut parts.headers, &target.host, target.port, default_port);
    // `[[credentials]]` of the approved host, replacing what the client sent, and only
    // over TLS (docs/reference/inspection.md, "Credentials"): a plain-HTTP request gets
    // the client's header of that name removed, never the credential. Set after the
    // client's headers are taken apart, so only the approved host ever gets them.
    approved
        .policies
        .credentials
        .apply(&target.host, &mut parts.headers, tls);
    let judged = match &approved.judged {
        Judged::Path(path) => Some(path),
        _ => None,
    };
    parts.uri = origin_form(&parts.uri, judged);
    // An h2 stream's head is built (and paid for) as HTTP/1.1's, and goes upstream over
    // h2 where the origin offers it (docs/reference/inspection.md, "HTTP/2").
    if parts.version == Version::HTTP_2 {
        parts.version = Version::HTTP_11;
        parts.extensions.insert(super::sender::WantsH2);
    }
}

/// Make `parts`, already rewritten for upstream, a request to a parent proxy for
/// `authority` (docs/reference/parent-proxy.md): the target in absolute form, and the
/// parent's `Proxy-Authorization` (the client's own never gets this far: it is
/// hop-by-hop). `Host` stays the approved name.
pub(crate) fn through_parent(
    parts: &mut Parts,
    authority: &str,
    authorization: Option<&HeaderValue>,
) {
    let path_and_query = parts
        .uri
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    let absolute = Uri::builder()
        .scheme("http")
        .authority(authority)
        .path_and_query(path_and_query)
        .build();
    match absolute {
        Ok(uri) => parts.uri = uri,
        // An approved host's authority always parses; were it not to, the parent would
        // get an origin-form target and answer 400: nothing is sent elsewhere.
        Err(e) => tracing::warn!(%authority, error = %e, "cannot build an absolute-form target"),
    }
    if let Some(value) = authorization {
        parts.headers.insert(PROXY_AUTHORIZATION, value.clone());
    }
}

/// The bytes hyper's HTTP/1.1 client writes for `parts` sent with `body`: the request
/// line, each header field, the blank line, and the framing header it adds itself
/// (hyper's `Client::set_length`): `content-length` for a body of known length that
/// has none, `transfer-encoding: chunked` for one of unknown length. A sum of lengths,
/// no copy: it runs on every forwarded request. The unit tests hold it to what hyper
/// writes.
pub(crate) fn wire_len<B: HttpBody>(parts: &Parts, body: &B) -> u64 {
    const VERSION: usize = "HTTP/1.1".len();
    let uri = &parts.uri;
    // The absolute form (to a parent proxy) adds `scheme://authority`.
    let absolute = match (uri.scheme_str(), uri.authority()) {
        (Some(scheme), Some(authority)) => scheme.len() + 3 + authority.as_str().len(),
        _ => 0,
    };
    let target = absolute + uri.path().len() + uri.query().map_or(0, |q| q.len() + 1);
    let line = parts.method.as_str().len() + 1 + target + 1 + VERSION + 2;
    let fields: usize = parts
        .headers
        .iter()
        .map(|(name, value)| name.as_str().len() + 2 + value.len() + 2)
        .sum();
    (line + fields + 2 + framing_len(parts, body)) as u64
}

/// The framing header hyper adds to `parts`, if any (`transfer-encoding` is never among
/// `parts`: it is hop-by-hop).
fn framing_len<B: HttpBody>(parts: &Parts, body: &B) -> usize {
    if body.is_end_stream() || parts.headers.contains_key(CONTENT_LENGTH) {
        return 0;
    }
    match body.size_hint().exact() {
        Some(n) => "content-length: ".len() + decimal_digits(n) + 2,
        None if parts.version == Version::HTTP_11
            && !matches!(parts.method, Method::GET | Method::HEAD | Method::CONNECT) =>
        {
            "transfer-encoding: chunked\r\n".len()
        }
        None => 0,
    }
}

fn decimal_digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// About what a response head takes on the wire: its headers plus a status line.
/// Counted into `bytes_down` so a body-less answer still shows its size.
pub(crate) fn response_len(headers: &HeaderMap) -> u64 {
    let lines: usize = headers
        .iter()
        .map(|(n, v)| n.as_str().len() + v.len() + 4)
        .sum();
    (lines + 16) as u64
}

/// Remove `Connection`, every header it names, and the fixed hop-by-hop set.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // One pass over the names finds which of the set are there (often none, or only
    // `Connection`), so only those are looked up and removed.
    let mut present = 0u16;
    for name in headers.keys() {
        if let Some(i) = hop_index(name.as_str()) {
            present |= 1 << i;
        }
    }
    if present & 1 != 0 {
        let mut named: Vec<HeaderName> = Vec::new();
        let values = headers.get_all(CONNECTION).iter();
        for name in values
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
        {
            let name = name.trim();
            // One of the set (`keep-alive`, as upstream often names it): removed below if
            // it is there, without a name parsed and allocated for it.
            if hop_index(name).is_some() {
                continue;
            }
            if let Ok(name) = HeaderName::from_bytes(name.as_bytes()) {
                named.push(name);
            }
        }
        for name in named {
            headers.remove(name);
        }
    }
    for (i, name) in HOP_BY_HOP.iter().enumerate() {
        if present & (1 << i) != 0 {
            headers.remove(name);
        }
    }
}

/// The position in [`HOP_BY_HOP`] of the header `name` (lower case, as a `HeaderName`
/// is), if it is one: a switch on the length, then at most two compares. It runs for
/// every header of every request and response, where comparing each name with the ten
/// of the set showed in the instruction count.
fn hop_index(name: &str) -> Option<usize> {
    let i = match (name.len(), name) {
        (2, "te") => 5,
        (7, "trailer") => 6,
        (7, "upgrade") => 8,
        (10, "connection") => 0,
        (10, "keep-alive") => 1,
        (16, "proxy-connection") => 2,
        (16, crate::proxy::request::NETWORK_POLICY_HEADER) => 9,
        (17, "transfer-encoding") => 7,
        (18, "proxy-authenticate") => 3,
        (19, "proxy-authorization") => 4,
        _ => return None,
    };
    Some(i)
}

/// Make `Host` the approved authority. The client's own `Host`, when it is the one
/// value and already that very text (the usual case), is kept as it is: no value is
/// built for every request.
fn set_host(headers: &mut HeaderMap, host: &Host, port: u16, default_port: u16) {
    match headers.entry(HOST) {
        Entry::Occupied(entry)
            if entry.iter().count() == 1 && names(entry.get(), host, port, default_port) => {}
        Entry::Occupied(mut entry) => {
            entry.insert(host_value(host, port, default_port));
        }
        Entry::Vacant(entry) => {
            entry.insert(host_value(host, port, default_port));
        }
    }
}

/// Whether `value` is the text [`host_value`] makes for a host name (`None` for an IP:
/// always built).
fn names(value: &HeaderValue, host: &Host, port: u16, default_port: u16) -> bool {
    let Host::Name(name) = host else {
        return false;
    };
    let Some(rest) = value.as_bytes().strip_prefix(name.as_str().as_bytes()) else {
        return false;
    };
    if port == default_port {
        return rest.is_empty();
    }
    let mut digits = [0u8; 5];
    let mut at = digits.len();
    let mut n = port;
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    rest.first() == Some(&b':') && rest[1..] == digits[at..]
}

/// The `Host` upstream sees: the approved authority, the port only when not the
/// scheme's default.
fn host_value(host: &Host, port: u16, default_port: u16) -> HeaderValue {
    let text = match host {
        Host::Ip(std::net::IpAddr::V6(v6)) if port == default_port => format!("[{v6}]"),
        _ if port == default_port => host.to_string(),
        _ => host.authority(port),
    };
    HeaderValue::from_maybe_shared(Bytes::from(text))
        .expect("a normalised host is a valid header value")
}

/// The request target upstream sees: the origin form (path and query) of `original`,
/// with the normalised path the rules judged in place of the path when there is one.
fn origin_form(original: &Uri, judged: Option<&NormalPath>) -> Uri {
    let mut parts = hyper::http::uri::Parts::default();
    let path_and_query = match (judged, original.path_and_query()) {
        (Some(path), pq) => {
            let text = match pq.and_then(|pq| pq.query()) {
                Some(query) => format!("{path}?{query}"),
                None => path.to_string(),
            };
            PathAndQuery::from_maybe_shared(Bytes::from(text))
                .expect("a normalised path and a query that parsed are a valid target")
        }
        (None, Some(pq)) => pq.clone(),
        (None, None) => PathAndQuery::from_static("/"),
    };
    parts.path_and_query = Some(path_and_query);
    Uri::from_parts(parts).expect("a path alone is a valid URI")
}

#[cfg(test)]
#[path = "head_tests.rs"]
mod tests;
