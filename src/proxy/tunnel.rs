//! `CONNECT` tunnels. The upstream connection is made to a checked address before the
//! client is answered, so a refusal or an unreachable upstream is told with a status
//! code and no tunnel ever opens for it.

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::copy_bidirectional;
use tokio::sync::mpsc;

use super::judge::{audit_allowed, Approved, Failure};
use super::{answer, Body, Client, Phase, State};
use crate::net::dial::{dial, DialError};
use crate::session::{until_ended, TunnelOpen};

/// Dial the approved destination, answer 200, then relay bytes both ways once the
/// client's connection is handed over.
pub async fn open(
    mut req: Request<Incoming>,
    approved: Approved,
    state: Arc<State>,
    client: Client,
    done: mpsc::Sender<()>,
) -> Response<Body> {
    let (mut upstream, dialed) = match dial(&approved.addrs, state.limits.connect_timeout).await {
        Ok(pair) => pair,
        Err(e) => {
            let target = approved.target.host.authority(approved.target.port);
            let failure = match e {
                DialError::Timeout => Failure {
                    status: StatusCode::GATEWAY_TIMEOUT,
                    message: format!("connecting to {target} timed out"),
                },
                _ => Failure {
                    status: StatusCode::BAD_GATEWAY,
                    message: format!("cannot connect to {target}"),
                },
            };
            tracing::info!(request_id = %client.request_id, error = %e, "{}", failure.message);
            return answer::fail(&failure, &client.request_id);
        }
    };
    state
        .metrics
        .observe_first_byte(approved.decided_at.elapsed());
    let on_upgrade = hyper::upgrade::on(&mut req);
    let mut phase = state.phase.subscribe();
    tokio::spawn(async move {
        let upgraded = match on_upgrade.await {
            Ok(upgraded) => upgraded,
            Err(e) => {
                tracing::debug!(request_id = %client.request_id, error = %e, "CONNECT upgrade failed");
                return;
            }
        };
        let mut downstream = TokioIo::new(upgraded);
        let _open = TunnelOpen::new(&state, approved.session.as_ref());
        let bytes = tokio::select! {
            copied = copy_bidirectional(&mut downstream, &mut upstream) => match copied {
                Ok(pair) => pair,
                Err(e) => {
                    tracing::debug!(request_id = %client.request_id, error = %e, "tunnel closed with an error");
                    (0, 0)
                }
            },
            _ = async { drop(phase.wait_for(|p| *p == Phase::Closing).await) } => (0, 0),
            // DELETE, expiry or a revoking reload ends the session and its tunnels.
            _ = until_ended(approved.session.as_deref()) => (0, 0),
        };
        state.metrics.bytes_up.inc_by(bytes.0);
        state.metrics.bytes_down.inc_by(bytes.1);
        audit_allowed(&state, &client, &approved, dialed.addr(), None, bytes);
        drop(done);
    });
    Response::new(answer::empty())
}
