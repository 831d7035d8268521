//! Text and JSON output of a lint [`Report`].

use std::fmt::Write;

use super::{Report, Severity};

/// Compiler-style lines, `file:line:col: error[rule]: message`, each followed by a
/// `help:` line when there is a fix.
pub fn text(report: &Report) -> String {
    let mut out = String::new();
    for f in &report.findings {
        let _ = writeln!(
            out,
            "{}:{}:{}: {}[{}]: {}",
            f.file, f.line, f.column, f.severity, f.rule, f.message
        );
        match f.fix.as_deref() {
            Some("") => {
                let _ = writeln!(out, "  help: remove this entry");
            }
            Some(fix) => {
                let _ = writeln!(out, "  help: replace with `{fix}`");
            }
            None => {}
        }
    }
    out
}

/// `N errors, M warnings in K files`, for standard error.
pub fn summary(report: &Report) -> String {
    let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
    format!(
        "{}, {} in {}",
        plural(report.count(Severity::Error), "error"),
        plural(report.count(Severity::Warning), "warning"),
        plural(report.files.len(), "file"),
    )
}

/// One JSON document: `{"files": [...], "findings": [...], "errors": N, "warnings": M}`.
pub fn json(report: &Report) -> String {
    let value = serde_json::json!({
        "files": report.files,
        "findings": report.findings,
        "errors": report.count(Severity::Error),
        "warnings": report.count(Severity::Warning),
        "notes": report.notes,
    });
    serde_json::to_string_pretty(&value).expect("serialisable") + "\n"
}
