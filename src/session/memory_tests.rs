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

/// What is kept of a token is its SHA-256 (the Redis store's `token_sha256` too, so every
/// replica of every version must agree): FIPS 180-2's test vector.
#[test]
fn a_token_is_kept_as_its_sha256() {
    let hex: String = crate::session::hash_token("abc")
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(
        hex,
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
}

/// `Basic base64(ID:TOKEN)`: split at the first colon, so a token may hold one; no colon
/// or text that is not UTF-8 is malformed.
#[test]
fn credentials_split_at_the_first_colon() {
    let value = |text: &[u8]| {
        let enc = base64::engine::general_purpose::STANDARD.encode(text);
        HeaderValue::from_str(&format!("basic  {enc} ")).unwrap()
    };
    let of = |text: &[u8]| crate::session::credentials_of(1, Some(&value(text)));
    assert_eq!(
        of(b"s1:to:ken").unwrap(),
        Some(("s1".to_string(), "to:ken".to_string()))
    );
    assert_eq!(of(b":").unwrap(), Some((String::new(), String::new())));
    assert_eq!(of(b"no colon").unwrap_err(), AuthError::Malformed);
    assert_eq!(of(b"s1:\xff").unwrap_err(), AuthError::Malformed);
    assert_eq!(
        crate::session::credentials_of(2, Some(&value(b"s1:t"))).unwrap_err(),
        AuthError::Malformed
    );
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
