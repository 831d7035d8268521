//! Linting an organization policy (TOML). The document is read with `toml_edit`, which
//! keeps the position of every key and value, so one pass reports every finding; what
//! only the loader can judge (types, a missing `version`) comes from
//! [`OrgPolicy::from_toml`] as `parse-error`.

use toml_edit::{ImDocument, Item, TableLike};

use super::entries::{self, Item as Entry, ListCtx};
use super::{request_file, Finding, Sink};
use crate::policy::{DomainSet, Mode, OrgPolicy, RequestPolicy, SharedHostingAction, Tunnels};

const TOP: &[&str] = &[
    "version",
    "name",
    "mode",
    "allowed_domains",
    "denied_domains",
    "allowed_ports",
    "allowed_cidrs",
    "default_network_policy",
    "shared_hosting",
    "tunnels",
];
const SHARED: &[&str] = &["action", "extra_domains"];
const TUNNELS: &[&str] = &["require_tls", "require_sni"];
const POLICY: &[&str] = &["type", "allowed_domains", "allowed_cidrs"];

/// Lint one organization file. Also returns the policy as far as it could be read
/// (invalid entries left out), so request files can still be checked against it.
pub(crate) fn lint(file: &str, text: &str) -> (Vec<Finding>, OrgPolicy) {
    let mut sink = Sink::new(file, text);
    let doc = match ImDocument::parse(text) {
        Ok(doc) => doc,
        Err(e) => {
            let offset = e.span().map_or(0, |s| s.start);
            let msg = format!("not valid TOML: {}", e.message().trim());
            sink.at("parse-error", offset, msg, None);
            return (sink.findings, lenient_org(file));
        }
    };
    let root: &dyn TableLike = doc.as_table();
    unknown_keys(&mut sink, root, TOP, "");
    let org = read_org(&mut sink, file, root);
    loader_problems(&mut sink, file, text);
    (sink.findings, org)
}

fn read_org(sink: &mut Sink, file: &str, root: &dyn TableLike) -> OrgPolicy {
    let ports = ports(root.get("allowed_ports"));
    let shared = root.get("shared_hosting").and_then(Item::as_table_like);
    if let Some(t) = shared {
        unknown_keys(sink, t, SHARED, "shared_hosting.");
    }
    if let Some(t) = root.get("tunnels").and_then(Item::as_table_like) {
        unknown_keys(sink, t, TUNNELS, "tunnels.");
    }
    let action = match shared.and_then(|t| t.get("action")).and_then(Item::as_str) {
        Some("deny") => SharedHostingAction::Deny,
        _ => SharedHostingAction::Flag,
    };
    let plain = |name| ListCtx {
        name,
        ports: &ports,
        shared: None,
    };
    let extra = set(entries::domains(
        sink,
        &strings(shared.and_then(|t| t.get("extra_domains"))),
        &plain("extra_domains"),
    ));
    let denied = entries::domains(
        sink,
        &strings(root.get("denied_domains")),
        &plain("denied_domains"),
    );
    let denied = set(denied);
    let allowed_ctx = ListCtx {
        name: "allowed_domains",
        ports: &ports,
        shared: Some((&extra, action)),
    };
    let allowed = entries::domains(sink, &strings(root.get("allowed_domains")), &allowed_ctx);
    entries::conflicts(sink, &allowed, "allowed_domains", &denied, &ports);
    let cidrs = entries::cidrs(sink, &strings(root.get("allowed_cidrs")), "allowed_cidrs");
    let allowed_cidrs: Vec<_> = cidrs.into_iter().map(|(n, _)| n).collect();
    let mut org = OrgPolicy {
        source: file.to_string(),
        name: root
            .get("name")
            .and_then(Item::as_str)
            .unwrap_or_default()
            .to_string(),
        mode: match root.get("mode").and_then(Item::as_str) {
            Some("report") => Mode::Report,
            _ => Mode::Enforce,
        },
        allowed: set(allowed),
        denied,
        allowed_ports: ports.clone(),
        cidr_rules: crate::policy::cidr_rules(&allowed_cidrs),
        allowed_cidrs,
        default_policy: RequestPolicy::Disabled,
        shared_hosting_action: action,
        shared_hosting_extra: extra,
        tunnels: Tunnels::default(),
    };
    if let Some(t) = root
        .get("default_network_policy")
        .and_then(Item::as_table_like)
    {
        org.default_policy = default_policy(sink, t, &org);
    }
    org
}

