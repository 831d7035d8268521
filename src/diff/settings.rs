//! The organization file compared setting by setting: each top-level setting is one
//! function here, called in turn by [`org`]; a new setting is one more line there.

use super::change::{Change, Effect, Kind};
use super::domains::{ports_text, Side};
use super::lists::{self, Request, RequestAt};
use super::locate::Locator;
use crate::policy::{Mode, OrgPolicy, OrgSpans, RequestPolicy, SharedHostingAction};

/// Every change between two organization policies, in the order of the file's keys.
pub(super) fn org(
    old: &OrgPolicy,
    new: &OrgPolicy,
    spans: &OrgSpans,
    loc: &Locator,
) -> Vec<Change> {
    let mut out = Vec::new();
    out.extend(name(old, new, loc));
    out.extend(mode(old, new, loc));
    let (added, removed) = port_changes(old.allowed_ports(), new.allowed_ports());
    let sides = (side_allowed(old), side_allowed(new));
    let extra = new.shared_hosting_extra();
    let ports = (&added[..], &removed[..]);
    out.extend(lists::allowed(
        "allowed_domains",
        sides,
        ports,
        extra,
        &spans.allowed_domains,
    ));
    let denied_at = loc.key(&["denied_domains"]);
    out.extend(lists::denied(
        old.denied(),
        new.denied(),
        denied_at,
        &spans.denied_domains,
    ));
    out.extend(allowed_ports(old, new, (&added, &removed), loc));
    let cidr_at: Vec<usize> = spans.allowed_cidrs.iter().map(|w| w.at).collect();
    out.extend(lists::cidrs(
        "allowed_cidrs",
        old.allowed_cidrs(),
        new.allowed_cidrs(),
        &cidr_at,
    ));
    out.extend(default_policy(old, new, ports, spans, loc));
    out.extend(shared_hosting(old, new, spans, loc));
    out.extend(tunnels(old, new, loc));
    let budgets = (old.upload_bytes(), new.upload_bytes());
    let at = loc
        .key(&["limits", "upload_bytes"])
        .or(loc.key(&["limits"]));
    out.extend(lists::budget("limits.upload_bytes", budgets, "no budget").map(|c| c.at(at)));
    out.extend(inspection(old, new, spans));
    out.extend(credentials(old, new, loc));
    out
}

/// Entries whose inspection (TLS terminated, each request judged) turns on or off: listed,
/// as what they let through is compared with their rules in `allowed_domains`.
fn inspection(old: &OrgPolicy, new: &OrgPolicy, spans: &OrgSpans) -> Vec<Change> {
    let setting = "allowed_domains";
    let inspected = |org: &OrgPolicy, e: &crate::policy::DomainEntry| {
        org.allowed()
            .entries()
            .iter()
            .any(|o| o.pattern == e.pattern && o.port == e.port && o.inspected())
    };
    let mut out = Vec::new();
    for (i, e) in new.allowed().entries().iter().enumerate() {
        if e.inspected() && !inspected(old, e) {
            let message = format!("{setting}: `{}` is inspected now", super::domains::shown(e));
            let c = Change::new(Effect::Neutral, Kind::Inspection, setting, message);
            out.push(c.entry(&e.text).at(spans.allowed_domains.get(i).copied()));
        }
    }
    for e in old.allowed().entries() {
        if e.inspected() && !inspected(new, e) {
            let message = format!("{setting}: `{}` is no longer inspected", e.text);
            out.push(
                Change::new(Effect::Neutral, Kind::Inspection, setting, message).entry(&e.text),
            );
        }
    }
    out
}

/// `[[credentials]]`: which host gets which header, and from which file.
fn credentials(old: &OrgPolicy, new: &OrgPolicy, loc: &Locator) -> Vec<Change> {
    let setting = "credentials";
    let at = loc.key(&["credentials"]);
    let key = |c: &crate::policy::CredentialRule| {
        format!(
            "{} header {} from {}",
            c.host,
            c.header,
            c.value_file.display()
        )
    };
    let (was, now): (Vec<String>, Vec<String>) = (
        old.credentials().iter().map(key).collect(),
        new.credentials().iter().map(key).collect(),
    );
    let mut out = Vec::new();
    for (list, other, verb) in [(&now, &was, "added"), (&was, &now, "removed")] {
        for k in list.iter().filter(|k| !other.contains(k)) {
            let message = format!("{setting}: {verb}: {k}");
            out.push(Change::new(Effect::Neutral, Kind::Credentials, setting, message).at(at));
        }
    }
    out
}

