//! The SOCKS5 listener (`--socks-listen`, docs/reference/socks5.md): RFC 1928 with
//! RFC 1929's username/password, `CONNECT` only. One more door to the same judgement
//! (docs/ARCHITECTURE.md, "The other doors"): a request for `NAME:PORT` is asked as a
//! tunnel to that target, with the session its handshake verified, and judged by
//! `judgement::judge` (same reasons, levels, budgets, address guard and records,
//! `"via": "socks5"`); an IPv4 or IPv6 address is an IP destination. An approved tunnel is dialed before the client
//! is answered, its first bytes are judged by `[tunnels]` before any reaches upstream,
//! and it is relayed by the tunnel engine (`crate::tunnel`),
//! which is why this module sits a layer above `proxy/`.
//!
//! The handshake is read by the pure parsers of [`wire`], exactly the bytes each asks
//! for, and must finish within `--header-timeout`; a stalled, garbled or SOCKS4 client
//! is closed and audited (`invalid_request`).
//!
//! Replies: `0x00` with the bound address; `0x02` for every refusal; `0x04` when an
//! allowed name does not resolve; `0x05` when the destination refuses the connection;
//! `0x07` for `BIND` and `UDP ASSOCIATE`; `0x01` otherwise.

pub(crate) mod wire;

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::audit::Via;
use crate::judgement::approved::Scope;
use crate::judgement::ask::{Ask, Credentials};
use crate::judgement::judge;
use crate::judgement::pending::PendingSlot;
use crate::judgement::record::{audit_refusal, count_approved, record_stop, Asked, Client};
use crate::judgement::refusal::{Refusal, Stop};
use crate::judgement::State;
use crate::policy::{Host, Reason, Target};
use crate::session::{AuthError, Session};
use crate::tunnel::{dial_tunnel, Inspect, NotOpened};
use wire::{Bad, Dest, Progress, Reply};

/// What a finished handshake asks for.
struct Asking {
    request: wire::Request,
    /// The session, verified during the handshake.
    session: Option<Arc<Session>>,
}

/// Serve one connection accepted on the SOCKS5 listener.
pub(crate) async fn serve_socks(
    mut stream: TcpStream,
    peer: SocketAddr,
    state: Arc<State>,
    (done, pending): (mpsc::Sender<()>, PendingSlot),
    inspect: Arc<dyn Inspect>,
) {
    let _ = stream.set_nodelay(true);
    let timeout = state.limits.header_timeout;
    let deadline = Instant::now() + timeout;
    let asking = match tokio::time::timeout_at(deadline, handshake(&mut stream, peer, &state)).await
    {
        // The handshake is done: no longer counted against --max-pending-per-client.
        Ok(Some(asking)) => {
            drop(pending);
            asking
        }
        Ok(None) => return,
        Err(_) => {
            state.metrics.header_timeouts.inc();
            let detail = format!("the SOCKS5 handshake did not finish within {timeout:?}");
            let client = Client::new(peer, Asked::BeforeRequest).via(Via::Socks5);
            audit_refusal(&state, &client, &Refusal::malformed(detail), None).await;
            return;
        }
    };
    connect(stream, peer, asking, state, done, inspect).await
}

/// Read one message with `parse`, exactly the bytes it asks for. `None` when the client
/// closed or failed.
async fn read_message<T>(
    stream: &mut TcpStream,
    parse: impl Fn(&[u8]) -> Progress<T>,
) -> Option<Result<T, Bad>> {
    let mut buf = Vec::with_capacity(64);
    loop {
        match parse(&buf) {
            Progress::Done(message, _) => return Some(Ok(message)),
            Progress::Bad(bad) => return Some(Err(bad)),
            Progress::Need(total) => {
                let at = buf.len();
                buf.resize(total, 0);
                stream.read_exact(&mut buf[at..]).await.ok()?;
            }
        }
    }
}

/// What a refused handshake is answered with, once its record is queued.
enum Answer {
    /// Nothing: the connection is closed.
    Close,
    /// A method reply, a username/password status or a request reply.
    Bytes(Vec<u8>),
}

