//! A `CONNECT`'s tunnel: dialed by the tunnel engine ([`crate::tunnel`]) before the
//! client is answered, so a refusal or an unreachable upstream is a status code; then
//! answered 200, and once hyper hands the connection over, given to the engine with the
//! bytes hyper read past the head.

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use super::pool::Upstream;
use super::{answer, Body};
use crate::judgement::approved::Approved;
use crate::judgement::record::Client;
use crate::judgement::State;
use crate::tunnel::{dial_tunnel, NotOpened};

/// Dial the approved destination, answer 200, then relay bytes both ways once the
/// client's connection is handed over (an intercepted host's requests served by
/// `pool`'s interception, [`super::intercept`]).
pub(crate) async fn open(
    mut req: Request<Incoming>,
    approved: Approved,
    state: Arc<State>,
    client: Client,
    done: mpsc::Sender<()>,
    pool: Arc<Upstream>,
) -> Response<Body> {
    let id = client.request_id;
    let dialed = match dial_tunnel(approved, state, client).await {
        Ok(dialed) => dialed,
        Err(NotOpened::Refused(refusal)) => return answer::refuse(&refusal, id),
        Err(NotOpened::Failed { failure, .. }) => return answer::fail(&failure, id),
    };
    let on_upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        // Dropped unrelayed, `dialed` writes the tunnel's record.
        let upgraded = match on_upgrade.await {
            Ok(upgraded) => upgraded,
            Err(e) => {
                tracing::debug!(request_id = %id, error = %e, "CONNECT upgrade failed");
                return;
            }
        };
        // The listener serves TCP connections only (`conn::serve_connection`).
        let Ok(parts) = upgraded.downcast::<TokioIo<TcpStream>>() else {
            tracing::warn!(request_id = %id, "a CONNECT over another transport: closed");
            return;
        };
        // The bytes past the head copied out, so hyper's read buffer, which they are a
        // slice of, is let go rather than held for the tunnel's life.
        let ahead = parts.read_buf.to_vec();
        drop(parts.read_buf);
        // A task of its own: this one, which waited for the upgrade, ends and lets go
        // of what it held, so an idle tunnel holds the relay's state alone.
        tokio::spawn(dialed.relay(parts.io.into_inner(), ahead, done, Arc::new(pool)));
    });
    Response::new(answer::empty())
}
