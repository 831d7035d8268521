//! Names the policy allows: a synthetic address per name, stable across spellings and
//! transports, and empty answers for the other record types.

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;

use super::{org, synthetic, Jail};
use crate::support::dns_client::{a_records, TcpClient, UdpClient};

#[tokio::test]
async fn an_allowed_name_gets_a_stable_synthetic_address_over_udp_and_tcp() {
    let jail = Jail::start(org(), &[]).await;
    let mut udp = UdpClient::new(jail.dns).await;
    let first = udp.query("allowed.test.", RecordType::A).await;
    assert_eq!(first.response_code(), ResponseCode::NoError);
    let addrs = a_records(&first);
    assert_eq!(addrs.len(), 1, "{first:?}");
    assert!(synthetic(addrs[0]), "{addrs:?}");
    assert!(first.answers()[0].ttl() <= 60);

    let again = udp.query("allowed.test.", RecordType::A).await;
    assert_eq!(a_records(&again), addrs, "the same name keeps its address");
    for spelling in ["ALLOWED.Test.", "allowed.test"] {
        let m = udp.query(spelling, RecordType::A).await;
        assert_eq!(
            a_records(&m),
            addrs,
            "{spelling}: case and the dot make no new name"
        );
    }
    let other = udp.query("other.test.", RecordType::A).await;
    let other = a_records(&other);
    assert!(
        synthetic(other[0]) && other != addrs,
        "{other:?} vs {addrs:?}"
    );

    let mut tcp = TcpClient::connect(jail.dns).await;
    let by_tcp = tcp.query("allowed.test.", RecordType::A).await;
    assert_eq!(by_tcp.response_code(), ResponseCode::NoError);
    assert_eq!(a_records(&by_tcp), addrs, "TCP and UDP share the table");
    let second = tcp.query("other.test.", RecordType::A).await;
    assert_eq!(
        a_records(&second),
        other,
        "several messages on one connection"
    );

    jail.assert_nothing_upstream().await;
    assert!(
        jail.proxy.audit_lines().is_empty(),
        "an allowed name is not audited"
    );
}

#[tokio::test]
async fn aaaa_and_other_types_of_an_allowed_name_are_empty_noerror() {
    let jail = Jail::start(org(), &[]).await;
    let mut udp = UdpClient::new(jail.dns).await;
    let mut tcp = TcpClient::connect(jail.dns).await;
    for qtype in [RecordType::AAAA, RecordType::MX, RecordType::TXT] {
        for m in [
            udp.query("allowed.test.", qtype).await,
            tcp.query("allowed.test.", qtype).await,
        ] {
            assert_eq!(m.response_code(), ResponseCode::NoError, "{qtype}");
            assert!(m.answers().is_empty(), "{qtype}: {m:?}");
        }
    }
    jail.assert_nothing_upstream().await;
}
