//! `egress-proxy audit replay`: decides each logged attempt's destination again under
//! `--org` and `--policy`, with the proxy's own decision code and without resolving, and
//! reports every record whose verdict changes: allowed then and denied now ("would
//! break"), denied then and allowed now ("would open") (docs/reference/command-line.md).
//!
//! Records are grouped by what decides them (event, reason, host, port, resolved
//! address) while reading, so each distinct destination is decided once however long
//! the log. A denial whose reason is not about the destination (`auth_required`,
//! `limit_exceeded`, `invalid_request` ...) cannot be re-decided from the record and is
//! counted apart, as are records of other events.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::read::{self, LogError, ALLOWED, DENIED, WOULD_DENY};
use crate::load;
use crate::policy::{
    check_address, decide, decide_any_port, decide_request, normalize_path, Decision, Effective,
    Host, Http, Target, VerdictKind,
};

/// How many destinations each list of the text output shows (JSON lists them all).
pub const SHOWN: usize = 50;

/// How many request ids of its records a changed destination names.
pub const EXAMPLES: usize = 3;

/// The verdict a record gave then.
#[derive(Debug, Serialize, Clone)]
pub struct Then {
    pub event: String,
    pub reason: Option<String>,
}

/// The verdict the policies give now.
#[derive(Debug, Serialize, Clone)]
pub struct Now {
    pub verdict: VerdictKind,
    pub reason: Option<&'static str>,
    pub rule: Option<String>,
    pub level: &'static str,
}

/// One destination whose verdict changes, with how many records it holds.
#[derive(Debug, Serialize, Clone)]
pub struct Changed {
    pub host: String,
    /// `null` for a DNS query (judged for some port).
    pub port: Option<u16>,
    pub resolved_ip: Option<String>,
    /// The method and path of an HTTP request (plain, or inside an intercepted tunnel),
    /// which the entries' `methods` and `paths` judge.
    pub method: Option<String>,
    pub path: Option<String>,
    pub records: u64,
    /// The `request_id` of its first records (at most [`EXAMPLES`]), to find them in the log.
    pub examples: Vec<String>,
    pub then: Then,
    pub now: Now,
}

#[derive(Debug, Serialize)]
pub struct Replay {
    pub files: Vec<String>,
    pub org: String,
    pub policy: Option<String>,
    /// Records re-decided.
    pub records: u64,
    pub unchanged: u64,
    /// Records allowed then and denied now.
    pub would_break: u64,
    /// Records denied then and allowed now.
    pub would_open: u64,
    /// Destinations behind `would_break` / `would_open`.
    pub break_destinations: usize,
    pub open_destinations: usize,
    /// Most records first.
    pub breaks: Vec<Changed>,
    pub opens: Vec<Changed>,
    /// Records of other events, or denied for a reason that is not about the destination.
    pub not_redecided: u64,
    pub malformed: u64,
    pub warnings: Vec<String>,
}

impl Replay {
    pub fn changed(&self) -> bool {
        self.would_break > 0 || self.would_open > 0
    }
}

/// Read `files`, group their records, and decide each group under the policies.
pub fn replay(org: &Path, policy: Option<&Path>, files: &[PathBuf]) -> Result<Replay, LogError> {
    let policies = load::load_strict(org, policy)?;
    let mut groups = Groups::default();
    for file in files {
        let warnings = read::for_each_line(file, |line| groups.line(line))?;
        groups.warnings.extend(warnings);
    }
    let levels = [&policies.without_session];
    let eff = Effective {
        org: &policies.org,
        levels: &levels,
    };
    let mut out = Replay {
        files: files.iter().map(|f| f.display().to_string()).collect(),
        org: org.display().to_string(),
        policy: policy.map(|p| p.display().to_string()),
        records: 0,
        unchanged: 0,
        would_break: 0,
        would_open: 0,
        break_destinations: 0,
        open_destinations: 0,
        breaks: Vec::new(),
        opens: Vec::new(),
        not_redecided: groups.not_redecided,
        malformed: groups.malformed,
        warnings: std::mem::take(&mut groups.warnings),
    };
    for (key, group) in groups.map {
        judge_group(&eff, &key, group, &mut out);
    }
    for list in [&mut out.breaks, &mut out.opens] {
        list.sort_by(|a, b| b.records.cmp(&a.records).then(a.host.cmp(&b.host)));
    }
    out.break_destinations = out.breaks.len();
    out.open_destinations = out.opens.len();
    Ok(out)
}

