//! The question every listener asks the judge (docs/reference/answers.md, "Order of
//! judgement"), in no listener's words: where to, with what credentials, for what (a
//! tunnel, a request, or a name on any port), and the narrowing the client sent. Each
//! listener reads its own wire into an [`Ask`]: the explicit proxy from an HTTP head
//! (`crate::proxy::request`), SOCKS5 from its request (credentials verified during its
//! handshake), the transparent listener from the original destination, the DNS
//! listener from a query name. What is judged after that is the same code for all;
//! where it is asked is [`super::approved::Scope`].

use std::borrow::Cow;
use std::sync::Arc;

use crate::dlp::{FoundIn, Hit};
use crate::policy::Target;
use crate::session::{AuthError, Session};

/// One question for [`super::judge::judge`].
pub(crate) struct Ask<'a> {
    /// The destination, already read and checked by the listener.
    pub target: Target,
    /// Who asks (step 2 of the order of judgement).
    pub credentials: Credentials,
    /// What is asked of the destination.
    pub what: What<'a>,
    /// The `X-Network-Policy` the client sent (step 3's input), as it came.
    pub narrowing: Narrowing<'a>,
    /// The size of what the client sent to ask (an HTTP head; 0 for a SOCKS5 request
    /// or a redirected connection), for drawing a fleet-wide budget.
    pub head_bytes: usize,
    /// The URL its records give, asked for only when one is written.
    pub url: Option<&'a (dyn Fn() -> String + Send + Sync)>,
    /// What else the client sent that the proxy reads before sending it on (a request's
    /// line and header fields), for the canaries (docs/reference/dlp.md).
    pub exposed: Option<&'a (dyn Exposed + Sync)>,
}

/// Bytes a listener read from its client besides the target, looked through for the
/// canaries and secret detectors in the listener's own terms (where each part is: a
/// URL, a header field).
pub(crate) trait Exposed {
    /// The first hit `find` gives in them, each part with where it is.
    fn scan(&self, find: &dyn Fn(&[u8], FoundIn) -> Option<Hit>) -> Option<Hit>;
}

/// The credentials a client presented, as its listener read them.
pub(crate) enum Credentials {
    /// None presented.
    None,
    /// A session id and token, not yet verified.
    Presented { id: String, token: String },
    /// Credentials that could not be read (`auth_required`).
    Unreadable(AuthError),
    /// A session its listener verified already (SOCKS5's username and password).
    Verified(Arc<Session>),
}

/// What is asked of the destination.
pub(crate) enum What<'a> {
    /// A tunnel: bytes both ways, judged by host and port (and, for an inspected host,
    /// each request read inside).
    Tunnel,
    /// One request, judged by its method and path too where rules say so.
    Request(Request<'a>),
    /// A name, on any port (a DNS query).
    Name,
}

/// A request's parts the judgement reads.
pub(crate) struct Request<'a> {
    /// Its method, as the client sent it.
    pub method: Method,
    /// Its path and query (`/` when it has none).
    pub path: &'a str,
    /// The body length it declares, if any (the upload budget's step).
    pub declared_length: Option<u64>,
    /// A WebSocket handshake, forwarded with its upgrade.
    pub websocket: bool,
}

/// A request method's name: a borrowed `'static` name for the standard methods, so
/// the common request allocates nothing for it.
pub(crate) type Method = Cow<'static, str>;

/// The client's `X-Network-Policy`, as it came.
#[derive(Clone, Copy)]
pub(crate) enum Narrowing<'a> {
    /// None sent.
    Absent,
    /// One, with this text.
    One(&'a str),
    /// One whose bytes are not text.
    NotText,
    /// More than one.
    Several,
}

impl Ask<'_> {
    /// A tunnel to `target` with `credentials`, no narrowing (SOCKS5, transparent).
    pub(crate) fn tunnel(target: Target, credentials: Credentials) -> Ask<'static> {
        Ask {
            target,
            credentials,
            what: What::Tunnel,
            narrowing: Narrowing::Absent,
            head_bytes: 0,
            url: None,
            exposed: None,
        }
    }
}
