//! Compiling a request policy (a JSON file, or the organization's inline
//! `default_network_policy`), and the entry lists both kinds of file share.

use ipnet::IpNet;

use super::entry::{self, Tables};
use super::node::{self, missing, Node};
use super::problems::{ProblemKind, Problems};
use crate::compiled::{DomainSet, RequestPolicy, RequestSpans, Sealed, Written};
use crate::file::{RawPolicyType, DISABLED_KEYS, POLICY_KEYS};

/// A whole JSON document: an object, or nothing is read.
pub(super) fn compile_document<'a, N: Node<'a>>(
    node: N,
    p: &mut Problems,
) -> (RequestPolicy, RequestSpans) {
    if node.entries().is_none() {
        let msg = "a request policy is a JSON object, such as {\"type\": \"disabled\"}";
        p.invalid(node.at(), msg.to_string());
        return (RequestPolicy::Disabled, RequestSpans::default());
    }
    compile(node, "", p)
}

/// A request policy's table; `table` says where it sits (`default_network_policy.`).
pub(super) fn compile<'a, N: Node<'a>>(
    node: N,
    table: &'static str,
    p: &mut Problems,
) -> (RequestPolicy, RequestSpans) {
    let mut spans = RequestSpans::default();
    let Some(t) = node::table(p, node, "a table") else {
        return (RequestPolicy::Disabled, spans);
    };
    let [kind, domains, cidrs, budget, dlp] = t.take(&POLICY_KEYS);
    let kind = match kind {
        None => {
            p.invalid(t.at, missing("type"));
            None
        }
        Some(k) => node::variant::<RawPolicyType, _>(p, k),
    };
    let disabled = kind == Some(RawPolicyType::Disabled);
    t.unknown(
        p,
        table,
        if disabled {
            &DISABLED_KEYS
        } else {
            &POLICY_KEYS
        },
    );
    if kind != Some(RawPolicyType::Allowlist) {
        return (RequestPolicy::Disabled, spans);
    }
    let domains = match domains {
        None => {
            p.invalid(t.at, missing("allowed_domains"));
            DomainSet::default()
        }
        Some(list) => {
            let written = list.elements().map_or(1, |e| e.len());
            if written == 0 {
                let msg = "allowed_domains must not be empty; use {\"type\": \"disabled\"} to allow nothing";
                p.invalid(t.at, msg.to_string());
            }
            domain_list(
                p,
                Some(list),
                (table, "allowed_domains"),
                Tables::Request,
                &mut spans.allowed_domains,
            )
        }
    };
    let cidrs = cidrs.map(|list| {
        cidr_list(
            p,
            Some(list),
            (table, "allowed_cidrs"),
            &mut spans.allowed_cidrs,
        )
    });
    let max_upload_bytes = budget.and_then(|b| {
        spans.max_upload_bytes = b.at().or(t.at);
        super::limits::byte_count(p, b)
    });
    let dlp = dlp.map(|d| {
        spans.dlp = d.at().or(t.at);
        std::sync::Arc::new(super::dlp::compile(p, d, "dlp."))
    });
    let policy = RequestPolicy::Allowlist {
        domains,
        cidrs,
        max_upload_bytes,
        dlp: dlp.filter(|d| !d.is_empty()),
        sealed: Sealed(()),
    };
    (policy, spans)
}

/// A list's name in messages: the table it sits in, and its key.
pub(super) type ListName = (&'static str, &'static str);

/// A domain list: the entries that parse, each one's offset into `spans`. `tables` says
/// whether (and with which keys) an entry may be a table.
pub(super) fn domain_list<'a, N: Node<'a>>(
    p: &mut Problems,
    node: Option<N>,
    (table, key): ListName,
    tables: Tables,
    spans: &mut Vec<usize>,
) -> DomainSet {
    let Some(list) = node.and_then(|n| node::elements(p, n)) else {
        return DomainSet::default();
    };
    let at = node.and_then(|n| n.at());
    let name = format!("{table}{key}");
    let mut entries = Vec::with_capacity(list.len());
    for element in list {
        if let Some(c) = entry::compile(p, element, &name, tables) {
            entries.push(c.entry);
            spans.push(c.at.or(at).unwrap_or(0));
        }
    }
    DomainSet::from_entries(entries)
}

/// A CIDR list: the networks that parse, each one as written into `spans`.
pub(super) fn cidr_list<'a, N: Node<'a>>(
    p: &mut Problems,
    node: Option<N>,
    (table, key): ListName,
    spans: &mut Vec<Written>,
) -> Vec<IpNet> {
    let Some(items) = node.and_then(|n| node::strings(p, n)) else {
        return Vec::new();
    };
    let mut nets = Vec::new();
    for item in items {
        match parse_cidr(item.text) {
            Ok(net) => {
                nets.push(net);
                spans.push(Written {
                    at: item.at.unwrap_or(0),
                    text: item.text.to_string(),
                });
            }
            Err(msg) => {
                let kind = ProblemKind::Cidr {
                    list: format!("{table}{key}"),
                };
                p.push(item.at, kind, Some(item.text), msg);
            }
        }
    }
    nets
}

/// A CIDR as `allowed_cidrs` takes it (host bits dropped).
fn parse_cidr(s: &str) -> Result<IpNet, String> {
    if !s.contains('/') {
        return Err("write a CIDR such as 10.20.0.0/16 (one address is 10.20.0.1/32)".into());
    }
    s.parse::<IpNet>()
        .map(|n| n.trunc())
        .map_err(|_| "not a CIDR: write an address and a prefix length, e.g. 10.20.0.0/16".into())
}