/// A group's key, joined by [`SEP`]: event, reason, host, port, resolved address,
/// method and path (of an HTTP request).
const SEP: char = '\u{1f}';

#[derive(Default)]
struct Groups {
    map: HashMap<String, Group>,
    key: String,
    not_redecided: u64,
    malformed: u64,
    warnings: Vec<String>,
}

impl Groups {
    fn line(&mut self, line: &[u8]) {
        let Some(a) = read::attempt(line, &mut self.malformed) else {
            return;
        };
        let event = &*a.event;
        let reason = a.reason.as_deref().unwrap_or("");
        let request = read::request_line(&a);
        let (method, path) = request.unwrap_or_default();
        let redecidable = match event {
            ALLOWED | WOULD_DENY => true,
            DENIED => read::destination_reason(Some(reason))
                .is_some_and(|r| request.is_some() || !read::needs_request(r)),
            _ => false,
        };
        let host = a
            .host
            .as_deref()
            .filter(|h| redecidable && !h.contains(SEP) && !path.contains(SEP));
        let Some(host) = host else {
            self.not_redecided += 1;
            return;
        };
        use std::fmt::Write;
        self.key.clear();
        let port = a.port.map(|p| p.to_string()).unwrap_or_default();
        let ip = a.resolved_ip.as_deref().unwrap_or("");
        let _ = write!(
            self.key,
            "{event}{SEP}{reason}{SEP}{host}{SEP}{port}{SEP}{ip}{SEP}{method}{SEP}{path}"
        );
        let group = match self.map.get_mut(self.key.as_str()) {
            Some(g) => g,
            None => self.map.entry(self.key.clone()).or_default(),
        };
        group.records += 1;
        if group.examples.len() < EXAMPLES {
            group
                .examples
                .extend(a.request_id.as_deref().map(str::to_string));
        }
    }
}

/// The records of one key: how many, and the request ids of the first.
#[derive(Default)]
struct Group {
    records: u64,
    examples: Vec<String>,
}

/// Decide one group again and count it.
fn judge_group(eff: &Effective, key: &str, group: Group, out: &mut Replay) {
    let records = group.records;
    let mut parts = key.split(SEP);
    let mut next = || parts.next().unwrap_or("");
    let (event, reason, host, port, ip) = (next(), next(), next(), next(), next());
    let (method, path) = (next(), next());
    let port = port.parse::<u16>().ok();
    let resolved = ip.parse::<IpAddr>().ok();
    // A path that does not normalise was refused as invalid_request: not re-decided.
    let http = match method {
        "" => Some(None),
        m => normalize_path(path).ok().map(|p| Some((m, p))),
    };
    let now = http.and_then(|http| {
        let host = Host::parse(host).ok()?;
        let http = http.as_ref().map(|(method, path)| Http { method, path });
        redecide(eff, &host, port, resolved, http.as_ref())
    });
    let Some(now) = now else {
        out.not_redecided += records;
        return;
    };
    out.records += records;
    let then_allowed = event != DENIED;
    let list = match (then_allowed, now.is_allowed()) {
        (true, false) => {
            out.would_break += records;
            &mut out.breaks
        }
        (false, true) => {
            out.would_open += records;
            &mut out.opens
        }
        _ => {
            out.unchanged += records;
            return;
        }
    };
    list.push(Changed {
        host: host.to_string(),
        port,
        resolved_ip: resolved.map(|ip| ip.to_string()),
        method: (!method.is_empty()).then(|| method.to_string()),
        path: (!method.is_empty()).then(|| path.to_string()),
        records,
        examples: group.examples,
        then: Then {
            event: event.to_string(),
            reason: (!reason.is_empty()).then(|| reason.to_string()),
        },
        now: Now {
            verdict: now.verdict.kind(),
            reason: now.reason().map(|r| r.as_str()),
            rule: now.rule.as_deref().map(str::to_string),
            level: now.level.as_str(),
        },
    });
}

