//! The answer to one DNS message, from the policy alone (docs/reference/confinement.md,
//! "DNS listener"). No I/O: the message in, the message out and what it came to, which
//! the listener counts and audits. Nothing here ever asks another DNS server.

use std::net::IpAddr;

use ipnet::IpNet;

use hickory_proto::op::{Header, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::{A, PTR};
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType};
use hickory_proto::serialize::binary::{BinDecodable, BinDecoder};

use crate::judgement::ask::{Ask, Credentials, Narrowing, What};
use crate::judgement::judge::decide_now;
use crate::judgement::refusal::Refusal;
use crate::judgement::Policies;
use crate::net::synthetic::SyntheticNames;
use crate::policy::{Decision, Host, HostName, Reason, Target, Verdict};

/// The TTL of an `A` answer: short, so a client asks again (and is judged again) soon
/// after a reload narrows the policy.
pub(crate) const TTL: u32 = 60;

/// What [`answer`] reads besides the message.
pub(crate) struct Given<'a> {
    pub policies: &'a Policies,
    pub synthetic: &'a SyntheticNames,
    /// The audit log cannot be written and the proxy fails closed.
    pub audit_refusing: bool,
}

/// What a message came to: the listener counts each, and audits the refusals.
#[derive(Debug)]
pub(crate) enum Settled {
    /// An allowed name: its `A` answer, or an empty `NOERROR` for another type, with the
    /// name and the decision (for its span, docs/reference/opentelemetry.md); or the
    /// `PTR` answer for a synthetic address handed out (the name it stands for), which
    /// no policy judges (`None`).
    Allowed(Option<Box<(Target, Decision)>>),
    /// Allowed by report mode only: answered as allowed, audited as `egress.would_deny`.
    WouldDeny(Refusal),
    /// A name answered (allowed, or by report mode) that carries a secret a detector
    /// only reports (`[dlp] action = "report"`): audited as `egress.flagged`, with the
    /// refusal it would otherwise have been (`secret_detected`; docs/reference/dlp.md).
    Flagged(Refusal),
    /// A denied or invalid name (`NXDOMAIN`), or a `--policy` left widening by a reload
    /// (`SERVFAIL`): audited as `egress.denied`.
    Denied(Refusal),
    /// `SERVFAIL` while the audit log cannot be written (nothing is judged unrecorded).
    AuditUnavailable,
    /// `SERVFAIL`: an allowed name, but every synthetic address is taken.
    Exhausted,
    /// Not a question this listener answers: `FORMERR`, `NOTIMP` or `REFUSED`, or
    /// nothing at all for bytes without a DNS header (or a response, never answered so
    /// that two servers cannot be set to bounce messages between them).
    Malformed,
}

/// The answer to one DNS message and what it came to. `message` is `None` when
/// nothing is sent back.
#[derive(Debug)]
pub(crate) struct Answer {
    pub message: Option<Vec<u8>>,
    pub judged: Settled,
}

/// Answer the DNS message `bytes`.
pub(crate) fn answer(bytes: &[u8], given: &Given) -> Answer {
    let request = match Message::from_vec(bytes) {
        Ok(m) => m,
        Err(_) => return unreadable(bytes),
    };
    if request.message_type() != MessageType::Query {
        return silent();
    }
    if request.op_code() != OpCode::Query {
        return refuse(&request, ResponseCode::NotImp);
    }
    let [query] = request.queries() else {
        return refuse(&request, ResponseCode::FormErr);
    };
    if query.query_class() != DNSClass::IN {
        return refuse(&request, ResponseCode::Refused);
    }
    if query.query_type() == RecordType::PTR {
        if let Some(name) = synthetic_reverse(query.name(), given.synthetic) {
            return Answer {
                message: reply(&request, query, ResponseCode::NoError, ptr(&name)),
                judged: Settled::Allowed(None),
            };
        }
    }
    let name = match host_name(query.name()) {
        Some(name) => name,
        None => {
            let host = printable(query.name());
            let refusal = Refusal::new(Reason::InvalidHost, host, 0)
                .with_detail("the queried name is not a valid host name");
            return nxdomain(&request, query, refusal);
        }
    };
    // The question every listener asks, of a name on any port (its port is not
    // recorded for a DNS query): a connection without a session would be judged by the
    // same levels.
    let asked = Ask {
        target: Target {
            host: Host::Name(name.clone()),
            port: 0,
        },
        credentials: Credentials::None,
        what: What::Name,
        narrowing: Narrowing::Absent,
        head_bytes: 0,
        url: None,
        exposed: None,
    };
    let servfail = |judged| Answer {
        message: reply(&request, query, ResponseCode::ServFail, None),
        judged,
    };
    let (decision, flagged) = match decide_now(&asked, given.policies, given.audit_refusing) {
        Ok(decided) => decided,
        Err(refusal) if refusal.reason == Reason::AuditUnavailable => {
            return servfail(Settled::AuditUnavailable)
        }
        // A name that carries a canary or a secret (docs/reference/dlp.md): `REFUSED`.
        Err(refusal)
            if matches!(
                refusal.reason,
                Reason::ExfiltrationDetected | Reason::SecretDetected
            ) =>
        {
            return Answer {
                message: reply(&request, query, ResponseCode::Refused, None),
                judged: Settled::Denied(refusal),
            }
        }
        // A `--policy` a reload left widening.
        Err(refusal) => return servfail(Settled::Denied(refusal)),
    };
    let judged = match (decision.verdict, flagged) {
        // The secret is the reason recorded, and its name is not (report mode's too).
        (Verdict::Allow | Verdict::WouldDeny(_), Some(hit)) => {
            Settled::Flagged(Refusal::exfiltration(hit, &asked.target))
        }
        (Verdict::Allow, None) => Settled::Allowed(Some(Box::new((asked.target, decision)))),
        (Verdict::WouldDeny(reason), None) => {
            Settled::WouldDeny(Refusal::from_decision(&decision, reason, &asked.target))
        }
        (Verdict::Deny(reason), _) => {
            let refusal = Refusal::from_decision(&decision, reason, &asked.target);
            return nxdomain(&request, query, refusal);
        }
    };
    if query.query_type() != RecordType::A {
        return Answer {
            message: reply(&request, query, ResponseCode::NoError, None),
            judged,
        };
    }
    match given.synthetic.address_for(&name) {
        Some(addr) => Answer {
            message: reply(
                &request,
                query,
                ResponseCode::NoError,
                Some(RData::A(A(addr))),
            ),
            judged,
        },
        None => Answer {
            message: reply(&request, query, ResponseCode::ServFail, None),
            judged: Settled::Exhausted,
        },
    }
}

