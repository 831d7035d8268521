//! Answers to DNS messages: one case per kind of question, built and read with
//! hickory-proto's own types.

use std::net::Ipv4Addr;

use super::*;
use crate::net::synthetic::RANGE;
use crate::policy::{OrgPolicy, RequestPolicy};

const ORG: &str = r#"
version = 1
allowed_domains = ["api.test", "*.example.test"]
denied_domains = ["bad.example.test"]
"#;

fn policies(org: &str, proxy: Option<&[&str]>) -> Policies {
    let org = OrgPolicy::from_toml(org, "org.toml").unwrap();
    let proxy = proxy.map(|domains| {
        let json = serde_json::json!({"type": "allowlist", "allowed_domains": domains});
        RequestPolicy::from_value(&json, "policy.json").unwrap()
    });
    Policies::new(org, proxy)
}

fn standard() -> Policies {
    policies(ORG, Some(&["api.test", "*.example.test"]))
}

/// A query for `name`: ASCII with dots between labels, or, when it holds a `|`, raw
/// labels separated by `|` (bytes a name written in text cannot carry).
fn query(name: &str, qtype: RecordType) -> Vec<u8> {
    let name = match name.contains('|') {
        true => Name::from_labels(name.split('|').map(str::as_bytes)).unwrap(),
        false => Name::from_ascii(name).unwrap(),
    };
    let mut m = Message::new();
    m.set_id(0x1234)
        .set_message_type(MessageType::Query)
        .set_op_code(OpCode::Query)
        .set_recursion_desired(true)
        .add_query(Query::query(name, qtype));
    m.to_vec().unwrap()
}

fn ask<'a>(policies: &'a Policies, names: &'a SyntheticNames) -> Given<'a> {
    Given {
        policies,
        synthetic: names,
        audit_refusing: false,
    }
}

fn reply(a: &Answer) -> Message {
    Message::from_vec(a.message.as_deref().expect("an answer")).expect("a DNS message")
}

fn addresses(m: &Message) -> Vec<Ipv4Addr> {
    m.answers()
        .iter()
        .filter_map(|r| match r.data() {
            RData::A(a) => Some(a.0),
            _ => None,
        })
        .collect()
}

#[test]
fn an_allowed_name_gets_its_synthetic_address() {
    let (p, names) = (standard(), SyntheticNames::new());
    let a = answer(&query("api.test.", RecordType::A), &ask(&p, &names));
    assert!(matches!(a.judged, Settled::Allowed(_)), "{a:?}");
    let m = reply(&a);
    assert_eq!(m.id(), 0x1234);
    assert_eq!(m.message_type(), MessageType::Response);
    assert_eq!(m.response_code(), ResponseCode::NoError);
    assert!(m.recursion_desired() && m.recursion_available() && m.authoritative());
    assert_eq!(m.queries().len(), 1, "the question is echoed");
    let got = addresses(&m);
    assert_eq!(got.len(), 1);
    assert!(RANGE.contains(&got[0]), "{got:?}");
    assert_eq!(m.answers()[0].ttl(), TTL);
    const { assert!(TTL <= 60) };
    let name = HostName::parse("api.test").unwrap();
    assert_eq!(names.address_for(&name), Some(got[0]), "the table holds it");

    let again = reply(&answer(
        &query("API.Test.", RecordType::A),
        &ask(&p, &names),
    ));
    assert_eq!(
        addresses(&again),
        got,
        "same name, case aside: same address"
    );
    assert_eq!(
        again.answers()[0].name().to_ascii(),
        "API.Test.",
        "the owner name is the question's, as asked"
    );
    let other = reply(&answer(
        &query("a.example.test.", RecordType::A),
        &ask(&p, &names),
    ));
    assert_ne!(addresses(&other), got, "another name, another address");
}

#[test]
fn other_types_of_an_allowed_name_are_empty() {
    let (p, names) = (standard(), SyntheticNames::new());
    for qtype in [
        RecordType::AAAA,
        RecordType::MX,
        RecordType::TXT,
        RecordType::ANY,
    ] {
        let a = answer(&query("api.test.", qtype), &ask(&p, &names));
        assert!(matches!(a.judged, Settled::Allowed(_)), "{qtype}");
        let m = reply(&a);
        assert_eq!(m.response_code(), ResponseCode::NoError, "{qtype}");
        assert!(m.answers().is_empty(), "{qtype}");
    }
    let first = std::net::IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1));
    assert_eq!(names.name_for(first), None, "no address was handed out");
}

/// `1.0.18.198.in-addr.arpa.` for 198.18.0.1.
fn reverse(addr: Ipv4Addr) -> String {
    let [a, b, c, d] = addr.octets();
    format!("{d}.{c}.{b}.{a}.in-addr.arpa.")
}

