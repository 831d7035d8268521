//! The review of audit logs, offline: the `audit` commands. `audit suggest` is
//! [`suggest`], `audit replay` is [`replay`], both reading logs with [`read`];
//! `audit verify` and `audit keygen` are [`verify`].
//!
//! `egress-proxy audit summarize` (here): reads audit logs (docs/reference/audit-log.md;
//! plain or gzip JSON Lines),
//! skips and counts malformed lines, and summarises them for a security review: denials
//! by reason, top denied hosts with their sessions and clients, shared-hosting traffic,
//! a timeline, and suspected exfiltration. Output as text, JSON or one HTML page.
//!
//! A "denial" is an `egress.denied` or `egress.would_deny` record (report mode lets the
//! latter through, but it is still an attempt the policy refuses).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use serde::{Deserialize, Serialize};

pub mod exfil;
pub mod html;
pub mod read;
pub mod replay;
pub mod suggest;
pub mod text;
pub mod time;
pub mod verify;

/// How many hosts (and sessions or clients per host) the summary lists.
pub const TOP: usize = 10;

/// A usage or I/O error (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum SummaryError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("--since {0:?}: not an RFC 3339 time such as 2026-11-29T10:00:00Z")]
    Since(String),
}

/// The fields of an audit record the summary reads; everything else is ignored.
#[derive(Debug, Deserialize)]
struct Record {
    ts: String,
    event: String,
    #[serde(default)]
    session: Option<String>,
    #[serde(default)]
    client: Option<String>,
    #[serde(default)]
    host: Option<String>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    url_truncated: bool,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    shared_hosting: bool,
    #[serde(default)]
    bytes_up: Option<u64>,
    #[serde(default)]
    bytes_down: Option<u64>,
    #[serde(default)]
    dlp: Option<Dlp>,
}

/// A record's `dlp` object (docs/reference/dlp.md): what was found, never the value.
#[derive(Debug, Deserialize)]
struct Dlp {
    #[serde(default)]
    id: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    found_in: String,
}

/// Canaries and secrets found, by what found them: shown before everything else.
#[derive(Debug, Serialize)]
pub struct SecretFound {
    /// `egress.denied`, `egress.flagged` or `session.ended`.
    pub event: String,
    pub reason: String,
    /// The canary's id, or the detector's or pattern's name.
    pub id: String,
    pub kind: String,
    pub found_in: String,
    pub count: u64,
}

#[derive(Debug, Serialize)]
pub struct Count {
    pub name: String,
    pub count: u64,
}

#[derive(Debug, Serialize)]
pub struct DeniedHost {
    pub host: String,
    pub denials: u64,
    pub reasons: Vec<Count>,
    /// Distinct sessions, most frequent first (at most [`TOP`]); `sessions_total` counts all.
    pub sessions: Vec<Count>,
    pub sessions_total: usize,
    /// Distinct client IPs (the port is ephemeral and dropped).
    pub clients: Vec<Count>,
    pub clients_total: usize,
}

#[derive(Debug, Serialize)]
pub struct SharedHost {
    pub host: String,
    pub allowed: u64,
    pub denied: u64,
    pub bytes_up: u64,
    pub bytes_down: u64,
}

#[derive(Debug, Serialize)]
pub struct Bucket {
    pub start: String,
    pub denied: u64,
    pub allowed: u64,
}

#[derive(Debug, Serialize)]
pub struct Timeline {
    /// `minute`, `hour` or `day`, chosen by the span of the records.
    pub unit: &'static str,
    pub buckets: Vec<Bucket>,
}

