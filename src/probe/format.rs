//! The probe's report as a table, JSON or SARIF (docs/reference/command-line.md,
//! "probe").

use serde_json::{json, Value};

use super::checks::{describe, IDS, PROXY_ALLOWS};
use super::{Outcome, Report, Verdict};

/// The SARIF 2.1.0 schema the output names.
pub const SCHEMA: &str = "https://json.schemastore.org/sarif-2.1.0.json";

fn count(report: &Report, v: Verdict) -> usize {
    report.checks.iter().filter(|c| c.result == v).count()
}

/// The open channels: every `open` check but `proxy-allows` (where open is reach).
fn open_ids(report: &Report) -> Vec<&'static str> {
    report
        .checks
        .iter()
        .filter(|c| c.result == Verdict::Open && c.id != PROXY_ALLOWS)
        .map(|c| c.id)
        .collect()
}

/// One line per check, then a summary line.
pub fn table(report: &Report) -> String {
    let mut out = format!("{:<15} {:<8} {:>6}  EVIDENCE\n", "CHECK", "RESULT", "MS");
    for c in &report.checks {
        let mark = match (c.fails(), report.expected.contains(c.id)) {
            (true, true) => " (expected)",
            _ => "",
        };
        out.push_str(&format!(
            "{:<15} {:<8} {:>6}  {}{mark}\n",
            c.id,
            c.result.as_str(),
            c.ms,
            c.evidence
        ));
    }
    let failing: Vec<&str> = report.failing().iter().map(|c| c.id).collect();
    out.push_str(&format!(
        "{} open, {} closed, {} unknown in {} ms; {}\n",
        open_ids(report).len(),
        count(report, Verdict::Closed),
        count(report, Verdict::Unknown),
        report.ms,
        match failing.is_empty() {
            true => "nothing unexpected is open".to_string(),
            false => format!("failing: {}", failing.join(", ")),
        }
    ));
    out
}

/// `{"checks": [...], "open": [...], "summary": {...}}`.
pub fn json(report: &Report) -> String {
    let failing: Vec<&str> = report.failing().iter().map(|c| c.id).collect();
    let doc = json!({
        "checks": report.checks,
        "open": open_ids(report),
        "summary": {
            "open": open_ids(report).len(),
            "closed": count(report, Verdict::Closed),
            "unknown": count(report, Verdict::Unknown),
            "expected": report.expected,
            "failing": failing,
            "ms": report.ms,
        },
    });
    serde_json::to_string_pretty(&doc).expect("serialisable") + "\n"
}

/// One `error` result per open channel (and per `--allowed` URL not reached); those
/// `--expect` lists carry a suppression.
pub fn sarif(report: &Report) -> String {
    let rules: Vec<Value> = IDS
        .iter()
        .map(|id| {
            json!({
                "id": id,
                "name": id,
                "shortDescription": {"text": format!("{id} is open")},
                "fullDescription": {"text": describe(id)},
                "defaultConfiguration": {"level": "error"},
            })
        })
        .collect();
    let results: Vec<Value> = report
        .checks
        .iter()
        .filter(|c| c.fails())
        .map(|c| result(c, report.expected.contains(c.id)))
        .collect();
    let doc = json!({
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "egress-proxy probe",
                "version": env!("CARGO_PKG_VERSION"),
                "rules": rules,
            }},
            "results": results,
        }],
    });
    serde_json::to_string_pretty(&doc).expect("serialisable") + "\n"
}

fn result(c: &Outcome, expected: bool) -> Value {
    let index = IDS.iter().position(|id| *id == c.id).unwrap_or(0);
    let text = match c.id {
        PROXY_ALLOWS => format!("an --allowed URL is not reached: {}", c.evidence),
        _ => format!("{} is open: {}", c.id, c.evidence),
    };
    let mut r = json!({
        "ruleId": c.id,
        "ruleIndex": index,
        "level": "error",
        "message": {"text": text},
        "locations": [{"logicalLocations": [{"name": c.id, "kind": "module"}]}],
    });
    if expected {
        r["suppressions"] = json!([{"kind": "external", "justification": "listed in --expect"}]);
    }
    r
}