#[test]
fn a_synthetic_address_handed_out_gets_a_ptr_to_its_name() {
    let (p, names) = (standard(), SyntheticNames::new());
    let m = reply(&answer(
        &query("API.test.", RecordType::A),
        &ask(&p, &names),
    ));
    let addr = addresses(&m)[0];
    let a = answer(&query(&reverse(addr), RecordType::PTR), &ask(&p, &names));
    assert!(matches!(a.judged, Settled::Allowed(_)), "{a:?}");
    let m = reply(&a);
    assert_eq!(m.response_code(), ResponseCode::NoError);
    assert_eq!(m.answers().len(), 1, "{m:?}");
    assert_eq!(m.answers()[0].ttl(), TTL);
    match m.answers()[0].data() {
        RData::PTR(name) => assert_eq!(name.0.to_ascii(), "api.test.", "the normalised name"),
        other => panic!("not a PTR: {other:?}"),
    }
}

#[test]
fn other_reverse_names_are_judged_as_names_and_denied() {
    let (p, names) = (standard(), SyntheticNames::new());
    // In the range but not handed out; outside the range; an IPv6 reverse name.
    let v6 = "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.ip6.arpa.";
    for name in [
        reverse(Ipv4Addr::new(198, 18, 0, 9)),
        reverse(Ipv4Addr::LOCALHOST),
        v6.into(),
    ] {
        let a = answer(&query(&name, RecordType::PTR), &ask(&p, &names));
        assert!(matches!(a.judged, Settled::Denied(_)), "{name}: {a:?}");
        assert_eq!(reply(&a).response_code(), ResponseCode::NXDomain, "{name}");
    }
}

/// (rule, name, reason, rule that decided)
type DenialRow<'a> = (&'a str, &'a str, &'a str, Option<&'a str>);

#[test]
fn denied_and_invalid_names_get_nxdomain_and_a_refusal() {
    let (p, names) = (standard(), SyntheticNames::new());
    let long = format!("{}.evil.test.", "a".repeat(63));
    #[rustfmt::skip]
    let rows: &[DenialRow] = &[
        ("not_in_org_allowlist",  "evil.test.",          "not_in_org_allowlist",  None),
        ("denied_domain",         "bad.example.test.",   "denied_domain",         Some("bad.example.test")),
        ("apex_not_in_subtree",   "example.test.",       "not_in_org_allowlist",  None),
        ("long_label",            &long,                 "not_in_org_allowlist",  None),
        ("ip_literal_name",       "10.0.0.1.",           "invalid_host",          None),
        ("space_in_label",        "a b|test",            "invalid_host",          None),
        ("dot_in_a_label",        "a.b|test",            "invalid_host",          None),
        ("utf8_label",            "b\u{fc}cher|test",    "invalid_host",          None),
        ("nul_in_label",          "a\0b|test",           "invalid_host",          None),
        ("root",                  ".",                   "invalid_host",          None),
    ];
    for (rule, name, reason, by) in rows {
        for qtype in [RecordType::A, RecordType::AAAA] {
            let a = answer(&query(name, qtype), &ask(&p, &names));
            let m = reply(&a);
            assert_eq!(m.response_code(), ResponseCode::NXDomain, "{rule} {qtype}");
            assert!(m.answers().is_empty(), "{rule}");
            let Settled::Denied(refusal) = a.judged else {
                panic!("{rule}: {:?}", a.judged)
            };
            assert_eq!(refusal.reason.as_str(), *reason, "{rule}");
            assert_eq!(refusal.rule.as_deref(), *by, "{rule}");
        }
    }
}

#[test]
fn a_refusal_names_the_host_as_judged() {
    let (p, names) = (standard(), SyntheticNames::new());
    let a = answer(&query("EVIL.Test.", RecordType::A), &ask(&p, &names));
    let Settled::Denied(r) = a.judged else {
        panic!("{:?}", a.judged)
    };
    assert_eq!(r.host, "evil.test");
    assert_eq!(r.level, Some(crate::policy::Level::Org));
    let a = answer(&query("a b|test", RecordType::A), &ask(&p, &names));
    let Settled::Denied(r) = a.judged else {
        panic!("{:?}", a.judged)
    };
    assert_eq!(r.host, "a\\032b.test", "escaped, printable");
    let a = answer(
        &query("b\u{fc}cher|a.b|test", RecordType::A),
        &ask(&p, &names),
    );
    let Settled::Denied(r) = a.judged else {
        panic!("{:?}", a.judged)
    };
    assert_eq!(r.host, "b\\195\\188cher.a\\046b.test");
}

#[test]
fn the_request_level_is_the_proxy_policy() {
    let names = SyntheticNames::new();
    let p = policies(ORG, Some(&["api.test"]));
    let a = answer(&query("a.example.test.", RecordType::A), &ask(&p, &names));
    let Settled::Denied(r) = a.judged else {
        panic!("{:?}", a.judged)
    };
    assert_eq!(r.reason, Reason::NotInRequestPolicy);
    // Without --policy, the organization's default (here none: disabled).
    let p = policies(ORG, None);
    let a = answer(&query("api.test.", RecordType::A), &ask(&p, &names));
    let Settled::Denied(r) = a.judged else {
        panic!("{:?}", a.judged)
    };
    assert_eq!(r.reason, Reason::NetworkDisabled);
}