/// Audit a refusal of the handshake, then answer it (a refusal is answered only once
/// its record is queued, as on every listener) and let the connection close.
async fn refuse(
    stream: &mut TcpStream,
    (state, peer): (&State, SocketAddr),
    asked: Asked,
    refusal: Refusal,
    answer: Answer,
) -> Option<Asking> {
    let client = Client::new(peer, asked)
        .via(Via::Socks5)
        .traced(state, || None);
    tracing::debug!(client = %peer, reason = refusal.reason.as_str(), detail = ?refusal.detail, "SOCKS5 handshake refused");
    audit_refusal(state, &client, &refusal, None).await;
    if let Answer::Bytes(bytes) = answer {
        let _ = stream.write_all(&bytes).await;
    }
    None
}

/// The greeting, the method (and its credentials), and the request. `None` when the
/// connection ends here (refused and audited, or the client went away).
async fn handshake(stream: &mut TcpStream, peer: SocketAddr, state: &State) -> Option<Asking> {
    let before = Asked::BeforeRequest;
    let at = (state, peer);
    let greeting = match read_message(stream, wire::parse_greeting).await? {
        Ok(greeting) => greeting,
        Err(bad) => {
            let refusal = Refusal::malformed(bad.to_string());
            return refuse(stream, at, before, refusal, Answer::Close).await;
        }
    };
    let method = wire::choose_method(
        &greeting.methods,
        state.sessions_enabled,
        state.require_session,
    );
    let credentials = match method {
        wire::NO_ACCEPTABLE_METHOD => {
            let refusal = match state.require_session {
                true => Refusal::new(Reason::AuthRequired, String::new(), 0)
                    .with_detail("this proxy needs session credentials (SOCKS5 username/password)"),
                false => {
                    Refusal::malformed("the client offered no SOCKS5 method this proxy serves")
                }
            };
            let answer = Answer::Bytes(wire::method_reply(method).to_vec());
            return refuse(stream, at, before, refusal, answer).await;
        }
        wire::METHOD_USER_PASS => {
            stream.write_all(&wire::method_reply(method)).await.ok()?;
            match sub_negotiate(stream, peer, state).await {
                Ok(credentials) => credentials,
                Err(()) => return None,
            }
        }
        _ => {
            stream.write_all(&wire::method_reply(method)).await.ok()?;
            None
        }
    };
    let request = match read_message(stream, wire::parse_request).await? {
        Ok(request) => request,
        Err(bad) => {
            let refusal = Refusal::malformed(bad.to_string());
            let answer = Answer::Bytes(wire::reply(Reply::GeneralFailure, None));
            return refuse(stream, at, before, refusal, answer).await;
        }
    };
    if request.command != wire::CONNECT {
        let refusal = Refusal::new(
            Reason::InvalidRequest,
            request.dest.host_text(),
            request.port,
        )
        .with_detail(format!(
            "SOCKS5 {} is not served: CONNECT only",
            request.command_name()
        ));
        let answer = Answer::Bytes(wire::reply(Reply::CommandNotSupported, None));
        return refuse(stream, at, before, refusal, answer).await;
    }
    if let Dest::BadName(_) = request.dest {
        // Refused before anything reads the name: no lookup, no judgement.
        let refusal = Refusal::new(
            Reason::InvalidRequest,
            request.dest.host_text(),
            request.port,
        )
        .with_detail("a name holds only letters, digits, `-`, `.` and `_`");
        let answer = Answer::Bytes(wire::reply(Reply::NotAllowed, None));
        return refuse(stream, at, Asked::Connect, refusal, answer).await;
    }
    Some(Asking {
        request,
        session: credentials,
    })
}

