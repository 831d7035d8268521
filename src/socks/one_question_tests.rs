//! One question, whatever door it comes through (docs/ARCHITECTURE.md, "One
//! judgement"): the same destination read by each listener's adapter (the explicit
//! proxy's `CONNECT`, a SOCKS5 request, a redirected connection, a DNS query) is asked
//! as the same [`Ask`] and decided by the same steps, to the same verdict.

use hickory_proto::op::{Message, MessageType, OpCode, Query};
use hickory_proto::rr::{Name, RecordType};
use hyper::{Method, Request};

use super::{ask, wire, Asking};
use crate::dns::answer::{answer, Given, Settled};
use crate::judgement::ask::{Ask, Credentials};
use crate::judgement::judge::decide_now;
use crate::judgement::Policies;
use crate::net::synthetic::SyntheticNames;
use crate::policy::{Host, OrgPolicy, Reason, RequestPolicy, Target, Verdict};
use crate::proxy::request;

const ORG: &str = r#"
version = 1
allowed_domains = ["api.test", "*.api.test", "other.test"]
denied_domains = ["bad.api.test"]
allowed_ports = [443]
"#;

fn policies() -> Policies {
    let org = OrgPolicy::from_toml(ORG, "org.toml").unwrap();
    let json =
        serde_json::json!({"type": "allowlist", "allowed_domains": ["api.test", "*.api.test"]});
    Policies::new(
        org,
        Some(RequestPolicy::from_value(&json, "policy.json").unwrap()),
    )
}

/// The verdict of a decision: allowed, or the reason it is refused.
fn verdict(
    decided: Result<
        (crate::policy::Decision, Option<crate::dlp::Hit>),
        crate::judgement::refusal::Refusal,
    >,
) -> Option<Reason> {
    match decided {
        Ok((d, _)) => match d.verdict {
            Verdict::Allow => None,
            Verdict::Deny(r) | Verdict::WouldDeny(r) => Some(r),
        },
        Err(refusal) => Some(refusal.reason),
    }
}

fn dns_verdict(name: &str, policies: &Policies) -> Option<Reason> {
    let mut m = Message::new();
    m.set_id(7)
        .set_message_type(MessageType::Query)
        .set_op_code(OpCode::Query)
        .add_query(Query::query(
            Name::from_ascii(format!("{name}.")).unwrap(),
            RecordType::A,
        ));
    let synthetic = SyntheticNames::new();
    let given = Given {
        policies,
        synthetic: &synthetic,
        audit_refusing: false,
    };
    match answer(&m.to_vec().unwrap(), &given).judged {
        Settled::Allowed(_) => None,
        Settled::Denied(r) | Settled::WouldDeny(r) => Some(r.reason),
        other => panic!("{name}: {other:?}"),
    }
}

#[test]
fn one_destination_gets_one_verdict_through_every_adapter() {
    let policies = policies();
    let cases = [
        ("api.test", None),
        ("x.api.test", None),
        ("bad.api.test", Some(Reason::DeniedDomain)),
        ("other.test", Some(Reason::NotInRequestPolicy)),
        ("unlisted.test", Some(Reason::NotInOrgAllowlist)),
    ];
    for (name, want) in cases {
        let target = Target {
            host: Host::parse(name).unwrap(),
            port: 443,
        };
        // The explicit proxy's `CONNECT name:443`.
        let req = Request::builder()
            .method(Method::CONNECT)
            .uri(format!("{name}:443"))
            .body(())
            .unwrap();
        let proxy = request::ask(&req, None, 65536, None).unwrap();
        // SOCKS5's `CONNECT` to the name, port 443.
        let socks = ask(&Asking {
            request: wire::Request {
                command: 1,
                dest: wire::Dest::Name(name.to_string()),
                port: 443,
            },
            session: None,
        })
        .unwrap();
        // A connection redirected to the name's (synthetic) address, port 443.
        let transparent = Ask::tunnel(target.clone(), Credentials::None);
        for (door, asked) in [
            ("proxy", &proxy),
            ("socks5", &socks),
            ("transparent", &transparent),
        ] {
            assert_eq!(asked.target, target, "{door}: {name}");
            assert_eq!(
                verdict(decide_now(asked, &policies, false)),
                want,
                "{door}: {name}"
            );
        }
        assert_eq!(dns_verdict(name, &policies), want, "dns: {name}");
    }
}