#[test]
fn report_mode_answers_a_would_be_denial() {
    let names = SyntheticNames::new();
    let p = policies(&format!("mode = \"report\"\n{ORG}"), Some(&["api.test"]));
    let a = answer(&query("evil.test.", RecordType::A), &ask(&p, &names));
    let Settled::WouldDeny(r) = &a.judged else {
        panic!("{:?}", a.judged)
    };
    assert_eq!(r.reason, Reason::NotInOrgAllowlist);
    let m = reply(&a);
    assert_eq!(m.response_code(), ResponseCode::NoError);
    assert!(RANGE.contains(&addresses(&m)[0]));
}

#[test]
fn an_unwritable_audit_log_or_a_widening_policy_is_servfail() {
    let names = SyntheticNames::new();
    let p = standard();
    let refusing = Given {
        audit_refusing: true,
        ..ask(&p, &names)
    };
    for name in ["api.test.", "evil.test."] {
        let a = answer(&query(name, RecordType::A), &refusing);
        assert!(matches!(a.judged, Settled::AuditUnavailable), "{name}");
        assert_eq!(reply(&a).response_code(), ResponseCode::ServFail);
    }
    // A --policy the (reloaded) organization does not cover.
    let wide = policies(ORG, Some(&["api.test", "other.test"]));
    assert!(wide.widening.is_some());
    let a = answer(&query("api.test.", RecordType::A), &ask(&wide, &names));
    assert_eq!(reply(&a).response_code(), ResponseCode::ServFail);
    let Settled::Denied(r) = a.judged else {
        panic!("{:?}", a.judged)
    };
    assert_eq!(r.reason, Reason::PolicyWidening);
    assert!(r.rule.is_some_and(|rule| rule.contains("other.test")));
}

#[test]
fn no_address_left_is_servfail() {
    let p = standard();
    let names = SyntheticNames::new();
    // Fill the table through its own API: 2^17 - 2 names.
    let mut n = 0;
    while names
        .address_for(&HostName::parse(&format!("n{n}.fill.test")).unwrap())
        .is_some()
    {
        n += 1;
    }
    let a = answer(&query("api.test.", RecordType::A), &ask(&p, &names));
    assert!(matches!(a.judged, Settled::Exhausted), "{:?}", a.judged);
    assert_eq!(reply(&a).response_code(), ResponseCode::ServFail);
}

#[test]
fn what_is_not_a_query_is_refused_or_dropped() {
    let (p, names) = (standard(), SyntheticNames::new());
    let ask = ask(&p, &names);
    // Not a header at all: dropped.
    for bytes in [&b""[..], &b"\x12"[..], &b"0123456789a"[..]] {
        let a = answer(bytes, &ask);
        assert!(a.message.is_none(), "{bytes:?}");
        assert!(matches!(a.judged, Settled::Malformed));
    }
    // A header, then garbage: FORMERR with the same id.
    let mut cut = query("api.test.", RecordType::A);
    cut.truncate(15);
    let m = reply(&answer(&cut, &ask));
    assert_eq!((m.id(), m.response_code()), (0x1234, ResponseCode::FormErr));
    // A response is never answered.
    let mut response = Message::from_vec(&query("api.test.", RecordType::A)).unwrap();
    response.set_message_type(MessageType::Response);
    assert!(answer(&response.to_vec().unwrap(), &ask).message.is_none());
    // Another opcode: NOTIMP.
    let mut notify = Message::from_vec(&query("api.test.", RecordType::SOA)).unwrap();
    notify.set_op_code(OpCode::Notify);
    let m = reply(&answer(&notify.to_vec().unwrap(), &ask));
    assert_eq!(m.response_code(), ResponseCode::NotImp);
    // No question, or two: FORMERR.
    let mut none = Message::from_vec(&query("api.test.", RecordType::A)).unwrap();
    none.take_queries();
    let m = reply(&answer(&none.to_vec().unwrap(), &ask));
    assert_eq!(m.response_code(), ResponseCode::FormErr);
    let mut two = Message::from_vec(&query("api.test.", RecordType::A)).unwrap();
    two.add_query(Query::query(
        Name::from_ascii("evil.test.").unwrap(),
        RecordType::A,
    ));
    let m = reply(&answer(&two.to_vec().unwrap(), &ask));
    assert_eq!(m.response_code(), ResponseCode::FormErr);
    // Another class: REFUSED.
    let mut chaos = Message::from_vec(&query("version.bind.", RecordType::TXT)).unwrap();
    chaos.queries_mut()[0].set_query_class(DNSClass::CH);
    let a = answer(&chaos.to_vec().unwrap(), &ask);
    assert!(matches!(a.judged, Settled::Malformed));
    assert_eq!(reply(&a).response_code(), ResponseCode::Refused);
}