fn side_allowed(org: &OrgPolicy) -> Side<'_> {
    Side {
        set: org.allowed(),
        ports: org.allowed_ports(),
    }
}

fn name(old: &OrgPolicy, new: &OrgPolicy, loc: &Locator) -> Option<Change> {
    (old.name() != new.name()).then(|| {
        let message = format!("name: `{}` -> `{}`", old.name(), new.name());
        Change::new(Effect::Neutral, Kind::Name, "name", message).at(loc.key(&["name"]))
    })
}

fn mode_str(m: Mode) -> &'static str {
    match m {
        Mode::Enforce => "enforce",
        Mode::Report => "report",
    }
}

fn mode(old: &OrgPolicy, new: &OrgPolicy, loc: &Locator) -> Option<Change> {
    let (o, n) = (old.mode(), new.mode());
    (o != n).then(|| {
        let (effect, why) = match n {
            Mode::Report => (
                Effect::Widening,
                "allowlist refusals are let through (logged as egress.would_deny)",
            ),
            Mode::Enforce => (Effect::Narrowing, "allowlist refusals are enforced again"),
        };
        let message = format!("mode: {} -> {}: {why}", mode_str(o), mode_str(n));
        Change::new(effect, Kind::Mode, "mode", message).at(loc.key(&["mode"]))
    })
}

/// The ports NEW adds to `allowed_ports`, and those it removes.
fn port_changes(old: &[u16], new: &[u16]) -> (Vec<u16>, Vec<u16>) {
    let mut added: Vec<u16> = new.iter().filter(|p| !old.contains(p)).copied().collect();
    let mut removed: Vec<u16> = old.iter().filter(|p| !new.contains(p)).copied().collect();
    added.sort_unstable();
    added.dedup();
    removed.sort_unstable();
    removed.dedup();
    (added, removed)
}

/// What a port of `allowed_ports` applies to: port-less entries (the organization's and
/// its default policy's) and every CIDR.
fn port_users(org: &OrgPolicy) -> (usize, bool) {
    let portless =
        |set: &crate::policy::DomainSet| set.entries().iter().filter(|e| e.port.is_none()).count();
    let mut n = portless(org.allowed());
    if let RequestPolicy::Allowlist { domains, .. } = org.default_policy() {
        n += portless(domains);
    }
    (n, !org.allowed_cidrs().is_empty())
}

fn allowed_ports(
    old: &OrgPolicy,
    new: &OrgPolicy,
    (added, removed): (&[u16], &[u16]),
    loc: &Locator,
) -> Vec<Change> {
    let setting = "allowed_ports";
    let at = loc.key(&[setting]);
    let mut out = Vec::new();
    for (ports, org, effect, kind, verb) in [
        (added, new, Effect::Widening, Kind::PortsAdded, "added"),
        (
            removed,
            old,
            Effect::Narrowing,
            Kind::PortsRemoved,
            "removed",
        ),
    ] {
        if ports.is_empty() {
            continue;
        }
        let (entries, cidrs) = port_users(org);
        let effect = if entries == 0 && !cidrs {
            Effect::Neutral
        } else {
            effect
        };
        let cidrs = if cidrs {
            " and every allowed_cidrs entry"
        } else {
            ""
        };
        let message = format!(
            "{setting}: {verb} {}: applies to {entries} port-less entries{cidrs}",
            ports_text(ports)
        );
        out.push(Change::new(effect, kind, setting, message).at(at));
    }
    out
}

fn default_policy(
    old: &OrgPolicy,
    new: &OrgPolicy,
    ports: (&[u16], &[u16]),
    spans: &OrgSpans,
    loc: &Locator,
) -> Vec<Change> {
    let table = "default_network_policy";
    let sides = (
        Request {
            policy: old.default_policy(),
            ports: old.allowed_ports(),
        },
        Request {
            policy: new.default_policy(),
            ports: new.allowed_ports(),
        },
    );
    let at = RequestAt {
        spans: &spans.default_policy,
        type_at: loc.key(&[table]),
        cidrs_at: loc.key(&[table]),
    };
    let extra = new.shared_hosting_extra();
    lists::request("default_network_policy.", sides, ports, extra, &at)
}