/// The decision now: the destination, then the address it was logged to have (or the
/// literal IP), as the proxy checks them. A query without a port (a DNS record) is a
/// name judged for some port; `None` when the record names no port and no name.
fn redecide(
    eff: &Effective,
    host: &Host,
    port: Option<u16>,
    ip: Option<IpAddr>,
    http: Option<&Http>,
) -> Option<Decision> {
    let decision = match (host, port) {
        (_, Some(port)) => {
            let target = Target {
                host: host.clone(),
                port,
            };
            match http {
                Some(http) => decide_request(eff, &target, http),
                None => decide(eff, &target),
            }
        }
        (Host::Name(name), None) => decide_any_port(eff, name),
        (Host::Ip(_), None) => return None,
    };
    let address = match host {
        Host::Ip(ip) => Some(*ip),
        Host::Name(_) => ip,
    };
    match (address, port) {
        (Some(ip), Some(port)) if decision.is_allowed() => {
            let checked = check_address(eff, ip, &[], port);
            Some(if checked.is_allowed() {
                decision
            } else {
                checked
            })
        }
        _ => Some(decision),
    }
}

/// The report for people: the counts, then each changed destination.
pub fn text(r: &Replay) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let policy = match &r.policy {
        Some(p) => format!("--policy {p}"),
        None => format!("the default_network_policy of {}", r.org),
    };
    let _ = writeln!(
        out,
        "replayed {} records under --org {} and {policy}: {} would break, {} would open, {} unchanged ({} not re-decided, {} malformed)",
        r.records, r.org, r.would_break, r.would_open, r.unchanged, r.not_redecided, r.malformed
    );
    for (title, list, total) in [
        ("would break", &r.breaks, r.break_destinations),
        ("would open", &r.opens, r.open_destinations),
    ] {
        if list.is_empty() {
            continue;
        }
        let _ = writeln!(out, "{title} ({total} destinations):");
        for c in list.iter().take(SHOWN) {
            let _ = writeln!(out, "  {}", line(c));
        }
        if total > SHOWN {
            let _ = writeln!(
                out,
                "  ... and {} more (--format json lists them all)",
                total - SHOWN
            );
        }
    }
    out
}

fn line(c: &Changed) -> String {
    let mut dest = match c.port {
        Some(p) => format!("{}:{p}", c.host),
        None => format!("{} (DNS)", c.host),
    };
    if let (Some(m), Some(p)) = (&c.method, &c.path) {
        dest = format!("{dest} {m} {p}");
    }
    let then = match &c.then.reason {
        Some(r) => format!("{} {r}", c.then.event),
        None => c.then.event.clone(),
    };
    let mut now = c.now.verdict.as_str().to_string();
    if let Some(r) = c.now.reason {
        now = format!("{now} {r}");
    }
    let rule = c
        .now
        .rule
        .as_deref()
        .map(|r| format!(", rule `{r}`"))
        .unwrap_or_default();
    let plural = if c.records == 1 { "" } else { "s" };
    let examples = if c.examples.is_empty() {
        String::new()
    } else {
        format!(" [{}]", c.examples.join(", "))
    };
    format!(
        "{dest}: {} record{plural}{examples}: {then} -> {now} (level {}{rule})",
        c.records, c.now.level
    )
}
