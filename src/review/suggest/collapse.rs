//! `audit suggest`'s entries: the ports of each name, the wildcards names collapse into
//! (at least [`SIBLINGS`] directly under one parent, loadable, not shared hosting,
//! covered by the organization), and the entries no wildcard covers.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use serde_json::{json, Value};

use super::{Suggested, Used, SIBLINGS};
use crate::policy::cover::{entry_covered, set_covers};
use crate::policy::rules::Rules;
use crate::policy::shared_hosting::{classify, pattern_is_shared_hosting};
use crate::policy::{DomainEntry, HostName, OrgPolicy};

/// The entries for `base` used on `ports`: port-less when every organization port was
/// used (a port-less entry gets exactly those), plus each other port written out.
fn port_entries(base: &str, ports: &BTreeSet<u16>, org_ports: &[u16]) -> Vec<String> {
    let portless = !org_ports.is_empty() && org_ports.iter().all(|p| ports.contains(p));
    let mut out = Vec::new();
    if portless {
        out.push(base.to_string());
    }
    for p in ports {
        if !(portless && org_ports.contains(p)) {
            out.push(format!("{base}:{p}"));
        }
    }
    out
}

fn parse_all(texts: &[String]) -> Option<Vec<DomainEntry>> {
    texts.iter().map(|t| DomainEntry::parse(t).ok()).collect()
}

/// The wildcards to collapse names into: `*.PARENT` for each parent with enough names
/// directly under it, when the wildcard loads, is not shared hosting, and `org` covers it.
fn wildcards(org: &OrgPolicy, names: &BTreeMap<HostName, Used>) -> Wild {
    let extra = org.shared_hosting_extra();
    let ports = org.allowed_ports();
    let mut parents: BTreeMap<&str, Vec<&HostName>> = BTreeMap::new();
    for name in names.keys() {
        if let Some((_, parent)) = name.as_str().split_once('.') {
            parents.entry(parent).or_default().push(name);
        }
    }
    let mut out = Wild::default();
    for (parent, children) in parents {
        if children.len() < SIBLINGS || children.iter().any(|n| classify(n, extra).is_some()) {
            continue;
        }
        let union: BTreeSet<u16> = children
            .iter()
            .flat_map(|n| names[*n].ports.iter().copied())
            .collect();
        let Some(entries) = parse_all(&port_entries(&format!("*.{parent}"), &union, ports)) else {
            continue; // over a public suffix: it does not load
        };
        let fits = entries.iter().all(|e| {
            !pattern_is_shared_hosting(&e.pattern, extra) && set_covers(org.allowed(), e, ports)
        });
        if fits {
            out.by_base.insert(parent.to_string(), entries);
        }
    }
    // A wildcard inside another is redundant.
    let inner: Vec<(String, usize)> = out
        .by_base
        .iter()
        .flat_map(|(base, list)| {
            let out = &out;
            list.iter()
                .enumerate()
                .filter_map(move |(i, w)| out.covering(w, ports).map(|_| (base.clone(), i)))
        })
        .collect();
    for (base, i) in inner.into_iter().rev() {
        if let Some(list) = out.by_base.get_mut(&base) {
            list.remove(i);
        }
    }
    out
}

/// The wildcards chosen, by the name they are over: a name finds those above it with
/// one lookup per label.
#[derive(Default)]
struct Wild {
    by_base: HashMap<String, Vec<DomainEntry>>,
}

impl Wild {
    /// A wildcard other than `e` that covers it: those over `e`'s name or a name above.
    fn covering(&self, e: &DomainEntry, ports: &[u16]) -> Option<&DomainEntry> {
        let name = e.pattern.base().as_str();
        let above = name.match_indices('.').map(|(i, _)| &name[i + 1..]);
        std::iter::once(name)
            .chain(above)
            .flat_map(|b| self.by_base.get(b).into_iter().flatten())
            .find(|w| w.text != e.text && entry_covered(e, w, ports))
    }
}

/// The policy's `allowed_domains`: the wildcards, then each name's entries that no
/// wildcard covers; sorted, each with the names and records it stands for.
pub(super) fn entries(org: &OrgPolicy, names: &BTreeMap<HostName, Used>) -> Vec<Suggested> {
    let ports = org.allowed_ports();
    let wild = wildcards(org, names);
    let mut out: BTreeMap<String, Suggested> = BTreeMap::new();
    for (name, used) in names {
        let texts = port_entries(name.as_str(), &used.ports, ports);
        for e in parse_all(&texts).unwrap_or_default() {
            let e = match set_covers(org.allowed(), &e, ports) {
                true => e,
                false => with_rules(org, name, e, &used.methods),
            };
            let (text, table) = match wild.covering(&e, ports) {
                Some(w) => (w.text.to_string(), None),
                None => match &e.rules {
                    Some(r) => (r.label.to_string(), Some(table(&e, r))),
                    None => (e.text.to_string(), None),
                },
            };
            let s = out.entry(text.clone()).or_insert_with(|| Suggested {
                entry: text,
                table,
                names: Vec::new(),
                records: 0,
            });
            if s.names.last() != Some(&name.to_string()) {
                s.names.push(name.to_string());
                s.records += used.records;
            }
        }
    }
    out.into_values().collect()
}

/// `e` with the rules of the organization entry that allows `name` only with rules: its
/// paths, and its methods narrowed to those used (when the records name them). `e` as it
/// is when no such entry covers it (the policy's final check then says so).
fn with_rules(
    org: &OrgPolicy,
    name: &HostName,
    e: DomainEntry,
    used: &BTreeSet<String>,
) -> DomainEntry {
    let ports = org.allowed_ports();
    for o in org.allowed().matching(name) {
        let Some(r) = o.rules.as_deref().filter(|r| r.restricts()) else {
            continue;
        };
        let methods = match used.iter().all(|m| r.allows_method(m)) && !used.is_empty() {
            true => Some(used.iter().cloned().collect()),
            false => r.methods.clone(),
        };
        let rules = Rules::new(&e.text, methods, r.paths.clone(), false, false);
        let candidate = DomainEntry {
            rules: Some(Arc::new(rules)),
            ..e.clone()
        };
        if set_covers(org.allowed(), &candidate, ports) {
            return candidate;
        }
    }
    e
}

/// An entry with rules as a request policy's JSON writes it.
fn table(e: &DomainEntry, r: &Rules) -> Value {
    let mut t = json!({ "host": &*e.text });
    if let Some(m) = &r.methods {
        t["methods"] = json!(m);
    }
    if let Some(p) = &r.paths {
        let p: Vec<String> = p.iter().map(ToString::to_string).collect();
        t["paths"] = json!(p);
    }
    t
}
