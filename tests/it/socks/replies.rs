//! Every reply code of docs/reference/socks5.md ("Replies"), each with what
//! the audit log says of it. `0x00` and `0x02` are in [`super::reach`]; `0xFF` and the
//! username/password status in [`super::auth`].

use std::net::Ipv4Addr;

use super::{assert_socks_record, Setup, Socks, To, BIND, CONNECT, UDP_ASSOCIATE};
use crate::support::org::allowlist_json;
use crate::support::proxy::free_port;
use crate::support::IO_TIMEOUT;

#[tokio::test]
async fn an_allowed_name_that_does_not_resolve_gets_0x04_and_no_denial() {
    let policy = allowlist_json(&["allowed.test", "nowhere.test"]);
    let s = Setup::start_policy(|org| org.allow("nowhere.test"), &policy, &[]).await;
    let (code, mut socks) =
        Socks::connect(s.socks, &To::name("nowhere.test"), s.origin.port()).await;
    assert_eq!(code, 0x04, "host unreachable");
    assert!(socks.closed_within(IO_TIMEOUT).await);
    assert!(
        s.dns.queries_for("nowhere.test") > 0,
        "allowed, so looked up"
    );
    // A failure to reach an allowed destination is not a denial.
    s.proxy.expect_audit_count(0).await;
}

#[tokio::test]
async fn a_destination_that_refuses_the_connection_gets_0x05() {
    let closed = free_port(Ipv4Addr::LOCALHOST.into()).port();
    let s = Setup::start_with(|org| org.ports(&[closed]), &[]).await;
    let (code, mut socks) = Socks::connect(s.socks, &To::name("allowed.test"), closed).await;
    assert_eq!(code, 0x05, "connection refused");
    assert!(socks.closed_within(IO_TIMEOUT).await);
    s.proxy.expect_audit_count(0).await;
}

#[tokio::test]
async fn bind_and_udp_associate_get_0x07_and_are_audited() {
    let s = Setup::start(&[]).await;
    for command in [BIND, UDP_ASSOCIATE] {
        let mut socks = Socks::open(s.socks).await;
        assert_eq!(socks.greet(&[0]).await, 0);
        let (code, _) = socks
            .request(command, &To::name("allowed.test"), s.origin.port())
            .await;
        assert_eq!(code, 0x07, "command {command} not supported");
        assert!(socks.closed_within(IO_TIMEOUT).await);
    }
    let records = s.proxy.expect_audit_count(2).await;
    for record in &records {
        assert_socks_record(record, "egress.denied", Some("invalid_request"));
        assert_eq!(record["host"], "allowed.test");
    }
    assert_eq!(s.origin.connections(), 0);
    assert!(
        s.dns.queried_names().is_empty(),
        "{:?}",
        s.dns.queried_names()
    );
}

#[tokio::test]
async fn a_request_that_cannot_be_read_gets_0x01() {
    let s = Setup::start(&[]).await;
    // Address type 0x02 does not exist; a reserved byte must be 0x00.
    for request in [
        &[5u8, CONNECT, 0, 2, 0, 0][..],
        &[5, CONNECT, 1, 1, 127, 0, 0, 1, 0, 80],
    ] {
        let mut socks = Socks::open(s.socks).await;
        assert_eq!(socks.greet(&[0]).await, 0);
        socks.send(request).await;
        let (code, _) = socks.reply().await;
        assert_eq!(code, 0x01, "general failure for {request:?}");
        assert!(socks.closed_within(IO_TIMEOUT).await);
    }
    let records = s.proxy.expect_audit_count(2).await;
    for record in &records {
        assert_socks_record(record, "egress.denied", Some("invalid_request"));
    }
}
