//! Linting a request policy (JSON `network_policy`), and the allowlist rules shared with
//! the organization's inline `default_network_policy`.
//!
//! serde_json keeps no positions, so a small scanner finds where each string literal
//! starts; the parsed value stays the source of truth and a string is placed at its
//! literal only when the two agree.

use serde_json::Value;

use super::entries::{self, Item as Entry, ListCtx};
use super::org_file::unknown_key_message;
use super::{Finding, Sink};
use crate::policy::{
    check_narrowing, DomainSet, OrgPolicy, Problem, RequestPolicy, SharedHostingAction,
};

const POLICY: &[&str] = &["type", "allowed_domains", "allowed_cidrs"];

/// Lint one request policy; with `org`, also check it narrows that organization policy.
pub(crate) fn lint(file: &str, text: &str, org: Option<&OrgPolicy>) -> Vec<Finding> {
    let mut sink = Sink::new(file, text);
    let value: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            let msg = format!("not valid JSON: {}", strip_position(&e));
            let pos = (e.line().max(1), e.column().max(1));
            sink.at_line("parse-error", super::Severity::Error, pos, msg, None);
            return sink.findings;
        }
    };
    let Some(object) = value.as_object() else {
        let msg = "a request policy is a JSON object, such as {\"type\": \"disabled\"}".into();
        sink.at("parse-error", 0, msg, None);
        return sink.findings;
    };
    let tokens = scan(text);
    let disabled = object.get("type").and_then(Value::as_str) == Some("disabled");
    let known = if disabled { &POLICY[..1] } else { POLICY };
    for key in object.keys().filter(|k| !known.contains(&k.as_str())) {
        let (msg, fix) = unknown_key_message(key, key, known);
        sink.at("unknown-key", key_offset(&tokens, key), msg, fix);
    }
    if object.get("type").and_then(Value::as_str) == Some("allowlist") {
        let domains = items(&tokens, object, "allowed_domains");
        let cidrs = object
            .contains_key("allowed_cidrs")
            .then(|| items(&tokens, object, "allowed_cidrs"));
        allowlist_rules(&mut sink, "", &domains, cidrs, org);
    }
    if let Err(e) = RequestPolicy::from_json(text, file) {
        unexplained_problems(&mut sink, e.problems);
    }
    sink.findings
}

/// The rules of an allowlist policy's entries; `prefix` names where it sits
/// (`default_network_policy.` inside an organization file). Returns the policy as far as
/// it reads.
pub(crate) fn allowlist_rules(
    sink: &mut Sink,
    prefix: &str,
    domains: &[Entry],
    cidrs: Option<Vec<Entry>>,
    org: Option<&OrgPolicy>,
) -> RequestPolicy {
    let default_ports = [80, 443];
    let ports = org.map_or(&default_ports[..], |o| &o.allowed_ports);
    let empty = DomainSet::default();
    let shared = org.map_or((&empty, SharedHostingAction::Flag), |o| {
        (&o.shared_hosting_extra, o.shared_hosting_action)
    });
    let name = format!("{prefix}allowed_domains");
    let ctx = ListCtx {
        name: &name,
        ports,
        shared: Some(shared),
    };
    let valid = entries::domains(sink, domains, &ctx);
    let cidr_name = format!("{prefix}allowed_cidrs");
    let nets = cidrs.map(|items| entries::cidrs(sink, &items, &cidr_name));
    if let Some(org) = org {
        entries::conflicts(sink, &valid, &name, &org.denied, ports);
        for (entry, offset) in &valid {
            let single = RequestPolicy::Allowlist {
                domains: DomainSet::from_entries(vec![entry.clone()]),
                cidrs: None,
            };
            widening(sink, org, &single, &name, &entry.text, *offset);
        }
        for (net, offset) in nets.iter().flatten() {
            let single = RequestPolicy::Allowlist {
                domains: DomainSet::default(),
                cidrs: Some(vec![*net]),
            };
            widening(sink, org, &single, &cidr_name, &net.to_string(), *offset);
        }
    }
    RequestPolicy::Allowlist {
        domains: DomainSet::from_entries(valid.into_iter().map(|(e, _)| e).collect()),
        cidrs: nets.map(|n| n.into_iter().map(|(n, _)| n).collect()),
    }
}

fn widening(
    sink: &mut Sink,
    org: &OrgPolicy,
    single: &RequestPolicy,
    list: &str,
    text: &str,
    offset: usize,
) {
    let Err(w) = check_narrowing(org, &[], single) else {
        return;
    };
    for offending in w.offending {
        let why = offending
            .strip_prefix(&format!("{text}: "))
            .unwrap_or(&offending);
        let msg = format!(
            "{list}: `{text}` widens the organization policy {}: {why}; remove it, or have the organization allow it",
            org.source
        );
        sink.at("widens-org-policy", offset, msg, None);
    }
}

/// The loader's problems that no more specific rule reported, as `parse-error`.
pub(crate) fn unexplained_problems(sink: &mut Sink, problems: Vec<Problem>) {
    for p in problems {
        if p.message.contains("unknown field") || p.message.contains("widens the organization") {
            continue;
        }
        let explained = p.entry.as_ref().is_some_and(|e| {
            let quoted = format!("`{e}`");
            sink.findings.iter().any(|f| {
                matches!(f.rule, "invalid-pattern" | "wildcard-public-suffix")
                    && f.message.contains(&quoted)
            })
        });
        if explained {
            continue;
        }
        let msg = match &p.entry {
            Some(e) => format!("`{e}`: {}", p.message),
            None => p.message.clone(),
        };
        let pos = (p.line.unwrap_or(1), p.column.unwrap_or(1));
        sink.at_line("parse-error", super::Severity::Error, pos, msg, None);
    }
}

fn strip_position(e: &serde_json::Error) -> String {
    let message = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    message
        .strip_suffix(&suffix)
        .map_or(message.clone(), str::to_string)
}

/// A string literal of the text: decoded, where its opening quote is, and whether it is
/// an object key.
struct Token {
    text: String,
    offset: usize,
    key: bool,
}

fn scan(text: &str) -> Vec<Token> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'"' {
            i += 1;
            continue;
        }
        let start = i;
        i += 1;
        while i < bytes.len() && bytes[i] != b'"' {
            i += if bytes[i] == b'\\' { 2 } else { 1 };
        }
        let end = (i + 1).min(bytes.len());
        out.push(Token {
            text: serde_json::from_str(&text[start..end]).unwrap_or_default(),
            offset: start,
            key: text[end..].trim_start().starts_with(':'),
        });
        i = end;
    }
    out
}

fn key_offset(tokens: &[Token], key: &str) -> usize {
    tokens
        .iter()
        .find(|t| t.key && t.text == key)
        .map_or(0, |t| t.offset)
}

/// The strings of the array under `key`, placed at their literals after the key.
fn items(tokens: &[Token], object: &serde_json::Map<String, Value>, key: &str) -> Vec<Entry> {
    let at = key_offset(tokens, key);
    let literals: Vec<&Token> = tokens
        .iter()
        .skip_while(|t| !(t.key && t.text == key))
        .skip(1)
        .take_while(|t| !t.key)
        .collect();
    let values = object.get(key).and_then(Value::as_array);
    values
        .into_iter()
        .flatten()
        .enumerate()
        .filter_map(|(i, v)| {
            let text = v.as_str()?.to_string();
            let offset = literals
                .get(i)
                .filter(|t| t.text == text)
                .map_or(at, |t| t.offset);
            Some(Entry { text, offset })
        })
        .collect()
}
