//! One element of a domain list: a pattern string, or (in `allowed_domains`) a table
//! `{ host, methods, paths, access, inspect }` (docs/reference/policy-files.md
//! "Entries with rules"). Each problem names the entry by its `host` and sits where the
//! offending value was written.

use std::sync::Arc;

use super::node::{self, missing, Node};
use super::problems::{ProblemKind, Problems};
use crate::file::{RawAccess, ENTRY_KEYS};
use crate::host::DomainEntry;
use crate::rules::{valid_method, PathRule, Rules};

/// Which elements a list takes besides strings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Tables {
    /// Strings only (`denied_domains`, `extra_domains`).
    No,
    /// Tables without `inspect` (a request policy).
    Request,
    /// Tables, `inspect` included (the organization's `allowed_domains`).
    Org,
}

/// The list's name with a dot, where the unknown keys of its tables sit.
fn table_name(list: &str) -> &'static str {
    match list {
        "default_network_policy.allowed_domains" => "default_network_policy.allowed_domains[].",
        _ => "allowed_domains[].",
    }
}

/// A compiled entry and where it was written.
pub(super) struct Compiled {
    pub entry: DomainEntry,
    pub at: Option<usize>,
}

/// One element of the list named `list`; `None` when it does not compile (the problem
/// is recorded).
pub(super) fn compile<'a, N: Node<'a>>(
    p: &mut Problems,
    node: N,
    list: &str,
    tables: Tables,
) -> Option<Compiled> {
    if node.as_str().is_none() && tables != Tables::No && node.entries().is_some() {
        return table(p, node, list, tables);
    }
    let expected = if tables == Tables::No {
        "a string"
    } else {
        "a string or a table { host, methods, paths, access }"
    };
    let Some(text) = node.as_str() else {
        // The serde wording, as for any value of the wrong type.
        node::wrong(p, node, expected);
        return None;
    };
    pattern(p, text, node.at(), list).map(|entry| Compiled {
        entry,
        at: node.at(),
    })
}

/// A pattern string, as every domain list takes it.
fn pattern(p: &mut Problems, text: &str, at: Option<usize>, list: &str) -> Option<DomainEntry> {
    match DomainEntry::parse(text) {
        Ok(e) => Some(e),
        Err(error) => {
            let message = error.to_string();
            let kind = ProblemKind::Domain {
                list: list.to_string(),
                error,
            };
            p.push(at, kind, Some(text), message);
            None
        }
    }
}

fn table<'a, N: Node<'a>>(
    p: &mut Problems,
    node: N,
    list: &str,
    tables: Tables,
) -> Option<Compiled> {
    let t = node::table(p, node, "a table")?;
    t.unknown(p, table_name(list), &ENTRY_KEYS);
    let [host, methods, paths, access, inspect] = t.take(&ENTRY_KEYS);
    let Some(host_node) = host else {
        p.invalid(t.at, missing("host"));
        return None;
    };
    let host_text = node::string(p, host_node)?;
    let at = host_node.at().or(t.at);
    let mut bad = |p: &mut Problems, at: Option<usize>, msg: String| {
        let kind = ProblemKind::Rule {
            list: list.to_string(),
        };
        p.push(at, kind, Some(host_text), msg);
    };
    let before = p.len();
    let mut entry = pattern(p, host_text, at, list);
    let read_only = access
        .and_then(|a| node::variant::<RawAccess, _>(p, a))
        .is_some();
    if let (Some(_), Some(m)) = (access, methods) {
        let msg =
            "give `methods` or `access`, not both (`access = \"read-only\"` is GET, HEAD, OPTIONS)";
        bad(p, m.at(), msg.to_string());
    }
    let methods = methods.and_then(|m| method_list(p, m, &mut bad));
    let paths = paths.and_then(|l| path_list(p, l, &mut bad));
    let inspect = match inspect {
        Some(i) if tables == Tables::Request => {
            let msg = "`inspect` is set in the organization file only";
            bad(p, i.at(), msg.to_string());
            false
        }
        Some(i) => node::boolean(p, i).unwrap_or(false),
        None => false,
    };
    if p.len() != before {
        return None;
    }
    let e = entry.as_mut()?;
    if methods.is_some() || paths.is_some() || read_only || inspect {
        let rules = Rules::new(host_text, methods, paths, read_only, inspect);
        e.rules = Some(Arc::new(rules));
    }
    entry.map(|entry| Compiled { entry, at })
}

type Bad<'b> = dyn FnMut(&mut Problems, Option<usize>, String) + 'b;

fn method_list<'a, N: Node<'a>>(p: &mut Problems, node: N, bad: &mut Bad) -> Option<Vec<String>> {
    let items = node::strings(p, node)?;
    if items.is_empty() {
        let msg = "methods must not be empty: leave it out to allow every method";
        bad(p, node.at(), msg.to_string());
        return None;
    }
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        if !valid_method(item.text) {
            let msg = format!(
                "method `{}` is not an upper-case method name such as GET or POST",
                item.text
            );
            bad(p, item.at, msg);
        } else if !out.iter().any(|m| m == item.text) {
            out.push(item.text.to_string());
        }
    }
    Some(out)
}

fn path_list<'a, N: Node<'a>>(p: &mut Problems, node: N, bad: &mut Bad) -> Option<Vec<PathRule>> {
    let items = node::strings(p, node)?;
    if items.is_empty() {
        let msg = "paths must not be empty: leave it out to allow every path";
        bad(p, node.at(), msg.to_string());
        return None;
    }
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        match PathRule::parse(item.text) {
            Ok(rule) => out.push(rule),
            Err(e) => bad(p, item.at, format!("path `{}`: {e}", item.text)),
        }
    }
    Some(out)
}
