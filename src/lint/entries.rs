//! The rules over one list of entries, shared by organization and request files:
//! normal form, scripts, shared hosting, duplicates and redundancy, CIDRs. Each runs
//! over a compiled list and the offsets its entries were written at.

use std::collections::HashMap;

use ipnet::IpNet;

use super::{script, RuleId, Severity, Sink};
use crate::policy::cover::entry_covered;
use crate::policy::shared_hosting::{classify, pattern_is_shared_hosting};
use crate::policy::{DomainEntry, DomainPattern, DomainSet, SharedHostingAction, Written};

/// What a domain list is, for the rules that depend on it.
pub(crate) struct ListCtx<'a> {
    /// The key, for messages: `allowed_domains`.
    pub name: &'a str,
    /// The organization's `allowed_ports` (the ports of a port-less entry).
    pub ports: &'a [u16],
    /// `Some` for lists of allowed destinations: flag shared hosting.
    pub shared: Option<(&'a DomainSet, SharedHostingAction)>,
}

/// A compiled domain list, each entry with the byte offset it was written at.
fn written<'a>(
    set: &'a DomainSet,
    at: &'a [usize],
) -> impl Iterator<Item = (&'a DomainEntry, usize)> {
    set.entries().iter().zip(at.iter().copied())
}

/// The rules of each entry of a compiled list, and of the list as a whole.
pub(crate) fn domains(sink: &mut Sink, set: &DomainSet, at: &[usize], ctx: &ListCtx) {
    for (entry, offset) in written(set, at) {
        entry_rules(sink, entry, offset, ctx);
    }
    duplicates_and_redundancy(sink, set, at, ctx);
}

/// `*.example.com:443`, in the form the proxy compares.
pub(crate) fn normal_form(e: &DomainEntry) -> String {
    let name = match &e.pattern {
        DomainPattern::Exact(n) => n.to_string(),
        DomainPattern::Subtree(n) => format!("*.{n}"),
    };
    match e.port {
        Some(p) => format!("{name}:{p}"),
        None => name,
    }
}

fn entry_rules(sink: &mut Sink, e: &DomainEntry, offset: usize, ctx: &ListCtx) {
    let normal = normal_form(e);
    if normal != *e.text {
        let msg = format!(
            "{}: `{}` is not in normal form (lower case, no trailing dot, IDNA `xn--` form); write `{normal}`",
            ctx.name, e.text
        );
        sink.at(RuleId::NotNormalized, offset, msg, Some(normal));
    }
    if let Some(scripts) = script::mixed(e.pattern.base().as_str()) {
        let msg = format!(
            "{}: `{}` mixes scripts in one label ({scripts}): a homograph risk; check it is the name you mean",
            ctx.name, e.text
        );
        sink.at(RuleId::MixedScript, offset, msg, None);
    }
    if let Some((extra, action)) = ctx.shared {
        if pattern_is_shared_hosting(&e.pattern, extra) {
            shared_hosting(sink, e, offset, ctx.name, extra, action);
        }
    }
}

fn shared_hosting(
    sink: &mut Sink,
    e: &DomainEntry,
    offset: usize,
    list: &str,
    extra: &DomainSet,
    action: SharedHostingAction,
) {
    let why = classify(e.pattern.base(), extra).unwrap_or_else(|| "extra_domains".into());
    let (severity, what) = match action {
        SharedHostingAction::Deny => (
            Severity::Error,
            "the organization sets [shared_hosting] action = \"deny\", so this entry never allows anything: remove it",
        ),
        SharedHostingAction::Flag => (
            Severity::Warning,
            "anyone can run a server there that logs what it receives; allow only the specific names you trust",
        ),
    };
    let msg = format!(
        "{list}: `{}` is shared hosting (under `{why}`): {what}",
        e.rule()
    );
    sink.with(RuleId::SharedHosting, severity, offset, msg, None);
}

/// What makes two entries the same: pattern, port, and the rules as written.
type Key = (DomainPattern, Option<u16>, Option<std::sync::Arc<str>>);

/// `duplicate-entry` for a repeated (pattern, port); `redundant-entry` for an entry
/// another entry of the list covers (of two entries covering each other, the later).
fn duplicates_and_redundancy(sink: &mut Sink, set: &DomainSet, at: &[usize], ctx: &ListCtx) {
    let valid = set.entries();
    // Entries with rules for one host are not duplicates unless their rules are too.
    let key = |e: &'_ DomainEntry| {
        (
            e.pattern.clone(),
            e.port,
            e.rules.as_ref().map(|r| r.label.clone()),
        )
    };
    let mut first: HashMap<Key, usize> = HashMap::new();
    for (i, e) in valid.iter().enumerate() {
        first.entry(key(e)).or_insert(i);
    }
    for (i, (r, offset)) in written(set, at).enumerate() {
        let j = first[&key(r)];
        if j != i {
            let msg = format!(
                "{}: `{}` repeats `{}` (entry {}): remove it",
                ctx.name,
                r.rule(),
                valid[j].rule(),
                j + 1
            );
            sink.at(RuleId::DuplicateEntry, offset, msg, Some(String::new()));
            continue;
        }
        let candidates: Vec<&DomainEntry> = match &r.pattern {
            DomainPattern::Exact(n) => set.matching(n).collect(),
            DomainPattern::Subtree(b) => set.subtrees_at_or_above(b).collect(),
        };
        let cover = candidates.into_iter().find(|o| {
            let k = first[&key(o)];
            k != i && entry_covered(r, o, ctx.ports) && (k < i || !entry_covered(o, r, ctx.ports))
        });
        if let Some(o) = cover {
            let msg = format!(
                "{}: `{}` is already covered by `{}`: remove it",
                ctx.name,
                r.rule(),
                o.rule()
            );
            sink.at(RuleId::RedundantEntry, offset, msg, Some(String::new()));
        }
    }
}

