//! The `message` of a 403 body: plain sentences for a person, or a model, reading a
//! tool's error (docs/reference/answers.md, "The message"). Each says which destination
//! was refused, what refused it, what would change that, and that the other routes out
//! are closed and logged too. None suggests a way around the policy: the only change a
//! message names is a change to a policy, made by whoever owns it.

use crate::judgement::refusal::Refusal;
use crate::policy::{Level, Reason};

/// The sentence every message ends with.
const CLOSED: &str =
    "Other routes out of this sandbox are closed too, and every attempt is logged.";

/// The message of a refusal: what refused it and what would change it, then [`CLOSED`].
/// The refusal's own detail, when it has one, follows what refused it.
pub(crate) fn message(refusal: &Refusal) -> String {
    let dest = destination(&refusal.host, refusal.port);
    let (what, change) = texts(refusal, &dest);
    match &refusal.detail {
        Some(detail) => format!("{what} ({detail}). {change} {CLOSED}"),
        None => format!("{what}. {change} {CLOSED}"),
    }
}

/// `host:port` in backticks, an IPv6 address in brackets.
fn destination(host: &str, port: u16) -> String {
    match host {
        "" => "this request's destination".to_string(),
        h if h.contains(':') && !h.starts_with('[') => format!("`[{h}]:{port}`"),
        h => format!("`{h}:{port}`"),
    }
}

/// The policy a refusal's level names, and who changes it.
struct Owner {
    policy: String,
    who: &'static str,
}

fn owner(refusal: &Refusal) -> Owner {
    match (refusal.level, &refusal.session) {
        (Some(Level::Request), Some(id)) => Owner {
            policy: format!("this session's policy (session `{id}`)"),
            who: "the operator who started this sandbox",
        },
        (Some(Level::Request), None) => Owner {
            policy: "this sandbox's policy".to_string(),
            who: "the operator who started this sandbox",
        },
        _ => Owner {
            policy: "the organization policy".to_string(),
            who: "the organization's administrator",
        },
    }
}

/// What refused the destination, and what would change it: one pair per reason.
fn texts(refusal: &Refusal, dest: &str) -> (String, String) {
    let own = owner(refusal);
    let (policy, who) = (&own.policy, own.who);
    let add = format!("If it is needed, ask {who} to add {dest} to {policy}.");
    let admin = "Only the organization's administrator can change that.";
    match refusal.reason {
        Reason::NotInOrgAllowlist => (
            format!("The organization policy does not allow {dest}"),
            format!("If it is needed, ask the organization's administrator to add {dest} to the organization policy."),
        ),
        Reason::NotInRequestPolicy => {
            (format!("The organization allows {dest}, but {policy} does not"), add)
        }
        Reason::NetworkDisabled => (
            format!("{} turns the network off, so {dest} is refused", capital(policy)),
            format!("If network access is needed, ask {who} for a policy that allows {dest}."),
        ),
        Reason::DeniedDomain => (
            format!("The organization policy denies {dest} by name"),
            admin.to_string(),
        ),
        Reason::PortNotAllowed => (
            format!("{} allows this host, but not on port {}, so {dest} is refused", capital(policy), refusal.port),
            add,
        ),
        Reason::SharedHosting => (
            format!("{dest} is on a shared hosting platform, which the organization policy refuses"),
            admin.to_string(),
        ),
        Reason::PrivateAddress => (
            format!("{dest} resolves to an address the proxy refuses (private, loopback, the proxy's own, or one no allowed range opens)"),
            "If that address must be reached, ask the organization's administrator to open its range in the policy.".to_string(),
        ),
        Reason::PolicyWidening => (
            format!(
                "{} asks for more than the policies above it allow, so {dest} is refused",
                capital(policy)
            ),
            format!("Ask {who} for a policy inside what the organization allows."),
        ),
        Reason::InvalidHost | Reason::InvalidRequest => (
            format!("The proxy could not read the request for {dest} as a request it judges"),
            "A well-formed proxy request (an absolute http:// URL, or CONNECT host:port) is judged by the policy.".to_string(),
        ),
        Reason::InvalidPolicy => (
            format!("The X-Network-Policy header sent with the request to {dest} does not parse"),
            "A header that parses is judged by the policy.".to_string(),
        ),
        Reason::HostMismatch => (
            format!("The request to {dest} names another host than the one it was judged for"),
            format!("Each destination is judged on its own: if the host it names is needed, ask {who} to add that host to {policy}."),
        ),
        Reason::SniMismatch => (
            format!("The tunnel to {dest} began for another name than its CONNECT named, or with bytes its policy does not allow"),
            format!("Each destination is judged on its own: if it is needed, ask {who} to add it to {policy}."),
        ),
        Reason::AuthRequired => (
            format!("The proxy needs this sandbox's session credentials to judge the request to {dest}"),
            "Ask the operator who started this sandbox for its proxy settings.".to_string(),
        ),
        Reason::LimitExceeded => (
            format!("The request to {dest} went over a limit on connections or tunnels"),
            "It may be sent again once other connections close.".to_string(),
        ),
        Reason::AuditUnavailable => (
            format!("The audit log cannot be written, so nothing is let through to {dest} unrecorded"),
            "Requests are judged again once the log can be written; the operator has been told.".to_string(),
        ),
        Reason::MethodNotAllowed => (
            format!("A rule of {policy} for {dest} does not allow this method"),
            format!("If it is needed, ask {who} to allow it in that rule of {policy}."),
        ),
        Reason::PathNotAllowed => (
            format!("A rule of {policy} for {dest} does not allow this path"),
            format!("If it is needed, ask {who} to allow it in that rule of {policy}."),
        ),
        Reason::UploadBudgetExceeded => (
            format!("The upload budget of {policy} is spent, so the request to {dest} is refused"),
            format!("If more must be sent, ask {who} for a larger budget."),
        ),
        Reason::SessionStoreUnavailable => (
            format!("The proxy cannot check this sandbox's credentials for {dest} now"),
            "Requests are judged again once the session store answers.".to_string(),
        ),
        Reason::ExfiltrationDetected | Reason::SecretDetected => (
            format!("A secret was found in this request to {dest}, so it was stopped before the secret was sent"),
            "The attempt is logged for the operator; a request that needs no secret is judged as usual.".to_string(),
        ),
    }
}

