//! SARIF 2.1.0 output, as code-scanning services (GitHub's among them) accept it: one
//! run, the full rule table with descriptions, and a result per finding with its
//! physical location.

use serde_json::{json, Value};

use super::{Report, Severity, RULES};

pub const SCHEMA: &str = "https://json.schemastore.org/sarif-2.1.0.json";

fn level(s: Severity) -> &'static str {
    match s {
        Severity::Error => "error",
        Severity::Warning => "warning",
        Severity::Info => "note",
    }
}

/// A file name as a relative URI reference: forward slashes, no leading `./`.
pub(crate) fn uri(file: &str) -> String {
    let s = file.replace('\\', "/");
    s.strip_prefix("./").unwrap_or(&s).to_string()
}

pub fn sarif(report: &Report) -> String {
    let rules: Vec<Value> = RULES
        .iter()
        .map(|r| {
            json!({
                "id": r.id,
                "name": r.id,
                "shortDescription": {"text": r.short},
                "fullDescription": {"text": r.full},
                "defaultConfiguration": {"level": level(r.severity)},
            })
        })
        .collect();
    let results: Vec<Value> = report
        .findings
        .iter()
        .map(|f| {
            let rule_index = f.rule as usize;
            let mut result = json!({
                "ruleId": f.rule,
                "ruleIndex": rule_index,
                "level": level(f.severity),
                "message": {"text": f.message},
                "locations": [{
                    "physicalLocation": {
                        "artifactLocation": {"uri": uri(&f.file)},
                        "region": {"startLine": f.line, "startColumn": f.column},
                    }
                }],
            });
            if let Some(fix) = &f.fix {
                result["properties"] = json!({ "suggestedFix": fix });
            }
            result
        })
        .collect();
    let artifacts: Vec<Value> = report
        .files
        .iter()
        .map(|f| json!({"location": {"uri": uri(f)}}))
        .collect();
    log("egress-proxy lint", rules, artifacts, results)
}

/// One SARIF 2.1.0 log of one run of `tool` (lint's, and `diff`'s): its rule table,
/// the files it read and its results.
pub(crate) fn log(
    tool: &str,
    rules: Vec<Value>,
    artifacts: Vec<Value>,
    results: Vec<Value>,
) -> String {
    let doc = json!({
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": tool,
                "version": env!("CARGO_PKG_VERSION"),
                "rules": rules,
            }},
            "artifacts": artifacts,
            "results": results,
        }],
    });
    serde_json::to_string_pretty(&doc).expect("serialisable") + "\n"
}
