//! Starts the `egress-proxy` binary on `127.0.0.1:0` and reads its audit log.
//!
//! Every proxy gets `--resolve` pins or a `--dns-server`: no test may reach the
//! system resolver. The child is killed when the [`Proxy`] is dropped.
//!
//! - [`builder`]: [`ProxyBuilder`], the flags of one proxy, and starting it.
//! - [`process`]: [`Proxy`], the running child: signals, exit, and
//!   [`run_expect_exit`] for a start that must fail.
//! - [`stderr`]: the reader of the child's stderr and its `listening on` line.
//! - [`audit`]: reading and waiting on the audit log.

mod audit;
mod builder;
mod process;
mod stderr;

use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

pub(crate) use audit::{AUDIT_TIMEOUT, QUIET_PERIOD};
pub(crate) use builder::ProxyBuilder;
pub(crate) use process::{run_expect_exit, Proxy};
pub(crate) use stderr::parse_listening;

/// How long the proxy may take to print its listening address.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// The binary under test: this crate's, or `EGRESS_PROXY_BIN` when set (to run
/// these tests against another build of the proxy).
pub(crate) fn binary() -> String {
    std::env::var("EGRESS_PROXY_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_egress-proxy").to_string())
}

/// A loopback port that was free a moment ago (bound, then released), for a proxy
/// whose org file must name its own port before it starts.
pub(crate) fn free_port(ip: std::net::IpAddr) -> SocketAddr {
    let listener = std::net::TcpListener::bind((ip, 0)).expect("bind a free port");
    listener.local_addr().expect("free port addr")
}

/// Quiet, uncoloured logs; `EGRESS_IT_RUST_LOG` passes a filter through.
fn configure_env(cmd: &mut Command) {
    cmd.env("NO_COLOR", "1").env_remove("EGRESS_PROXY_LOG");
    if let Ok(filter) = std::env::var("EGRESS_IT_RUST_LOG") {
        cmd.env("EGRESS_PROXY_LOG", filter);
    }
}
