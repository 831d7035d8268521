//! Unit tests of the session store: credentials, ending, idle expiry.

use super::*;
use crate::session::constant_time_eq;
use base64::Engine;
use hyper::header::{HeaderValue, PROXY_AUTHORIZATION};
use std::time::Duration;

fn store() -> Arc<MemoryStore> {
    Arc::new(MemoryStore::new(Arc::new(Metrics::new())))
}

fn basic(id: &str, token: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    let enc = base64::engine::general_purpose::STANDARD.encode(format!("{id}:{token}"));
    h.insert(
        PROXY_AUTHORIZATION,
        HeaderValue::from_str(&format!("Basic {enc}")).unwrap(),
    );
    h
}

fn add(store: &MemoryStore, idle: Duration) -> (Arc<Session>, String) {
    let (s, token) = store.create(NewSession {
        policy: RequestPolicy::Disabled,
        policy_json: serde_json::json!({}),
        label: None,
        idle_timeout: idle,
        ask: None,
        canaries: Vec::new(),
        on_canary: None,
    });
    store.insert(&mut store.lock(), s.clone());
    (s, token)
}

#[test]
fn constant_time_eq_cases() {
    assert!(constant_time_eq(b"abc", b"abc"));
    assert!(!constant_time_eq(b"abc", b"abd"));
    assert!(!constant_time_eq(b"abc", b"abcd"));
    assert!(constant_time_eq(b"", b""));
}

#[test]
fn tokens_are_256_bits_of_hex_and_differ() {
    let s = store();
    let (a, ta) = add(&s, Duration::from_secs(5));
    let (b, tb) = add(&s, Duration::from_secs(5));
    assert_eq!(ta.len(), 64);
    assert!(ta.bytes().all(|c| c.is_ascii_hexdigit()));
    assert_ne!(ta, tb);
    assert_ne!(a.id, b.id);
}

#[test]
fn authenticate_accepts_only_the_right_token() {
    let s = store();
    let (sess, token) = add(&s, Duration::from_secs(5));
    assert!(matches!(s.authenticate(&HeaderMap::new()), Ok(None)));
    let ok = s.authenticate(&basic(&sess.id, &token)).unwrap().unwrap();
    assert_eq!(ok.id, sess.id);
    assert_eq!(
        s.authenticate(&basic(&sess.id, "wrong")).unwrap_err(),
        AuthError::Unknown
    );
    assert_eq!(
        s.authenticate(&basic("nope", &token)).unwrap_err(),
        AuthError::Unknown
    );
    let mut bearer = HeaderMap::new();
    bearer.insert(PROXY_AUTHORIZATION, HeaderValue::from_static("Bearer x"));
    assert_eq!(s.authenticate(&bearer).unwrap_err(), AuthError::Malformed);
}

#[test]
fn deleted_session_is_unknown_and_signals_its_tunnels() {
    let s = store();
    let (sess, token) = add(&s, Duration::from_secs(5));
    assert!(!sess.is_ended());
    s.end(&sess.id, Ended::Deleted).unwrap();
    assert!(sess.is_ended());
    assert_eq!(
        s.authenticate(&basic(&sess.id, &token)).unwrap_err(),
        AuthError::Unknown
    );
}

#[test]
fn an_open_tunnel_that_relays_nothing_does_not_keep_its_session_alive() {
    let s = store();
    let (sess, _) = add(&s, Duration::from_millis(200));
    let _guard = s.tunnel_opened(&sess, 8).unwrap();
    std::thread::sleep(Duration::from_millis(250));
    s.expire_idle();
    assert!(s.get(&sess.id).is_none(), "a silent tunnel is no traffic");
    assert!(sess.is_ended(), "its tunnels are told to close");
}

#[test]
fn bytes_a_tunnel_relays_keep_its_session_alive() {
    let s = store();
    let (sess, _) = add(&s, Duration::from_millis(200));
    let _guard = s.tunnel_opened(&sess, 8).unwrap();
    std::thread::sleep(Duration::from_millis(250));
    sess.mark_traffic();
    s.expire_idle();
    assert!(s.get(&sess.id).is_some(), "relayed bytes are traffic");
    assert!(!sess.is_ended());
}

#[test]
fn tunnels_per_session_are_capped() {
    let s = store();
    let (sess, _) = add(&s, Duration::from_secs(60));
    let first = s.tunnel_opened(&sess, 2).unwrap();
    let _second = s.tunnel_opened(&sess, 2).unwrap();
    assert!(
        s.tunnel_opened(&sess, 2).is_none(),
        "a third tunnel is over the limit"
    );
    drop(first);
    assert!(
        s.tunnel_opened(&sess, 2).is_some(),
        "a closed tunnel frees its place"
    );
}