/// RFC 1929: read the user name (the session id) and password (its token), and verify
/// them when sessions are served. `Err` when the connection ends here.
async fn sub_negotiate(
    stream: &mut TcpStream,
    peer: SocketAddr,
    state: &State,
) -> Result<Option<Arc<Session>>, ()> {
    let before = Asked::BeforeRequest;
    let user_pass = match read_message(stream, wire::parse_user_pass)
        .await
        .ok_or(())?
    {
        Ok(user_pass) => user_pass,
        Err(bad) => {
            let refusal = Refusal::malformed(bad.to_string());
            refuse(stream, (state, peer), before, refusal, Answer::Close).await;
            return Err(());
        }
    };
    if !state.sessions_enabled {
        // No sessions: the credentials are not judged, as `Proxy-Authorization` is not.
        stream
            .write_all(&wire::user_pass_reply(true))
            .await
            .map_err(drop)?;
        return Ok(None);
    }
    let text = |b: Vec<u8>| String::from_utf8(b).ok();
    let verified = match (text(user_pass.user), text(user_pass.pass)) {
        (Some(id), Some(token)) if !id.contains(':') => {
            match state.sessions.verify(&id, &token).await {
                Ok(session) => Ok(session),
                Err(why) => Err(why),
            }
        }
        _ => Err(AuthError::Unknown),
    };
    match verified {
        Ok(credentials) => {
            stream
                .write_all(&wire::user_pass_reply(true))
                .await
                .map_err(drop)?;
            Ok(Some(credentials))
        }
        Err(why) => {
            let reason = match why {
                AuthError::StoreUnavailable => Reason::SessionStoreUnavailable,
                _ => Reason::AuthRequired,
            };
            let detail = match why {
                AuthError::StoreUnavailable => why.message(),
                _ => "unknown, expired, deleted or wrong session credentials (SOCKS5 username/password)",
            };
            let refusal = Refusal::new(reason, String::new(), 0).with_detail(detail);
            let answer = Answer::Bytes(wire::user_pass_reply(false).to_vec());
            refuse(stream, (state, peer), before, refusal, answer).await;
            Err(())
        }
    }
}

/// What a finished handshake asks: a tunnel to its destination, under the session its
/// handshake verified. A destination that cannot be one (a name with bytes a host name
/// cannot hold, port 0, a name that does not normalise) is refused as the explicit
/// proxy refuses its `CONNECT`.
fn ask(asking: &Asking) -> Result<Ask<'static>, Refusal> {
    let port = asking.request.port;
    if port == 0 {
        return Err(Refusal::malformed("port 0 is not a destination"));
    }
    let host = match &asking.request.dest {
        Dest::BadName(_) => {
            return Err(Refusal::malformed(
                "a name with bytes a host name cannot hold",
            ))
        }
        Dest::V4(ip) => Host::Ip((*ip).into()),
        Dest::V6(ip) => Host::Ip((*ip).into()),
        Dest::Name(name) => Host::parse(name).map_err(|e| {
            Refusal::new(Reason::InvalidHost, name.clone(), port)
                .with_detail(format!("invalid host: {e}"))
        })?,
    };
    let credentials = match &asking.session {
        Some(session) => Credentials::Verified(session.clone()),
        None => Credentials::None,
    };
    Ok(Ask::tunnel(Target { host, port }, credentials))
}

/// Judge the request as `CONNECT`, dial it, answer, and relay.
async fn connect(
    mut stream: TcpStream,
    peer: SocketAddr,
    asking: Asking,
    state: Arc<State>,
    done: mpsc::Sender<()>,
    inspect: Arc<dyn Inspect>,
) {
    let client = Client::new(peer, Asked::Connect)
        .via(Via::Socks5)
        .traced(&state, || None);
    let judged = match ask(&asking) {
        Ok(ask) => judge::judge(ask, Scope::Connection, &state, &client).await,
        Err(refusal) => Err(Stop::Denied(refusal)),
    };
    let approved = match judged {
        Ok(approved) => approved,
        Err(stop) => {
            record_stop(&state, &client, &stop, || None).await;
            // The judgement fails only where an allowed name could not be resolved.
            let code = match stop {
                Stop::Denied(_) => Reply::NotAllowed,
                Stop::Failed(_) => Reply::HostUnreachable,
            };
            let _ = stream.write_all(&wire::reply(code, None)).await;
            return;
        }
    };
    count_approved(&state, &client, &approved);
    let dialed = match dial_tunnel(approved, state, client).await {
        Ok(dialed) => dialed,
        Err(not_opened) => {
            let code = match not_opened {
                NotOpened::Refused(_) => Reply::NotAllowed,
                NotOpened::Failed { refused: true, .. } => Reply::ConnectionRefused,
                NotOpened::Failed { .. } => Reply::GeneralFailure,
            };
            let _ = stream.write_all(&wire::reply(code, None)).await;
            return;
        }
    };
    let success = wire::reply(Reply::Succeeded, dialed.bound());
    if stream.write_all(&success).await.is_err() {
        return;
    }
    dialed.relay(stream, Vec::new(), done, inspect).await
}

#[cfg(test)]
mod one_question_tests;
