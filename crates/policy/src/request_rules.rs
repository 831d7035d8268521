//! Choosing the entry of one level that allows a request
//! (docs/reference/policy-files.md, "Entries with rules"): among the entries matching the
//! host, the first that allows the port and,
//! when the request's method and path are known ([`Http`]), its method and path. When
//! none does, why: the port (`port_not_allowed`), else the method (`method_not_allowed`),
//! else the path (`path_not_allowed`).

use std::sync::Arc;

use super::host::DomainEntry;
use super::path::NormalPath;
use super::steps::{Match, Step, Trace};
use super::verdict::{Decision, Level, Reason};

/// What a request asks of its destination beyond host and port: its method and its path
/// normalised by [`super::path::normalize`]. A plain-HTTP request or a request inside an
/// intercepted tunnel has one; a `CONNECT` does not.
#[derive(Clone, Copy, Debug)]
pub struct Http<'a> {
    /// The method, as sent (methods are case-sensitive).
    pub method: &'a str,
    /// The path, normalised.
    pub path: &'a NormalPath,
}

/// How one level's entries judged a request.
pub(super) enum Found<'a> {
    Allowed(&'a DomainEntry),
    /// No entry matches the host.
    NoMatch,
    /// Entries match the host; none allows the port (the first of them).
    NoPort(&'a DomainEntry),
    /// Entries match host and port; none allows the method (the first of them).
    NoMethod(&'a DomainEntry),
    /// Some entry allows the method; none also allows the path (the first of those).
    NoPath(&'a DomainEntry),
}

/// Judge `http` (or just the port, without it) against the entries matching the host.
pub(super) fn find_entry<'a>(
    matching: impl Iterator<Item = &'a DomainEntry>,
    port: u16,
    ports: &[u16],
    http: Option<&Http>,
) -> Found<'a> {
    let (mut host, mut on_port, mut on_method) = (None, None, None);
    for e in matching {
        host.get_or_insert(e);
        if !e.allows_port(port, ports) {
            continue;
        }
        on_port.get_or_insert(e);
        let Some(http) = http else {
            return Found::Allowed(e);
        };
        let Some(rules) = &e.rules else {
            return Found::Allowed(e);
        };
        if !rules.allows_method(http.method) {
            continue;
        }
        on_method.get_or_insert(e);
        if rules.allows_path(http.path) {
            return Found::Allowed(e);
        }
    }
    match (host, on_port, on_method) {
        (None, ..) => Found::NoMatch,
        (Some(e), None, _) => Found::NoPort(e),
        (_, Some(e), None) => Found::NoMethod(e),
        (.., Some(e)) => Found::NoPath(e),
    }
}

/// The step an allowing entry records.
pub(super) fn allowed(e: &DomainEntry, port: u16, http: Option<&Http>) -> Match {
    let rule = e.rule().clone();
    match (http, &e.rules) {
        (Some(h), Some(_)) => Match::Request {
            rule,
            method: h.method.to_string(),
            path: h.path.to_string(),
        },
        _ => Match::Port { rule, port },
    }
}

/// The denial of a level whose entries did not allow the request; `request` is the
/// request level's index (`None` for the organization), for the step.
pub(super) fn refuse(
    found: Found,
    level: Level,
    request: Option<usize>,
    port: u16,
    ports: &[u16],
    http: Option<&Http>,
    trace: &mut impl Trace,
) -> Decision {
    let (reason, entry) = match found {
        Found::NoMatch if level == Level::Org => (Reason::NotInOrgAllowlist, None),
        Found::NoMatch => (Reason::NotInRequestPolicy, None),
        Found::NoPort(e) => (Reason::PortNotAllowed, Some(e)),
        Found::NoMethod(e) => (Reason::MethodNotAllowed, Some(e)),
        Found::NoPath(e) => (Reason::PathNotAllowed, Some(e)),
        Found::Allowed(_) => unreachable!("an allowed request is not refused"),
    };
    let rule = entry.map(|e| e.rule().clone());
    // The step is built only when traced (`check --explain`), never on the request path.
    trace.step(|| {
        let found = refused_step(reason, rule.clone(), port, ports, http);
        match request {
            None => Step::OrgAllowed(found),
            Some(level) => Step::RequestAllowed { level, found },
        }
    });
    Decision::deny(reason, level, rule)
}

fn refused_step(
    reason: Reason,
    rule: Option<Arc<str>>,
    port: u16,
    ports: &[u16],
    http: Option<&Http>,
) -> Match {
    let method = http.map(|h| h.method.to_string()).unwrap_or_default();
    let path = http.map(|h| h.path.to_string()).unwrap_or_default();
    match (reason, rule) {
        (Reason::PortNotAllowed, Some(rule)) => Match::OtherPort {
            rule,
            port,
            ports: ports.to_vec(),
        },
        (Reason::MethodNotAllowed, Some(rule)) => Match::OtherMethod { rule, method },
        (Reason::PathNotAllowed, Some(rule)) => Match::OtherPath { rule, method, path },
        _ => Match::None,
    }
}

/// Whether an entry matching the host on `port` inspects (has `methods`, `paths`,
/// `access` or `inspect`).
pub(super) fn any_inspected<'a>(
    mut matching: impl Iterator<Item = &'a DomainEntry>,
    port: u16,
    ports: &[u16],
) -> bool {
    matching.any(|e| e.inspected() && e.allows_port(port, ports))
}

#[cfg(test)]
#[path = "request_rules_tests.rs"]
mod tests;
