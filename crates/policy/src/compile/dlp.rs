//! `[dlp]` (organization file) and `"dlp"` (request policies): the secret detectors a
//! level adds, its patterns and its action (docs/reference/dlp.md, "Secret detectors").
//! A pattern whose matches can be longer than 256 bytes is a problem of its own kind
//! ([`ProblemKind::UnboundedPattern`]), which `lint` names.

use super::node::{self, missing, Node};
use super::problems::{ProblemKind, Problems};
use crate::dlp::{Builtin, Detector, Dlp, DlpAction, PatternError};
use crate::file::{DLP_KEYS, DLP_PATTERN_KEYS};

/// The `[dlp]` table (`table` = `dlp.`), or a request policy's `"dlp"` object.
pub(super) fn compile<'a, N: Node<'a>>(p: &mut Problems, node: N, table: &'static str) -> Dlp {
    let mut dlp = Dlp::default();
    let Some(t) = node::table(p, node, "a table") else {
        return dlp;
    };
    t.unknown(p, table, &DLP_KEYS);
    let [detectors, action, patterns] = t.take(&DLP_KEYS);
    for item in detectors
        .and_then(|n| node::elements(p, n))
        .unwrap_or_default()
    {
        if let Some(builtin) = node::variant::<Builtin, _>(p, item) {
            let d = builtin.detector();
            match dlp.detectors.contains(&d) {
                true => p.invalid(item.at(), format!("detector `{}` named twice", d.name)),
                false => dlp.detectors.push(d),
            }
        }
    }
    dlp.action = action.and_then(|n| node::variant::<DlpAction, _>(p, n));
    for item in patterns
        .and_then(|n| node::elements(p, n))
        .unwrap_or_default()
    {
        if let Some(d) = pattern(p, item, &dlp) {
            dlp.detectors.push(d);
        }
    }
    dlp
}

/// One `[[dlp.patterns]]` table: a name of its own and a bounded regex.
fn pattern<'a, N: Node<'a>>(p: &mut Problems, item: N, dlp: &Dlp) -> Option<Detector> {
    let t = node::table(p, item, "a table with name and regex")?;
    t.unknown(p, "dlp.patterns.", &DLP_PATTERN_KEYS);
    let [name, regex] = t.take(&DLP_PATTERN_KEYS);
    let (Some(name), Some(regex)) = (name, regex) else {
        let key = if name.is_none() { "name" } else { "regex" };
        p.invalid(t.at, format!("[[dlp.patterns]]: {}", missing(key)));
        return None;
    };
    let (name_at, regex_at) = (name.at(), regex.at());
    let (name, regex) = (node::string(p, name)?, node::string(p, regex)?);
    let bad_name = name.is_empty()
        || name.len() > 64
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b));
    if bad_name {
        let msg = "a pattern's name is 1 to 64 letters, digits, `_`, `-` and `.`";
        p.invalid(name_at, msg.to_string());
        return None;
    }
    let taken = Builtin::ALL.iter().any(|b| b.as_str() == name)
        || dlp.detectors.iter().any(|d| &*d.name == name);
    if taken {
        let msg = format!("a pattern named `{name}` is there already (or is a built-in detector)");
        p.invalid(name_at, msg);
        return None;
    }
    match Detector::compile(name, "pattern", regex) {
        Ok(d) => Some(d),
        Err(e) => {
            let kind = match e {
                PatternError::Unbounded(_) => ProblemKind::UnboundedPattern {
                    name: name.to_string(),
                },
                _ => ProblemKind::Invalid,
            };
            p.push(
                regex_at,
                kind,
                Some(regex),
                format!("pattern `{name}`: {e}"),
            );
            None
        }
    }
}
