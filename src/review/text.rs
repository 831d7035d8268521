//! The plain-text summary, for a terminal or a CI log.

use std::fmt::Write;

use super::Summary;

pub fn render(s: &Summary) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "Audit summary of {}", s.files.join(", "));
    let _ = writeln!(
        o,
        "  {} records, {} malformed lines skipped{}",
        s.records,
        s.malformed,
        match &s.since {
            Some(t) => format!(", {} before --since {t} left out", s.skipped_before_since),
            None => String::new(),
        }
    );
    if let (Some(a), Some(b)) = (&s.first, &s.last) {
        let _ = writeln!(o, "  from {a} to {b}");
    }
    for w in &s.warnings {
        let _ = writeln!(o, "  warning: {w}");
    }
    if !s.secrets_found.is_empty() {
        // First: a canary tripped or a secret found is an incident (docs/reference/dlp.md).
        let _ = writeln!(o, "\nSecrets found (canaries and detectors)");
        for f in &s.secrets_found {
            let _ = writeln!(
                o,
                "  {:>8}  {} {} {} ({}) in {}",
                f.count, f.event, f.reason, f.id, f.kind, f.found_in
            );
        }
    }
    let _ = writeln!(o, "\nEvents");
    for c in &s.events {
        let _ = writeln!(o, "  {:>8}  {}", c.count, c.name);
    }
    let _ = writeln!(o, "\nDenials by reason ({} in all)", s.denials);
    for c in &s.denials_by_reason {
        let _ = writeln!(o, "  {:>8}  {}", c.count, c.name);
    }
    let _ = writeln!(o, "\nTop denied hosts");
    for h in &s.top_denied_hosts {
        let reasons: Vec<String> = h.reasons.iter().map(|c| c.name.clone()).collect();
        let _ = writeln!(
            o,
            "  {:>8}  {}  ({})",
            h.denials,
            h.host,
            reasons.join(", ")
        );
        let list = |v: &[super::Count]| {
            v.iter()
                .map(|c| format!("{} ({})", c.name, c.count))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = writeln!(
            o,
            "            sessions ({}): {}",
            h.sessions_total,
            list(&h.sessions)
        );
        let _ = writeln!(
            o,
            "            clients ({}): {}",
            h.clients_total,
            list(&h.clients)
        );
    }
    let _ = writeln!(o, "\nShared-hosting traffic");
    if s.shared_hosting.is_empty() {
        let _ = writeln!(o, "  none");
    }
    for h in &s.shared_hosting {
        let _ = writeln!(
            o,
            "  {}: {} allowed, {} denied, {} bytes up, {} bytes down",
            h.host, h.allowed, h.denied, h.bytes_up, h.bytes_down
        );
    }
    let _ = writeln!(o, "\nSuspected exfiltration");
    if s.suspected_exfiltration.is_empty() {
        let _ = writeln!(o, "  none");
    }
    for x in &s.suspected_exfiltration {
        let _ = writeln!(
            o,
            "  {} x{}: {}: {} (sessions: {}; clients: {})",
            x.host,
            x.count,
            x.kind,
            x.detail,
            x.sessions.join(", "),
            x.clients.join(", ")
        );
    }
    let _ = writeln!(o, "\nTimeline (per {}: denied/allowed)", s.timeline.unit);
    for b in &s.timeline.buckets {
        let bar = "#".repeat(b.denied.min(60) as usize);
        let _ = writeln!(o, "  {}  {:>6}/{:<6} {bar}", b.start, b.denied, b.allowed);
    }
    o
}
