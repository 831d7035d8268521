//! `diff`'s text, markdown and JSON outputs.

use std::fmt::Write;

use super::{Change, Diff, Effect};

/// `N widening, M narrowing, K other`.
pub fn summary(diff: &Diff) -> String {
    let n = |e| diff.count(e);
    format!(
        "{} widening, {} narrowing, {} other",
        n(Effect::Widening),
        n(Effect::Narrowing),
        n(Effect::Neutral)
    )
}

/// Widening first, then narrowing, then the rest, each in the file's order.
fn ordered(diff: &Diff) -> Vec<&Change> {
    let mut v: Vec<&Change> = diff.changes.iter().collect();
    v.sort_by_key(|c| c.effect);
    v
}

/// One line per change, `NEW:line:col: widening[kind]: message`.
pub fn text(diff: &Diff) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{} -> {}: {}", diff.old, diff.new, summary(diff));
    for c in ordered(diff) {
        let _ = writeln!(
            out,
            "{}:{}:{}: {}[{}]: {}",
            diff.new,
            c.line,
            c.column,
            c.effect.as_str(),
            c.kind.as_str(),
            c.message
        );
    }
    out
}

/// Table cells: no `|` or newline may break the row.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// A pull-request comment: a summary line, then one table row per change.
pub fn markdown(diff: &Diff) -> String {
    let mut out = String::new();
    let verdict = if diff.widens() {
        "**widens the policy**"
    } else if diff.changes.is_empty() {
        "no change in what the policy lets through"
    } else {
        "does not widen the policy"
    };
    let _ = writeln!(
        out,
        "### egress-proxy diff: `{}` {verdict} ({})\n",
        cell(&diff.new),
        summary(diff)
    );
    if diff.changes.is_empty() {
        return out;
    }
    let _ = writeln!(out, "| | change | setting | where |");
    let _ = writeln!(out, "|---|---|---|---|");
    for c in ordered(diff) {
        let mark = match c.effect {
            Effect::Widening => "**widening**",
            Effect::Narrowing => "narrowing",
            Effect::Neutral => "other",
        };
        let _ = writeln!(
            out,
            "| {mark} | {} | `{}` | line {} |",
            cell(&c.message),
            cell(&c.setting),
            c.line
        );
    }
    out
}

/// One document: `old`, `new`, `kind`, the counts and every change.
pub fn json(diff: &Diff) -> String {
    let doc = serde_json::json!({
        "old": diff.old,
        "new": diff.new,
        "kind": diff.kind,
        "widens": diff.widens(),
        "widening": diff.count(Effect::Widening),
        "narrowing": diff.count(Effect::Narrowing),
        "neutral": diff.count(Effect::Neutral),
        "changes": ordered(diff),
    });
    serde_json::to_string_pretty(&doc).expect("serialisable") + "\n"
}
