//! The explicit HTTP proxy (`--listen`): per-connection HTTP/1.1, and what happens to a
//! request around its judgement (`crate::judgement`): answers, forwarding, tunnels.
//! docs/ARCHITECTURE.md walks it module by module.
//!
//! - `conn`: one connection: the first-head look, hyper, each request to the judge. The
//!   transparent listener hands its HTTP connections here too.
//! - [`preflight`]: a look at a connection's first request head, so that even a request
//!   hyper could not parse gets a full refusal.
//! - [`answer`]: the one place a refusal becomes a response; `message` writes the
//!   sentences of every 403 body.
//! - [`budgeted`]: the upload budget on a request's way upstream: its head taken whole
//!   or refused, its body cut when the budget is spent.
//! - [`forward`]: plain HTTP forwarding; [`head`] builds the head upstream sees and
//!   counts its bytes; [`pool`] keeps each worker's upstream connections open between
//!   requests; `sender` is one connection's request side, HTTP/1.1 or h2.
//! - `connect`: a `CONNECT` answered and its connection handed to the tunnel engine
//!   ([`crate::tunnel`], which relays it for every listener).
//! - `websocket`: an allowed `Upgrade: websocket` (or an h2 stream's RFC 8441 extended
//!   `CONNECT`, made that handshake) forwarded with its upgrade, then relayed with its
//!   bytes up drawn from the upload budget.
//! - `intercept`: tunnels to inspected hosts, their TLS terminated with a leaf from
//!   the CA, each request inside (HTTP/1.1, or each stream of h2) judged and forwarded
//!   like any other; `h2_limits` bounds what an h2 client may make the proxy hold.

pub(crate) mod allowed;
pub(crate) mod answer;
pub(crate) mod budgeted;
pub(crate) mod conn;
pub(crate) mod connect;
pub(crate) mod forward;
pub(crate) mod h2_limits;
pub(crate) mod head;
pub(crate) mod intercept;
pub(crate) mod message;
mod metered;
pub(crate) mod pool;
pub(crate) mod preflight;
pub(crate) mod request;
pub(crate) mod scanned;
pub(crate) mod sender;
mod timer;
pub(crate) mod websocket;
mod woken;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;

/// The body type of every response the proxy sends (and every request it forwards).
pub(crate) type Body = BoxBody<Bytes, BoxError>;

/// A body's error: hyper's, or the proxy's own (a request body cut by the upload
/// budget, `crate::judgement::budget::Spent`).
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;
