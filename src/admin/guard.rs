//! Who may call the admin API: its own pages and clients that name it, never another web
//! page (docs/reference/control-plane.md, "Calls from web pages").
//!
//! A browser lets any page send a `text/plain` `POST` to `127.0.0.1` without asking, and a
//! page whose name is rebound to `127.0.0.1` reads the answers. So, before the token is
//! looked at and before anything is done, every call is checked:
//! - a `Host` that names neither the listener's address nor an `--admin-host` name: 421;
//! - an `Origin` that is present and is not the listener's own: 403;
//! - a call other than `GET` or `HEAD` whose `Content-Type` is not `application/json`
//!   (a form or `text/plain` body, which a page may send without a preflight): 415.
//!
//! `/healthz` is checked too: the kubelet's probe sends the address it connects to, which
//! the connection's own address accepts.

use std::net::SocketAddr;

use hyper::header::{CONTENT_TYPE, HOST, ORIGIN};
use hyper::{Method, Request, Response, StatusCode};

use super::{error, Body};

/// The names the admin listener answers to.
#[derive(Debug, Clone)]
pub(crate) struct Names {
    /// The listener's address, as bound.
    pub listen: SocketAddr,
    /// `--admin-host NAME`s, lower case.
    pub hosts: Vec<String>,
}

impl Names {
    /// Whether `authority` (a `Host` value, or an origin without its scheme) names this
    /// listener: its address, the address the connection was made to (a listener on
    /// `0.0.0.0` is called by one of the host's addresses), or a name with the listener's
    /// port. `bare` allows a name without a port.
    fn names(&self, authority: &str, local: Option<SocketAddr>, bare: bool) -> bool {
        let authority = authority.to_ascii_lowercase();
        let addr = |a: SocketAddr| authority == a.to_string();
        if addr(self.listen) || local.is_some_and(addr) {
            return true;
        }
        let port = self.listen.port();
        self.hosts.iter().any(|name| {
            (bare && authority == *name)
                || authority
                    .strip_prefix(name.as_str())
                    .and_then(|rest| rest.strip_prefix(':'))
                    .is_some_and(|p| p.parse::<u16>() == Ok(port))
        })
    }
}

/// The refusal of a call that does not come from the API's own pages or clients, or
/// `None` when it may go on to the token check.
pub(crate) fn refuse<B>(
    req: &Request<B>,
    names: &Names,
    local: Option<SocketAddr>,
) -> Option<Response<Body>> {
    let headers = req.headers();
    let host = single(headers.get_all(HOST).iter());
    // An HTTP/1.1 request always names its host; one that does not is refused too.
    let host_ok = host.is_some_and(|h| names.names(h, local, true));
    if !host_ok {
        return Some(error(
            StatusCode::MISDIRECTED_REQUEST,
            "wrong_host",
            "the Host header names neither this admin listener's address nor an --admin-host name",
        ));
    }
    if headers.contains_key(ORIGIN) {
        // The port is left out of an origin only when it is 80.
        let bare = names.listen.port() == 80;
        let own = single(headers.get_all(ORIGIN).iter())
            .and_then(|o| o.strip_prefix("http://"))
            .is_some_and(|a| names.names(a, local, bare));
        if !own {
            return Some(error(
                StatusCode::FORBIDDEN,
                "foreign_origin",
                "calls from another web page's origin are refused",
            ));
        }
    }
    let reads = matches!(*req.method(), Method::GET | Method::HEAD);
    if !reads && !single(headers.get_all(CONTENT_TYPE).iter()).is_some_and(is_json) {
        return Some(error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "a call that changes something needs Content-Type: application/json",
        ));
    }
    None
}

/// The one value of a header given once, as text.
fn single<'a>(mut values: impl Iterator<Item = &'a hyper::header::HeaderValue>) -> Option<&'a str> {
    match (values.next(), values.next()) {
        (Some(value), None) => value.to_str().ok(),
        _ => None,
    }
}

/// `application/json`, with parameters (`; charset=utf-8`) or not.
fn is_json(content_type: &str) -> bool {
    let essence = content_type.split(';').next().unwrap_or("");
    essence.trim().eq_ignore_ascii_case("application/json")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Names {
        Names {
            listen: "127.0.0.1:9090".parse().unwrap(),
            hosts: vec!["admin.internal".to_string()],
        }
    }

    #[test]
    fn hosts_named_by_address_or_admin_host() {
        let n = names();
        let local = Some("10.0.0.5:9090".parse().unwrap());
        for ok in [
            "127.0.0.1:9090",
            "10.0.0.5:9090",
            "admin.internal",
            "ADMIN.internal:9090",
        ] {
            assert!(n.names(ok, local, true), "{ok}");
        }
        for bad in [
            "attacker.example:9090",
            "127.0.0.1",
            "127.0.0.1:9091",
            "admin.internal:9091",
            "admin.internal.attacker.example",
            "admin.internal:",
        ] {
            assert!(!n.names(bad, local, true), "{bad}");
        }
        assert!(!n.names("admin.internal", local, false));
    }

    #[test]
    fn json_with_or_without_parameters() {
        assert!(is_json("application/json"));
        assert!(is_json("Application/JSON; charset=utf-8"));
        assert!(!is_json("text/plain"));
        assert!(!is_json("application/jsonp"));
        assert!(!is_json("application/x-www-form-urlencoded"));
    }
}
