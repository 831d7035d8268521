//! Reading what a request asks for: its target (step 1 of the order of judgement), the
//! `Host` check, and the `X-Network-Policy` header (step 3's input).

use hyper::ext::Protocol;
use hyper::header::{HeaderMap, HeaderName, HOST, UPGRADE};
use hyper::{Method, Request, Version};

use crate::policy::{normalize_path, Host, NormalPath, Reason, RequestPolicy, Target};

use super::refusal::Refusal;

/// The header a client uses to narrow one request.
pub const NETWORK_POLICY_HEADER: &str = "x-network-policy";

/// The same, as a header name: looked up on every request, it is not parsed from its
/// text each time.
const NETWORK_POLICY: HeaderName = HeaderName::from_static(NETWORK_POLICY_HEADER);

/// Refuse a request head larger than `max` bytes (`--max-header-bytes`, 431). The first
/// head of a connection is measured before hyper reads it (`crate::proxy::preflight`); this
/// holds the later heads of a kept-alive connection to the same limit, counting the
/// request target and every header as they appear on the wire. Says whether the head
/// has an `Upgrade` field (for [`upgrade`]).
pub fn head_within<B>(req: &Request<B>, max: usize) -> Result<bool, Refusal> {
    let uri = req.uri();
    let target = uri.path_and_query().map_or(0, |p| p.as_str().len())
        + uri.authority().map_or(0, |a| a.as_str().len())
        + uri.scheme_str().map_or(0, |s| s.len() + 3);
    let mut size = req.method().as_str().len() + target + 12;
    // The same pass notes an `Upgrade` field (a compare, not a lookup): most requests
    // have none, and then nothing more is looked at for it.
    let mut upgrade = false;
    for (name, value) in req.headers() {
        size += name.as_str().len() + value.len() + 4;
        upgrade |= name == UPGRADE;
    }
    if size > max {
        return Err(Refusal::head_too_large(format!(
            "request head larger than {max} bytes"
        )));
    }
    Ok(upgrade)
}

/// The one upgrade the proxy passes on is a WebSocket's (docs/reference/inspection.md,
/// "WebSocket"): a request asking for any other (`h2c`, anything else) is refused
/// `invalid_request`, rather than forwarded without it.
/// Whether it is a WebSocket's, to be forwarded with its upgrade.
pub fn upgrade<B>(req: &Request<B>, target: &Target) -> Result<bool, Refusal> {
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

/// Whether `Connection` names `upgrade`: the request asks to switch protocols.
pub fn asks_upgrade(headers: &HeaderMap) -> bool {
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
pub fn target<B>(req: &Request<B>) -> Result<Target, Refusal> {
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
    check_host_headers(req.headers(), authority, &target)?;
    Ok(target)
}

/// The destination of a request read inside an intercepted tunnel: the tunnel's own
/// (docs/reference/inspection.md). Its `Host` (and an absolute-form target's authority)
/// must name the `CONNECT` host: anything else is `host_mismatch`, so no request is
/// fronted through a tunnel judged for another name.
pub fn inner_target<B>(req: &Request<B>, tunnel: &Target) -> Result<Target, Refusal> {
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
    if !req.headers().contains_key(HOST) {
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
    check_host_headers(req.headers(), &authority, tunnel).map_err(|r| match r.reason {
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
    authority: &str,
    target: &Target,
) -> Result<(), Refusal> {
    let mut count = 0;
    for value in headers.get_all(HOST) {
        count += 1;
        let matches = value.as_bytes() == authority.as_bytes()
            || value
                .to_str()
                .ok()
                .and_then(split_host_port)
                .and_then(|(h, p)| Some((Host::parse(h).ok()?, p.unwrap_or(target.port))))
                .is_some_and(|(h, p)| h == target.host && p == target.port);
        if !matches {
            return Err(
                Refusal::new(Reason::HostMismatch, target.host.to_string(), target.port)
                    .with_detail("the Host header names another authority than the request target"),
            );
        }
    }
    if count > 1 {
        return Err(Refusal::malformed("more than one Host header"));
    }
    Ok(())
}

/// The request's path, normalised for the rules (docs/reference/policy-files.md,
/// "Paths"); one that does not normalise is `invalid_request`.
pub fn normal_path(path_and_query: &str, target: &Target) -> Result<NormalPath, Refusal> {
    normalize_path(path_and_query).map_err(|e| {
        Refusal::new(Reason::InvalidRequest, target.host.to_string(), target.port)
            .with_detail(e.to_string())
    })
}

/// The `X-Network-Policy` header, if any: at most one, and it must parse.
pub fn header_policy(
    headers: &HeaderMap,
    target: &Target,
) -> Result<Option<Box<RequestPolicy>>, Refusal> {
    let mut values = headers.get_all(&NETWORK_POLICY).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    let invalid = |detail: String| {
        Refusal::new(Reason::InvalidPolicy, target.host.to_string(), target.port)
            .with_detail(detail)
    };
    if values.next().is_some() {
        return Err(invalid("more than one X-Network-Policy header".into()));
    }
    let text = value
        .to_str()
        .map_err(|_| invalid("X-Network-Policy is not ASCII text".into()))?;
    RequestPolicy::from_json(text, "X-Network-Policy")
        .map(|policy| Some(Box::new(policy)))
        .map_err(|e| invalid(e.to_string()))
}

/// Split `host:port`, `[v6]:port`, `host` or `[v6]`. `None` when the port is not a number.
pub fn split_host_port(authority: &str) -> Option<(&str, Option<u16>)> {
    if let Some(rest) = authority.strip_prefix('[') {
        let end = rest.find(']')?;
        let host = &authority[..end + 2];
        return match &rest[end + 1..] {
            "" => Some((host, None)),
            tail => Some((host, Some(parse_port(tail.strip_prefix(':')?)?))),
        };
    }
    match authority.rsplit_once(':') {
        Some((host, _)) if host.contains(':') => Some((authority, None)), // bare IPv6
        Some((host, port)) => Some((host, Some(parse_port(port)?))),
        None => Some((authority, None)),
    }
}

fn parse_port(s: &str) -> Option<u16> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    type Split<'a> = Option<(&'a str, Option<u16>)>;

    #[test]
    fn split_host_port_cases() {
        let cases: &[(&str, Split)] = &[
            ("a.test", Some(("a.test", None))),
            ("a.test:8080", Some(("a.test", Some(8080)))),
            ("[::1]:443", Some(("[::1]", Some(443)))),
            ("[::1]", Some(("[::1]", None))),
            ("::1", Some(("::1", None))),
            ("a.test:", None),
            ("a.test:+80", None),
            ("a.test:70000", None),
            ("[::1]x", None),
        ];
        for (input, want) in cases {
            assert_eq!(split_host_port(input), *want, "{input}");
        }
    }
}
