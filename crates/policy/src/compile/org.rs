//! Compiling the organization policy (TOML).

use super::entry::Tables;
use super::node::{self, missing, Node};
use super::problems::{ProblemKind, Problems};
use super::request::{self, cidr_list, domain_list};
use std::path::PathBuf;

use crate::compiled::{Mode, OnTrip, OrgPolicy, OrgSpans, SharedHostingAction, Tunnels};
use crate::cover::widened;
use crate::file::{
    RawMode, RawOnTrip, RawSharedHostingAction, CANARIES_KEYS, ORG_KEYS, SHARED_HOSTING_KEYS,
    TUNNELS_KEYS, VERSION,
};

/// The organization policy of a document's root table, as far as it reads.
pub(super) fn compile<'a, N: Node<'a>>(
    root: N,
    source: &str,
    p: &mut Problems,
) -> (OrgPolicy, OrgSpans) {
    let mut org = OrgPolicy::empty(source);
    let mut spans = OrgSpans::default();
    let Some(t) = node::table(p, root, "a table") else {
        return (org, spans);
    };
    t.unknown(p, "", &ORG_KEYS);
    let [version, name, mode, allowed, denied, ports, cidrs, default, shared, tunnels, creds, limits, canaries, dlp] =
        t.take(&ORG_KEYS);
    match version {
        // The document's start.
        None => p.invalid(Some(0), missing("version")),
        Some(v) => match node::int(p, v) {
            Some(n) if n != VERSION => {
                let msg = format!("unsupported version {n}: write version = {VERSION}");
                p.invalid(v.at(), msg);
            }
            _ => {}
        },
    }
    if let Some(name) = name.and_then(|n| node::string(p, n)) {
        org.name = name.to_string();
    }
    if let Some(RawMode::Report) = mode.and_then(|m| node::variant(p, m)) {
        org.mode = Mode::Report;
    }
    if let Some(shared) = shared.and_then(|s| node::table(p, s, "a table")) {
        shared.unknown(p, "shared_hosting.", &SHARED_HOSTING_KEYS);
        let [action, extra] = shared.take(&SHARED_HOSTING_KEYS);
        if let Some(RawSharedHostingAction::Deny) = action.and_then(|a| node::variant(p, a)) {
            org.shared_hosting_action = SharedHostingAction::Deny;
        }
        let name = ("", "extra_domains");
        org.shared_hosting_extra =
            domain_list(p, extra, name, Tables::No, &mut spans.extra_domains);
    }
    org.allowed = domain_list(
        p,
        allowed,
        ("", "allowed_domains"),
        Tables::Org,
        &mut spans.allowed_domains,
    );
    let denied_list = ("", "denied_domains");
    org.denied = domain_list(
        p,
        denied,
        denied_list,
        Tables::No,
        &mut spans.denied_domains,
    );
    if let Some(list) = ports.and_then(|l| node::elements(p, l)) {
        org.allowed_ports = compile_ports(p, list, &mut spans.allowed_ports);
    }
    org.allowed_cidrs = cidr_list(p, cidrs, ("", "allowed_cidrs"), &mut spans.allowed_cidrs);
    org.cidr_rules = org
        .allowed_cidrs
        .iter()
        .map(|net| net.to_string().into())
        .collect();
    if let Some(t) = tunnels.and_then(|t| node::table(p, t, "a table")) {
        t.unknown(p, "tunnels.", &TUNNELS_KEYS);
        let [tls, sni] = t.take(&TUNNELS_KEYS);
        org.tunnels = Tunnels {
            require_tls: tls.and_then(|b| node::boolean(p, b)),
            require_sni: sni.and_then(|b| node::boolean(p, b)),
        };
    }
    org.credentials = super::credentials::compile(p, creds, &org);
    if let Some(t) = canaries.and_then(|t| node::table(p, t, "a table")) {
        t.unknown(p, "canaries.", &CANARIES_KEYS);
        let [file, on_trip] = t.take(&CANARIES_KEYS);
        if let Some((path, at)) = file.and_then(|n| node::string(p, n).map(|s| (s, n.at()))) {
            match path.is_empty() {
                true => p.invalid(at, "[canaries] values_file is empty".into()),
                false => org.canaries.values_file = Some(PathBuf::from(path)),
            }
        }
        if let Some(RawOnTrip::Refuse) = on_trip.and_then(|n| node::variant(p, n)) {
            org.canaries.on_trip = OnTrip::Refuse;
        }
    }
    if let Some(d) = dlp {
        org.dlp = super::dlp::compile(p, d, "dlp.");
    }
    // Before the default policy, whose budget may not exceed it.
    org.upload_bytes = limits.and_then(|l| super::limits::compile(p, l));
    if let Some(d) = default {
        let table = "default_network_policy.";
        (org.default_policy, spans.default_policy) = request::compile(d, table, p);
        if p.is_empty() {
            default_widening(&org, &spans, p);
        }
    }
    (org, spans)
}

/// `allowed_ports`: each must be 1-65535.
fn compile_ports<'a, N: Node<'a>>(
    p: &mut Problems,
    list: Vec<N>,
    spans: &mut Vec<usize>,
) -> Vec<u16> {
    let mut ports = Vec::with_capacity(list.len());
    for port in list {
        let Some(n) = node::int(p, port) else {
            continue;
        };
        match u16::try_from(n) {
            Ok(n) if n != 0 => {
                ports.push(n);
                spans.push(port.at().unwrap_or(0));
            }
            _ => p.invalid(port.at(), format!("port {n} is not in 1-65535")),
        }
    }
    ports
}

/// A `default_network_policy` that names what the organization does not allow is a
/// problem of the organization file.
fn default_widening(org: &OrgPolicy, spans: &OrgSpans, p: &mut Problems) {
    let widened = widened(org, &org.default_policy, &spans.default_policy);
    for w in widened {
        let msg = format!(
            "default_network_policy widens the organization policy: {}",
            w.why
        );
        p.push(Some(w.at), ProblemKind::Widening, Some(&w.text), msg);
    }
}
