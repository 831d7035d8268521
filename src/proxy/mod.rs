//! The server: per-connection HTTP/1.1, and the path every request takes
//! (target -> policy levels -> decide -> resolve -> address check -> forward or tunnel).
//! docs/ARCHITECTURE.md walks it module by module.
//!
//! - [`workers`]: the accept side, a single-threaded runtime per worker thread.
//! - [`state`]: what every connection shares ([`State`]), the limits, the phase.
//! - `conn`: one connection: the first-head look, hyper, each request to the judge.
//! - [`preflight`]: a look at a connection's first request head, so that even a request
//!   hyper could not parse gets a full refusal.
//! - [`request`]: reading the target, the `Host` check and the `X-Network-Policy` header.
//! - [`judge`]: the policy and address decisions for one request, ending in approved
//!   addresses or a [`refusal::Refusal`].
//! - [`refusal`]: why a request stops: [`refusal::Refusal`], [`refusal::Failure`], [`refusal::Stop`].
//! - [`record`]: what is being answered, and the audit records and metric counts of a
//!   judged request.
//! - [`opening`]: what a redirected connection's first bytes are (the transparent
//!   listener's HTTP, TLS or other), however they were split.
//! - [`answer`]: the one place a refusal becomes a response.
//! - [`budget`]: upload budgets: each session's meter, the allowance a request or tunnel
//!   draws from, and a request body cut when it is spent.
//! - [`forward`]: plain HTTP forwarding; [`head`] builds the head upstream sees and
//!   counts its bytes; [`pool`] keeps each worker's upstream connections open between
//!   requests.
//! - [`tunnel`]: `CONNECT` tunnels; [`relay`] copies their bytes (on Linux bulk bytes
//!   go through `splice`, socket to pipe to socket, read in batches), [`idle`] watches
//!   for quiet ones and [`inspect`] judges their first bytes.
//! - `intercept`: tunnels to inspected hosts, their TLS terminated with a leaf from
//!   the CA, each request inside judged and forwarded like any other.

pub mod answer;
pub mod budget;
mod conn;
pub mod forward;
pub mod head;
pub mod idle;
pub mod inspect;
pub(crate) mod intercept;
pub mod judge;
pub mod limits;
pub mod opening;
pub mod pool;
pub mod preflight;
pub mod record;
pub mod refusal;
pub mod relay;
pub mod request;
#[cfg(target_os = "linux")]
pub mod splice;
pub mod state;
pub mod transparent;
pub mod tunnel;
pub mod workers;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;

pub use state::{Limits, Phase, State};
pub use workers::Server;

/// The body type of every response the proxy sends (and every request it forwards).
pub type Body = BoxBody<Bytes, BoxError>;

/// A body's error: hyper's, or the proxy's own (a request body cut by the upload
/// budget, [`budget::Spent`]).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