/// The name a synthetic address stands for, when `name` is that address's reverse name
/// (`1.0.18.198.in-addr.arpa.`) and the address was handed out. It tells CMD nothing
/// its own `A` query did not; any other reverse name is judged as a name (and denied
/// unless a policy allows it).
fn synthetic_reverse(name: &Name, synthetic: &SyntheticNames) -> Option<HostName> {
    match name.parse_arpa_name().ok()? {
        IpNet::V4(net) if net.prefix_len() == 32 => synthetic.name_for(IpAddr::V4(net.addr())),
        _ => None,
    }
}

/// The `PTR` record data naming `name`.
fn ptr(name: &HostName) -> Option<RData> {
    let fqdn = Name::from_ascii(format!("{name}.")).ok()?;
    Some(RData::PTR(PTR(fqdn)))
}

/// The name as the policy knows it: every label letters, digits, `-` or `_` (anything
/// else, escaped or not, is not a host name), then normalised as a request's host is.
fn host_name(name: &Name) -> Option<HostName> {
    let mut text = String::with_capacity(name.len());
    for (i, label) in name.iter().enumerate() {
        let ldh = |b: &u8| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_';
        if !label.iter().all(ldh) {
            return None;
        }
        if i > 0 {
            text.push('.');
        }
        // Checked above: ASCII only.
        text.extend(label.iter().map(|&b| char::from(b)));
    }
    HostName::parse(&text).ok()
}

/// The name for an audit record, when it is not a host name: printable ASCII, every
/// byte but letters, digits, `-` and `_` written `\DDD` (decimal, as in a zone file),
/// no trailing dot; the root is `.`.
fn printable(name: &Name) -> String {
    use std::fmt::Write;
    let mut text = String::with_capacity(name.len());
    for (i, label) in name.iter().enumerate() {
        if i > 0 {
            text.push('.');
        }
        for &b in label {
            match b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
                true => text.push(char::from(b)),
                false => {
                    let _ = write!(text, "\\{b:03}");
                }
            }
        }
    }
    if text.is_empty() {
        text.push('.');
    }
    text
}

fn nxdomain(request: &Message, query: &Query, refusal: Refusal) -> Answer {
    Answer {
        message: reply(request, query, ResponseCode::NXDomain, None),
        judged: Settled::Denied(refusal),
    }
}

/// The reply to `request`, with its question and, when given, one record (`A` or `PTR`).
fn reply(
    request: &Message,
    query: &Query,
    code: ResponseCode,
    data: Option<RData>,
) -> Option<Vec<u8>> {
    let mut header = Header::response_from_request(request.header());
    header
        .set_authoritative(true)
        .set_recursion_available(true)
        .set_response_code(code);
    let mut response = Message::new();
    response.set_header(header).add_query(query.clone());
    if let Some(data) = data {
        response.add_answer(Record::from_rdata(query.name().clone(), TTL, data));
    }
    response.to_vec().ok()
}

/// An error reply without the question (it may be what could not be read).
fn refuse(request: &Message, code: ResponseCode) -> Answer {
    let response = Message::error_msg(request.id(), request.op_code(), code);
    Answer {
        message: response.to_vec().ok(),
        judged: Settled::Malformed,
    }
}

/// Bytes that are not a whole message: `FORMERR` when a query's header can be read,
/// else nothing.
fn unreadable(bytes: &[u8]) -> Answer {
    let mut decoder = BinDecoder::new(bytes);
    match Header::read(&mut decoder) {
        Ok(h) if h.message_type() == MessageType::Query => {
            let response = Message::error_msg(h.id(), h.op_code(), ResponseCode::FormErr);
            Answer {
                message: response.to_vec().ok(),
                judged: Settled::Malformed,
            }
        }
        _ => silent(),
    }
}

fn silent() -> Answer {
    Answer {
        message: None,
        judged: Settled::Malformed,
    }
}

#[cfg(test)]
#[path = "answer_tests.rs"]
mod tests;