#[derive(Debug, Serialize)]
pub struct Suspicion {
    pub host: String,
    /// `long_label`, `high_entropy_label`, `long_subdomain` or `long_query`.
    pub kind: &'static str,
    pub detail: String,
    pub count: u64,
    pub sessions: Vec<String>,
    pub clients: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct Summary {
    pub files: Vec<String>,
    pub records: u64,
    pub malformed: u64,
    /// Records before `--since`, left out of everything below.
    pub skipped_before_since: u64,
    pub since: Option<String>,
    pub first: Option<String>,
    pub last: Option<String>,
    pub warnings: Vec<String>,
    /// Canaries tripped and secrets found (refused or flagged), most frequent first.
    pub secrets_found: Vec<SecretFound>,
    pub events: Vec<Count>,
    pub denials: u64,
    pub denials_by_reason: Vec<Count>,
    pub top_denied_hosts: Vec<DeniedHost>,
    pub shared_hosting: Vec<SharedHost>,
    pub timeline: Timeline,
    pub suspected_exfiltration: Vec<Suspicion>,
}

/// Read every file and summarise the records at or after `since` (RFC 3339).
pub fn summarize(files: &[impl AsRef<Path>], since: Option<&str>) -> Result<Summary, SummaryError> {
    let since_ms = since
        .map(|s| time::parse_rfc3339(s).ok_or_else(|| SummaryError::Since(s.to_string())))
        .transpose()?;
    let mut acc = Acc::default();
    for file in files {
        read_file(file.as_ref(), since_ms, &mut acc)?;
    }
    Ok(acc.finish(
        files
            .iter()
            .map(|f| f.as_ref().display().to_string())
            .collect(),
        since.map(str::to_string),
    ))
}

fn read_file(path: &Path, since: Option<i64>, acc: &mut Acc) -> Result<(), SummaryError> {
    let warnings = read::for_each_line(path, |line| acc.line(line, since))?;
    acc.warnings.extend(warnings);
    Ok(())
}

#[derive(Default)]
struct HostAcc {
    denials: u64,
    reasons: HashMap<String, u64>,
    sessions: HashMap<String, u64>,
    clients: HashMap<String, u64>,
}

/// A suspicion's detail, count, sessions and clients while reading.
type SuspicionAcc = (String, u64, BTreeSet<String>, BTreeSet<String>);

#[derive(Default)]
struct Acc {
    records: u64,
    malformed: u64,
    before_since: u64,
    warnings: Vec<String>,
    events: HashMap<String, u64>,
    reasons: HashMap<String, u64>,
    denied_hosts: HashMap<String, HostAcc>,
    shared: BTreeMap<String, SharedHost>,
    /// (ms, denied) per record, for the timeline.
    times: Vec<(i64, bool)>,
    suspicions: BTreeMap<(String, &'static str), SuspicionAcc>,
    /// (event, reason, id, kind, found_in) of each record with a `dlp` object.
    secrets: BTreeMap<(String, String, String, String, String), u64>,
}

fn client_ip(client: &str) -> String {
    match client.rsplit_once(':') {
        Some((ip, port)) if port.bytes().all(|b| b.is_ascii_digit()) => {
            ip.trim_start_matches('[').trim_end_matches(']').to_string()
        }
        _ => client.to_string(),
    }
}

impl Acc {
    fn line(&mut self, line: &[u8], since: Option<i64>) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        let parsed = std::str::from_utf8(line)
            .ok()
            .and_then(|s| serde_json::from_str::<Record>(s).ok())
            .and_then(|r| Some((time::parse_rfc3339(&r.ts)?, r)));
        let Some((ms, r)) = parsed else {
            self.malformed += 1;
            return;
        };
        if since.is_some_and(|s| ms < s) {
            self.before_since += 1;
            return;
        }
        self.record(ms, r);
    }

    fn record(&mut self, ms: i64, r: Record) {
        self.records += 1;
        *self.events.entry(r.event.clone()).or_default() += 1;
        let denied = matches!(r.event.as_str(), "egress.denied" | "egress.would_deny");
        let allowed = r.event == "egress.allowed";
        if denied || allowed {
            self.times.push((ms, denied));
        }
        if let Some(d) = &r.dlp {
            let reason = r.reason.clone().unwrap_or_default();
            let key = (
                r.event.clone(),
                reason,
                d.id.clone(),
                d.kind.clone(),
                d.found_in.clone(),
            );
            *self.secrets.entry(key).or_default() += 1;
        }
        let Some(host) = r.host.clone() else {
            return;
        };
        if r.shared_hosting && (denied || allowed) {
            let s = self.shared.entry(host.clone()).or_insert(SharedHost {
                host: host.clone(),
                allowed: 0,
                denied: 0,
                bytes_up: 0,
                bytes_down: 0,
            });
            if denied {
                s.denied += 1;
            } else {
                s.allowed += 1;
            }
            s.bytes_up += r.bytes_up.unwrap_or(0);
            s.bytes_down += r.bytes_down.unwrap_or(0);
        }
        if !denied {
            return;
        }
        let reason = r.reason.clone().unwrap_or_else(|| "(none)".into());
        *self.reasons.entry(reason.clone()).or_default() += 1;
        let session = r.session.clone().unwrap_or_else(|| "(no session)".into());
        let client = r.client.as_deref().map_or("(unknown)".into(), client_ip);
        let h = self.denied_hosts.entry(host.clone()).or_default();
        h.denials += 1;
        *h.reasons.entry(reason).or_default() += 1;
        *h.sessions.entry(session.clone()).or_default() += 1;
        *h.clients.entry(client.clone()).or_default() += 1;
        for (kind, detail) in exfil::suspicions(&host, r.url.as_deref(), r.url_truncated) {
            let e = self
                .suspicions
                .entry((host.clone(), kind))
                .or_insert_with(|| (detail, 0, BTreeSet::new(), BTreeSet::new()));
            e.1 += 1;
            e.2.insert(session.clone());
            e.3.insert(client.clone());
        }
    }

