//! The handshake parsers, one line per case.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use super::*;

fn done<T>(p: Progress<T>) -> (T, usize) {
    match p {
        Progress::Done(v, n) => (v, n),
        Progress::Need(n) => panic!("needs {n} bytes"),
        Progress::Bad(b) => panic!("bad: {b}"),
    }
}

#[test]
fn greeting_asks_for_exactly_the_bytes_it_lacks() {
    assert_eq!(parse_greeting(&[]), Progress::Need(1));
    assert_eq!(parse_greeting(&[5]), Progress::Need(2));
    assert_eq!(parse_greeting(&[5, 2, 0]), Progress::Need(4));
    let (g, n) = done(parse_greeting(&[5, 2, 0, 2, 0xAA]));
    assert_eq!((g.methods, n), (vec![0, 2], 4));
    assert_eq!(done(parse_greeting(&[5, 0])).0.methods, Vec::<u8>::new());
}

#[test]
fn socks4_and_garbage_are_refused_at_the_first_byte() {
    assert_eq!(parse_greeting(&[4]), Progress::Bad(Bad::Socks4));
    assert_eq!(
        parse_greeting(b"GET / HTTP/1.1"),
        Progress::Bad(Bad::NotSocks(b'G'))
    );
}

#[test]
fn user_pass_is_read_whole_and_never_debug_printed() {
    assert_eq!(parse_user_pass(&[1, 2, b'i', b'd']), Progress::Need(5));
    assert_eq!(
        parse_user_pass(&[1, 2, b'i', b'd', 3, b's']),
        Progress::Need(8)
    );
    let (up, n) = done(parse_user_pass(&[1, 2, b'i', b'd', 3, b's', b'e', b'c']));
    assert_eq!(
        (up.user.as_slice(), up.pass.as_slice(), n),
        (&b"id"[..], &b"sec"[..], 8)
    );
    assert!(!format!("{up:?}").contains("sec"));
    assert_eq!(parse_user_pass(&[5]), Progress::Bad(Bad::AuthVersion(5)));
}

#[test]
fn request_reads_every_address_type() {
    let v4 = [5, 1, 0, 1, 127, 0, 0, 1, 0, 80];
    let (r, n) = done(parse_request(&v4));
    assert_eq!((r.dest, r.port, n), (Dest::V4(Ipv4Addr::LOCALHOST), 80, 10));
    let mut v6 = vec![5, 1, 0, 4];
    v6.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
    v6.extend_from_slice(&443u16.to_be_bytes());
    assert_eq!(
        done(parse_request(&v6)).0.dest,
        Dest::V6(Ipv6Addr::LOCALHOST)
    );
    let name = [5, 1, 0, 3, 6, b'a', b'_', b'.', b't', b'-', b'1', 1, 0xBB];
    let (r, n) = done(parse_request(&name));
    assert_eq!((r.dest, r.port, n), (Dest::Name("a_.t-1".into()), 443, 13));
    assert_eq!(parse_request(&[5, 1, 0, 3]), Progress::Need(5));
    assert_eq!(parse_request(&[5, 1, 0, 3, 3, b'a']), Progress::Need(10));
}

#[test]
fn a_name_with_a_nul_or_any_other_byte_is_a_bad_name() {
    for bad in [
        &b"ok.test\0evil"[..],
        b"a b",
        b"a:1",
        b"\xc3\xa9.test",
        b"",
        b"a/b",
    ] {
        let mut req = vec![5, 1, 0, 3, bad.len() as u8];
        req.extend_from_slice(bad);
        req.extend_from_slice(&[0, 80]);
        assert_eq!(
            done(parse_request(&req)).0.dest,
            Dest::BadName(bad.to_vec()),
            "{bad:?}"
        );
    }
    assert_eq!(Dest::BadName(b"a\0b".to_vec()).host_text(), "a\\x00b");
}

#[test]
fn request_refuses_wrong_version_reserved_byte_and_address_type() {
    assert_eq!(
        parse_request(&[4, 1, 0, 1]),
        Progress::Bad(Bad::RequestVersion(4))
    );
    assert_eq!(
        parse_request(&[5, 1, 1, 1]),
        Progress::Bad(Bad::Reserved(1))
    );
    assert_eq!(
        parse_request(&[5, 1, 0, 2]),
        Progress::Bad(Bad::AddressType(2))
    );
}

#[test]
fn method_choice_follows_the_session_settings() {
    // (offered, sessions served, session required) -> method
    let cases: &[(&[u8], bool, bool, u8)] = &[
        (&[0], false, false, METHOD_NONE),
        (&[2], false, false, METHOD_USER_PASS),
        (&[0, 2], false, false, METHOD_NONE),
        (&[0, 2], true, false, METHOD_USER_PASS),
        (&[0], true, false, METHOD_NONE),
        (&[0], true, true, NO_ACCEPTABLE_METHOD),
        (&[2], true, true, METHOD_USER_PASS),
        (&[1], false, false, NO_ACCEPTABLE_METHOD),
        (&[], false, false, NO_ACCEPTABLE_METHOD),
    ];
    for &(offered, sessions, required, want) in cases {
        assert_eq!(
            choose_method(offered, sessions, required),
            want,
            "{offered:?} {sessions} {required}"
        );
    }
}

#[test]
fn replies_carry_the_bound_address_of_a_success_only() {
    let v4: SocketAddr = "127.0.0.1:4000".parse().unwrap();
    assert_eq!(
        reply(Reply::Succeeded, Some(v4)),
        [5, 0, 0, 1, 127, 0, 0, 1, 0x0F, 0xA0]
    );
    assert_eq!(
        reply(Reply::NotAllowed, None),
        [5, 2, 0, 1, 0, 0, 0, 0, 0, 0]
    );
    let v6: SocketAddr = "[::1]:1".parse().unwrap();
    assert_eq!(reply(Reply::Succeeded, Some(v6)).len(), 22);
}
