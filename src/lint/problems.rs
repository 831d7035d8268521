//! The compiler's problems as findings: a syntax error, an unknown key, an entry that is
//! not a pattern or CIDR, and (as `parse-error`) whatever else keeps the file from
//! loading. A widening `default_network_policy` is left to `widens-org-policy`.

use super::{RuleId, Sink};
use crate::policy::{EntryError, Problem, ProblemKind};

/// The problems with a rule of their own; `syntax` names the file's (`TOML`, `JSON`).
pub(crate) fn report(sink: &mut Sink, problems: &[Problem], syntax: &str) {
    for p in problems {
        let entry = p.entry.as_deref().unwrap_or_default();
        let (rule, message, fix) = match &p.kind {
            ProblemKind::Syntax => {
                let msg = format!("not valid {syntax}: {}", p.message);
                (RuleId::ParseError, msg, None)
            }
            ProblemKind::UnknownKey { table, key, known } => {
                let (msg, fix) = unknown_key_message(&format!("{table}{key}"), key, known);
                (RuleId::UnknownKey, msg, fix)
            }
            ProblemKind::Domain { list, error } => {
                let rule = match error {
                    EntryError::PublicSuffixWildcard(_) => RuleId::WildcardPublicSuffix,
                    _ => RuleId::InvalidPattern,
                };
                (rule, format!("{list}: `{entry}`: {}", p.message), None)
            }
            ProblemKind::Cidr { list } | ProblemKind::Rule { list } => {
                let msg = format!("{list}: `{entry}`: {}", p.message);
                (RuleId::InvalidPattern, msg, None)
            }
            ProblemKind::UnboundedPattern { .. } => {
                (RuleId::DlpPatternUnbounded, p.message.clone(), None)
            }
            ProblemKind::Widening | ProblemKind::Invalid => continue,
        };
        at_problem(sink, rule, p, message, fix);
    }
}

/// The problems no rule of its own reports, as `parse-error`.
pub(crate) fn report_rest(sink: &mut Sink, problems: &[Problem]) {
    for p in problems.iter().filter(|p| p.kind == ProblemKind::Invalid) {
        let msg = match &p.entry {
            Some(e) => format!("`{e}`: {}", p.message),
            None => p.message.clone(),
        };
        at_problem(sink, RuleId::ParseError, p, msg, None);
    }
}

fn at_problem(sink: &mut Sink, rule: RuleId, p: &Problem, message: String, fix: Option<String>) {
    let position = (p.line.unwrap_or(1), p.column.unwrap_or(1));
    sink.at_line(rule, rule.rule().severity, position, message, fix);
}

/// "unknown key `x`", with the nearest known key as the fix when one is close.
fn unknown_key_message(shown: &str, key: &str, known: &[&str]) -> (String, Option<String>) {
    let near = known
        .iter()
        .map(|k| (distance(key, k), *k))
        .min()
        .filter(|(d, _)| *d <= 3)
        .map(|(_, k)| k.to_string());
    let msg = match &near {
        Some(k) => format!("unknown key `{shown}`: did you mean `{k}`?"),
        None => format!(
            "unknown key `{shown}`: remove it (known keys here: {})",
            known.join(", ")
        ),
    };
    (msg, near)
}

/// Levenshtein distance, for "did you mean".
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}
