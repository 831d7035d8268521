//! `diff --format sarif`: SARIF 2.1.0 as lint writes it (src/lint/sarif.rs): the rule
//! table of every change kind, and one result per widening change, located in NEW.
//! Narrowing and neutral changes are not results, so a diff that only narrows gives a
//! valid log with none.

use serde_json::{json, Value};

use super::change::KINDS;
use super::{Diff, Effect};
use crate::lint::sarif::{log, uri};

pub fn sarif(diff: &Diff) -> String {
    let rules: Vec<Value> = KINDS
        .iter()
        .map(|k| {
            json!({
                "id": k.id,
                "name": k.id,
                "shortDescription": {"text": k.short},
                "fullDescription": {"text": k.full},
                "defaultConfiguration": {"level": "error"},
            })
        })
        .collect();
    let results: Vec<Value> = diff
        .changes
        .iter()
        .filter(|c| c.effect == Effect::Widening)
        .map(|c| {
            json!({
                "ruleId": c.kind.as_str(),
                "ruleIndex": c.kind as usize,
                "level": "error",
                "message": {"text": format!("widening: {}", c.message)},
                "locations": [{
                    "physicalLocation": {
                        "artifactLocation": {"uri": uri(&diff.new)},
                        "region": {"startLine": c.line, "startColumn": c.column},
                    }
                }],
                "properties": {"sharedHosting": c.shared_hosting, "setting": c.setting},
            })
        })
        .collect();
    let artifacts = vec![
        json!({"location": {"uri": uri(&diff.old)}}),
        json!({"location": {"uri": uri(&diff.new)}}),
    ];
    log("egress-proxy diff", rules, artifacts, results)
}