/// The inline `default_network_policy`: the request-policy rules, checked against the
/// organization policy of the same file.
fn default_policy(sink: &mut Sink, t: &dyn TableLike, org: &OrgPolicy) -> RequestPolicy {
    let disabled = t.get("type").and_then(Item::as_str) == Some("disabled");
    let known: &[&str] = if disabled { &POLICY[..1] } else { POLICY };
    unknown_keys(sink, t, known, "default_network_policy.");
    if disabled || t.get("type").is_none() {
        return RequestPolicy::Disabled;
    }
    let domains = strings(t.get("allowed_domains"));
    let cidrs = t.get("allowed_cidrs").map(|i| strings(Some(i)));
    request_file::allowlist_rules(sink, "default_network_policy", &domains, cidrs, Some(org))
}

fn set(entries: Vec<(crate::policy::DomainEntry, usize)>) -> DomainSet {
    DomainSet::from_entries(entries.into_iter().map(|(e, _)| e).collect())
}

/// `allowed_ports` as far as it reads; the default `[80, 443]` otherwise.
fn ports(item: Option<&Item>) -> Vec<u16> {
    match item.and_then(Item::as_array) {
        Some(a) => a
            .iter()
            .filter_map(|v| v.as_integer())
            .filter_map(|n| u16::try_from(n).ok())
            .filter(|&n| n != 0)
            .collect(),
        None => vec![80, 443],
    }
}

/// The strings of an array value, with their offsets; other elements are the loader's.
fn strings(item: Option<&Item>) -> Vec<Entry> {
    let Some(array) = item.and_then(Item::as_array) else {
        return Vec::new();
    };
    array
        .iter()
        .filter_map(|v| {
            Some(Entry {
                text: v.as_str()?.to_string(),
                offset: v.span().map_or(0, |s| s.start),
            })
        })
        .collect()
}

fn unknown_keys(sink: &mut Sink, table: &dyn TableLike, known: &[&str], prefix: &str) {
    for (key, item) in table.iter() {
        if known.contains(&key) {
            continue;
        }
        let offset = table
            .get_key_value(key)
            .and_then(|(k, _)| k.span())
            .or_else(|| item.span())
            .map_or(0, |s| s.start);
        let (msg, fix) = unknown_key_message(&format!("{prefix}{key}"), key, known);
        sink.at("unknown-key", offset, msg, fix);
    }
}

/// "unknown key `x`", with the nearest known key as the fix when one is close.
pub(crate) fn unknown_key_message(
    shown: &str,
    key: &str,
    known: &[&str],
) -> (String, Option<String>) {
    let near = known
        .iter()
        .map(|k| (distance(key, k), *k))
        .min()
        .filter(|(d, _)| *d <= 3)
        .map(|(_, k)| k.to_string());
    let msg = match &near {
        Some(k) => format!("unknown key `{shown}`: did you mean `{k}`?"),
        None => format!(
            "unknown key `{shown}`: remove it (known keys here: {})",
            known.join(", ")
        ),
    };
    (msg, near)
}

/// Levenshtein distance, for "did you mean".
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// What the loader refuses that no more specific rule reported, as `parse-error`.
fn loader_problems(sink: &mut Sink, file: &str, text: &str) {
    if let Err(e) = OrgPolicy::from_toml(text, file) {
        super::request_file::unexplained_problems(sink, e.problems);
    }
}

fn lenient_org(file: &str) -> OrgPolicy {
    OrgPolicy {
        source: file.to_string(),
        name: String::new(),
        mode: Mode::Enforce,
        allowed: DomainSet::default(),
        denied: DomainSet::default(),
        allowed_ports: vec![80, 443],
        allowed_cidrs: Vec::new(),
        cidr_rules: Vec::new(),
        default_policy: RequestPolicy::Disabled,
        shared_hosting_action: SharedHostingAction::Flag,
        shared_hosting_extra: DomainSet::default(),
        tunnels: Tunnels::default(),
    }
}