fn capital(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The starts of words that would point at a route around the policy ("try",
    /// "trying", "directly", ...).
    const AROUND: &[&str] = &[
        "instead",
        "try",
        "bypass",
        "vpn",
        "direct",
        "workaround",
        "tor",
        "ssh",
        "mirror",
        "proxychains",
    ];

    fn every_refusal() -> Vec<Refusal> {
        let mut all = Vec::new();
        for reason in Reason::ALL {
            for (level, session) in [
                (None, None),
                (Some(Level::Org), None),
                (Some(Level::Request), None),
                (Some(Level::Request), Some("s-1".to_string())),
                (Some(Level::Address), None),
            ] {
                let mut refusal = Refusal::new(reason, "api.example.test".into(), 8443);
                refusal.level = level;
                refusal.session = session;
                all.push(refusal);
            }
        }
        all
    }

    #[test]
    fn every_reason_names_the_destination_and_says_other_routes_are_closed() {
        for refusal in every_refusal() {
            let text = message(&refusal);
            assert!(text.contains("`api.example.test:8443`"), "{text}");
            assert!(text.ends_with(CLOSED), "{text}");
            assert!(text.split(". ").count() <= 4, "too long: {text}");
        }
    }

    #[test]
    fn no_message_suggests_a_way_around_the_policy() {
        for refusal in every_refusal() {
            let text = message(&refusal).to_lowercase();
            for word in text.split(|c: char| !c.is_ascii_alphanumeric()) {
                let start = AROUND
                    .iter()
                    .find(|a| word.starts_with(**a) && word != "tort");
                assert!(start.is_none(), "{word:?} in {text}");
            }
        }
    }

    #[test]
    fn the_level_names_who_changes_it() {
        let mut org = Refusal::new(Reason::NotInOrgAllowlist, "a.test".into(), 443);
        org.level = Some(Level::Org);
        assert!(message(&org).contains("organization's administrator"));
        let mut req = Refusal::new(Reason::NotInRequestPolicy, "a.test".into(), 443);
        req.level = Some(Level::Request);
        req.session = Some("s-9".into());
        let text = message(&req);
        assert!(
            text.contains("add `a.test:443` to this session's policy (session `s-9`)"),
            "{text}"
        );
    }

    #[test]
    fn an_ipv6_destination_is_bracketed() {
        let refusal = Refusal::new(Reason::PrivateAddress, "::1".into(), 80);
        assert!(message(&refusal).contains("`[::1]:80`"));
    }

    #[test]
    fn the_detail_follows_what_refused_it() {
        let refusal = Refusal::new(Reason::UploadBudgetExceeded, "a.test".into(), 443)
            .with_detail("the upload budget is spent: no request is sent");
        assert!(message(&refusal).contains("(the upload budget is spent: no request is sent). "));
    }
}