    fn finish(self, files: Vec<String>, since: Option<String>) -> Summary {
        let first = self.times.iter().map(|t| t.0).min();
        let last = self.times.iter().map(|t| t.0).max();
        let mut top: Vec<DeniedHost> = self
            .denied_hosts
            .into_iter()
            .map(|(host, h)| DeniedHost {
                host,
                denials: h.denials,
                reasons: ranked(h.reasons, usize::MAX),
                sessions_total: h.sessions.len(),
                sessions: ranked(h.sessions, TOP),
                clients_total: h.clients.len(),
                clients: ranked(h.clients, TOP),
            })
            .collect();
        top.sort_by(|a, b| b.denials.cmp(&a.denials).then(a.host.cmp(&b.host)));
        top.truncate(TOP);
        let mut shared: Vec<SharedHost> = self.shared.into_values().collect();
        shared.sort_by_key(|h| std::cmp::Reverse(h.allowed + h.denied));
        let mut suspected: Vec<Suspicion> = self
            .suspicions
            .into_iter()
            .map(|((host, kind), (detail, count, s, c))| Suspicion {
                host,
                kind,
                detail,
                count,
                sessions: s.into_iter().take(TOP).collect(),
                clients: c.into_iter().take(TOP).collect(),
            })
            .collect();
        suspected.sort_by(|a, b| b.count.cmp(&a.count).then(a.host.cmp(&b.host)));
        let mut secrets: Vec<SecretFound> = self
            .secrets
            .into_iter()
            .map(|((event, reason, id, kind, found_in), count)| SecretFound {
                event,
                reason,
                id,
                kind,
                found_in,
                count,
            })
            .collect();
        secrets.sort_by_key(|f| std::cmp::Reverse(f.count));
        Summary {
            files,
            records: self.records,
            malformed: self.malformed,
            skipped_before_since: self.before_since,
            since,
            first: first.map(time::format_utc),
            last: last.map(time::format_utc),
            warnings: self.warnings,
            secrets_found: secrets,
            events: ranked(self.events, usize::MAX),
            denials: self.reasons.values().sum(),
            denials_by_reason: ranked(self.reasons, usize::MAX),
            top_denied_hosts: top,
            shared_hosting: shared,
            timeline: timeline(&self.times),
            suspected_exfiltration: suspected,
        }
    }
}

/// Most frequent first, then by name; at most `n`.
fn ranked(map: HashMap<String, u64>, n: usize) -> Vec<Count> {
    let mut v: Vec<Count> = map
        .into_iter()
        .map(|(name, count)| Count { name, count })
        .collect();
    v.sort_by(|a, b| b.count.cmp(&a.count).then(a.name.cmp(&b.name)));
    v.truncate(n);
    v
}

/// Per-minute buckets for up to two hours of records, per-hour up to four days,
/// per-day beyond; empty buckets are kept so the chart's time axis is even.
fn timeline(times: &[(i64, bool)]) -> Timeline {
    let (Some(first), Some(last)) = (
        times.iter().map(|t| t.0).min(),
        times.iter().map(|t| t.0).max(),
    ) else {
        return Timeline {
            unit: "minute",
            buckets: Vec::new(),
        };
    };
    let span = last - first;
    let (unit, size) = if span <= 2 * 3_600_000 {
        ("minute", 60_000)
    } else if span <= 4 * 86_400_000 {
        ("hour", 3_600_000)
    } else {
        ("day", 86_400_000)
    };
    let start = first.div_euclid(size) * size;
    let n = ((last.div_euclid(size) * size - start) / size + 1) as usize;
    let mut buckets: Vec<Bucket> = (0..n)
        .map(|i| Bucket {
            start: time::format_utc(start + i as i64 * size),
            denied: 0,
            allowed: 0,
        })
        .collect();
    for &(ms, denied) in times {
        let b = &mut buckets[((ms - start) / size) as usize];
        if denied {
            b.denied += 1;
        } else {
            b.allowed += 1;
        }
    }
    Timeline { unit, buckets }
}