fn action_str(a: SharedHostingAction) -> &'static str {
    match a {
        SharedHostingAction::Flag => "flag",
        SharedHostingAction::Deny => "deny",
    }
}

/// `[shared_hosting]`: the action, and `extra_domains` (which only mark under "flag").
fn shared_hosting(
    old: &OrgPolicy,
    new: &OrgPolicy,
    spans: &OrgSpans,
    loc: &Locator,
) -> Vec<Change> {
    let mut out = Vec::new();
    let (o, n) = (old.shared_hosting_action(), new.shared_hosting_action());
    let setting = "shared_hosting.action";
    if o != n {
        let (effect, why) = match n {
            SharedHostingAction::Flag => (
                Effect::Widening,
                "allowed names on shared hosting are let through again",
            ),
            SharedHostingAction::Deny => (Effect::Narrowing, "names on shared hosting are refused"),
        };
        let message = format!("{setting}: {} -> {}: {why}", action_str(o), action_str(n));
        let at = loc.key(&["shared_hosting", "action"]);
        out.push(Change::new(effect, Kind::SharedHostingAction, setting, message).at(at));
    }
    let denying = o == SharedHostingAction::Deny && n == SharedHostingAction::Deny;
    let setting = "shared_hosting.extra_domains";
    let list_at = loc.key(&["shared_hosting", "extra_domains"]);
    let (old_x, new_x) = (old.shared_hosting_extra(), new.shared_hosting_extra());
    for e in old_x
        .entries()
        .iter()
        .filter(|e| super::domains::uncovered_deny(e, new_x))
    {
        let (effect, why) = if denying {
            (Effect::Widening, ": no longer refused as shared hosting")
        } else {
            (Effect::Neutral, ": no longer marked as shared hosting")
        };
        let message = format!("{setting}: removed `{}`{why}", e.text);
        let c = Change::new(effect, Kind::SharedHostingDomains, setting, message);
        out.push(c.entry(&e.text).at(list_at));
    }
    for (i, e) in new_x.entries().iter().enumerate() {
        if super::domains::uncovered_deny(e, old_x) {
            let effect = if n == SharedHostingAction::Deny {
                Effect::Narrowing
            } else {
                Effect::Neutral
            };
            let message = format!("{setting}: added `{}`", e.text);
            let c = Change::new(effect, Kind::SharedHostingDomains, setting, message);
            out.push(c.entry(&e.text).at(spans.extra_domains.get(i).copied()));
        }
    }
    out
}

/// `[tunnels]`: each requirement compared on port 443 (where it defaults to on) and on
/// any other port (where it defaults to off).
fn tunnels(old: &OrgPolicy, new: &OrgPolicy, loc: &Locator) -> Vec<Change> {
    type Req = fn(&crate::policy::Tunnels, u16) -> bool;
    let reqs: [(&str, Req); 2] = [
        ("require_tls", |t, p| t.tls_required(p)),
        ("require_sni", |t, p| t.sni_required(p)),
    ];
    let mut out = Vec::new();
    for (key, required) in reqs {
        let setting = format!("tunnels.{key}");
        let at = loc.key(&["tunnels", key]).or(loc.key(&["tunnels"]));
        let ports = [443u16, 1];
        let was: Vec<bool> = ports.iter().map(|&p| required(old.tunnels(), p)).collect();
        let now: Vec<bool> = ports.iter().map(|&p| required(new.tunnels(), p)).collect();
        let on = |v: &[bool]| match (v[0], v[1]) {
            (true, true) => "on every port",
            (true, false) => "on port 443 only",
            (false, true) => "on every port but 443",
            (false, false) => "off",
        };
        let off = was.iter().zip(&now).any(|(w, n)| *w && !*n);
        let on_now = was.iter().zip(&now).any(|(w, n)| !*w && *n);
        for (changed, effect) in [(off, Effect::Widening), (on_now, Effect::Narrowing)] {
            if changed {
                let message = format!("{setting}: {} -> {}", on(&was), on(&now));
                out.push(Change::new(effect, Kind::Tunnels, &setting, message).at(at));
            }
        }
    }
    out
}