/// `allow-deny-conflict`: allowed entries wholly inside a denied entry (a denied entry
/// without a port denies every port).
pub(crate) fn conflicts(
    sink: &mut Sink,
    (allowed, at): (&DomainSet, &[usize]),
    list: &str,
    denied: &DomainSet,
    ports: &[u16],
) {
    for (r, offset) in written(allowed, at) {
        let mut ports = ports.to_vec();
        ports.extend(r.port);
        let candidates: Vec<&DomainEntry> = match &r.pattern {
            DomainPattern::Exact(n) => denied.matching(n).collect(),
            DomainPattern::Subtree(b) => denied.subtrees_at_or_above(b).collect(),
        };
        if let Some(d) = candidates.into_iter().find(|d| entry_covered(r, d, &ports)) {
            let msg = format!(
                "{list}: `{}` is wholly inside the denied entry `{}` (denied wins), so it never allows anything: remove one of them",
                r.rule(),
                d.rule()
            );
            sink.at(RuleId::AllowDenyConflict, offset, msg, None);
        }
    }
}

/// The rules of a compiled `allowed_cidrs` list: normal form, duplicates, redundancy,
/// private space.
pub(crate) fn cidrs(sink: &mut Sink, nets: &[IpNet], written: &[Written], list: &str) {
    let mut valid: Vec<(IpNet, usize)> = Vec::new();
    for (&net, item) in nets.iter().zip(written) {
        if net.to_string() != item.text {
            let msg = format!(
                "{list}: `{}` is the network `{net}`; write that (host bits are ignored)",
                item.text
            );
            sink.at(RuleId::NotNormalized, item.at, msg, Some(net.to_string()));
        }
        if let Some(class) = private_overlap(&net) {
            let msg = format!(
                "{list}: `{net}` opens {class} address space to sandboxed code; make sure that is intended and as narrow as it can be"
            );
            sink.at(RuleId::PrivateCidr, item.at, msg, None);
        }
        if let Some((other, _)) = valid.iter().find(|(o, _)| *o == net) {
            let msg = format!("{list}: `{}` repeats `{other}`: remove it", item.text);
            sink.at(RuleId::DuplicateEntry, item.at, msg, Some(String::new()));
        } else if let Some((other, _)) = valid.iter().find(|(o, _)| o.contains(&net)) {
            let msg = format!(
                "{list}: `{}` is already covered by `{other}`: remove it",
                item.text
            );
            sink.at(RuleId::RedundantEntry, item.at, msg, Some(String::new()));
        }
        valid.push((net, item.at));
    }
    // An earlier entry covered by a later, wider one.
    for (i, (net, offset)) in valid.iter().enumerate() {
        let wider = valid[i + 1..]
            .iter()
            .find(|(o, _)| o != net && o.contains(net));
        if let Some((other, _)) = wider {
            let msg = format!("{list}: `{net}` is already covered by `{other}`: remove it");
            sink.at(RuleId::RedundantEntry, *offset, msg, Some(String::new()));
        }
    }
}

/// Special-purpose space a network overlaps, named for the message.
fn private_overlap(net: &IpNet) -> Option<&'static str> {
    const SPACES: &[(&str, &str)] = &[
        ("169.254.169.254/32", "cloud metadata"),
        ("fd00:ec2::254/128", "cloud metadata"),
        ("127.0.0.0/8", "loopback"),
        ("::1/128", "loopback"),
        ("10.0.0.0/8", "private"),
        ("172.16.0.0/12", "private"),
        ("192.168.0.0/16", "private"),
        ("fc00::/7", "private (ULA)"),
        ("169.254.0.0/16", "link-local"),
        ("fe80::/10", "link-local"),
        ("100.64.0.0/10", "CGNAT"),
        ("0.0.0.0/8", "unspecified"),
        ("::/128", "unspecified"),
        ("::ffff:0:0/96", "IPv4-mapped"),
    ];
    SPACES.iter().find_map(|(space, name)| {
        let space: IpNet = space.parse().expect("constant CIDR");
        (space.contains(net) || net.contains(&space)).then_some(*name)
    })
}
