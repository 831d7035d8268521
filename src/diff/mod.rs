//! `egress-proxy diff OLD NEW`: what a policy change opens and closes
//! (docs/reference/command-line.md, docs/guides/policy-review.md). Two organization files,
//! or two request policies, are compiled as the proxy compiles them and compared setting
//! by setting; each change is marked widening or narrowing by the covering relation,
//! never by the text, so reordering or reformatting is no change.
//!
//! - [`change`]: a [`Change`], its [`Effect`] and [`Kind`] (the stable ids).
//! - `domains`: one entry looked up in the other side's list through covering.
//! - `lists`: allowed and denied domains, CIDRs, a whole request policy.
//! - `settings`: the organization file's settings, one function each.
//! - `locate`: where a setting sits in NEW.
//! - [`format`](mod@format) and [`sarif`]: the outputs.

use std::path::Path;

pub mod change;
mod domains;
pub mod format;
mod lists;
mod locate;
pub mod sarif;
mod settings;

pub use change::{Change, Effect, Kind};

use crate::policy::{OrgPolicy, PolicyError, RequestPolicy};
use lists::{Request, RequestAt};
use locate::Locator;

/// A usage or I/O error, or a file that does not load (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum DiffError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Policy(#[from] PolicyError),
    #[error("{old} is {} and {new} is {}: diff compares two of the same kind", .old_kind.as_str(), .new_kind.as_str())]
    Mixed {
        old: String,
        old_kind: FileKind,
        new: String,
        new_kind: FileKind,
    },
}

/// Which kind of policy file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FileKind {
    Org,
    Request,
}

impl FileKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FileKind::Org => "an organization policy",
            FileKind::Request => "a request policy",
        }
    }

    /// As lint tells them: by extension, else a text starting with `{` is JSON.
    fn of(path: &Path, text: &str) -> FileKind {
        match path.extension().and_then(|e| e.to_str()) {
            Some("toml") => FileKind::Org,
            Some("json") => FileKind::Request,
            _ if text.trim_start().starts_with('{') => FileKind::Request,
            _ => FileKind::Org,
        }
    }
}

/// Every change from OLD to NEW.
#[derive(Debug, serde::Serialize)]
pub struct Diff {
    pub old: String,
    pub new: String,
    pub kind: FileKind,
    pub changes: Vec<Change>,
}

impl Diff {
    pub fn count(&self, effect: Effect) -> usize {
        self.changes.iter().filter(|c| c.effect == effect).count()
    }

    pub fn widens(&self) -> bool {
        self.count(Effect::Widening) > 0
    }
}

fn read(path: &Path) -> Result<String, DiffError> {
    std::fs::read_to_string(path).map_err(|source| DiffError::Io {
        path: path.display().to_string(),
        source,
    })
}

/// Compare the files at `old` and `new`.
pub fn run(old: &Path, new: &Path) -> Result<Diff, DiffError> {
    let (old_text, new_text) = (read(old)?, read(new)?);
    let (old_kind, new_kind) = (FileKind::of(old, &old_text), FileKind::of(new, &new_text));
    let (old_name, new_name) = (old.display().to_string(), new.display().to_string());
    if old_kind != new_kind {
        return Err(DiffError::Mixed {
            old: old_name,
            old_kind,
            new: new_name,
            new_kind,
        });
    }
    diff_texts(old_kind, (&old_text, &old_name), (&new_text, &new_name))
}

/// Compare two texts of `kind`, each with the name messages give it.
pub fn diff_texts(
    kind: FileKind,
    (old_text, old_name): (&str, &str),
    (new_text, new_name): (&str, &str),
) -> Result<Diff, DiffError> {
    let mut changes = match kind {
        FileKind::Org => {
            let old = OrgPolicy::from_toml(old_text, old_name)?;
            let new = OrgPolicy::compile_toml(new_text, new_name);
            let spans = new.spans.clone();
            let new = new.into_result()?;
            settings::org(&old, &new, &spans, &Locator::toml(new_text))
        }
        FileKind::Request => {
            let old = RequestPolicy::from_json(old_text, old_name)?;
            let new = RequestPolicy::compile_json(new_text, new_name);
            let spans = new.spans.clone();
            let new = new.into_result()?;
            request_files(&old, &new, &spans, &Locator::Json(new_text))
        }
    };
    // Positions in one pass over NEW: line_col from the start for each change would
    // cost the file's length per change.
    let mut by_offset: Vec<usize> = (0..changes.len()).collect();
    by_offset.sort_by_key(|&i| changes[i].at);
    let mut lines = Lines::new(new_text);
    for i in by_offset {
        if let Some(at) = changes[i].at {
            (changes[i].line, changes[i].column) = lines.at(at);
        }
    }
    Ok(Diff {
        old: old_name.to_string(),
        new: new_name.to_string(),
        kind,
        changes,
    })
}

/// 1-based line and column (in characters) of increasing byte offsets of a text.
struct Lines<'t> {
    text: &'t str,
    /// The offset reached, and the line and the start of the line it is on.
    at: usize,
    line: usize,
    line_start: usize,
}

impl<'t> Lines<'t> {
    fn new(text: &'t str) -> Lines<'t> {
        Lines {
            text,
            at: 0,
            line: 1,
            line_start: 0,
        }
    }

    /// Where `offset` is; offsets must not decrease from one call to the next.
    fn at(&mut self, offset: usize) -> (usize, usize) {
        let mut offset = offset.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        if offset > self.at {
            let skipped = &self.text[self.at..offset];
            if let Some(last) = skipped.rfind('\n') {
                self.line += skipped.matches('\n').count();
                self.line_start = self.at + last + 1;
            }
            self.at = offset;
        }
        let column = self.text[self.line_start..offset].chars().count() + 1;
        (self.line, column)
    }
}

/// The ports of a request policy's port-less entries when no organization is named:
/// `0` stands for the organization's, whatever they are, so only a port-less entry
/// covers another (fail closed: `a.test:443` replacing `a.test` is reported).
const ORG_PORTS: [u16; 1] = [0];

fn request_files(
    old: &RequestPolicy,
    new: &RequestPolicy,
    spans: &crate::policy::RequestSpans,
    loc: &Locator,
) -> Vec<Change> {
    let sides = (
        Request {
            policy: old,
            ports: &ORG_PORTS,
        },
        Request {
            policy: new,
            ports: &ORG_PORTS,
        },
    );
    let at = RequestAt {
        spans,
        type_at: loc.key(&["type"]),
        cidrs_at: loc.key(&["type"]),
    };
    let extra = crate::policy::DomainSet::default();
    lists::request("", sides, (&[], &[]), &extra, &at)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod law_tests;
