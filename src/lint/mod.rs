//! `egress-proxy lint`: checks organization (TOML) and request (JSON) policy files before
//! any proxy loads them, and reports findings with a stable rule id, a severity and a
//! position, as text, JSON or SARIF 2.1.0.
//!
//! Lint does not read the files itself: the policy core's lenient compile gives it the
//! policy as far as it reads, where each entry was written, and every problem it found
//! (an unknown key, an invalid entry, a value of the wrong type); lint reports those
//! and runs its rules over the compiled policies. Every judgement of an entry (parsing,
//! covering, shared hosting, widening) is the policy core's.
//!
//! - [`rules`]: the rule table (ids, severities, descriptions).
//! - `problems`: the compiler's problems as findings.
//! - `entries`: the per-list rules shared by both file kinds.
//! - `credentials`: `credential-plain-http`, a credential's host open to plain HTTP.
//! - `org_file` / `request_file`: the rules of each file kind.
//! - `script`: the mixed-script (homograph) test.
//! - [`format`](mod@format) and [`sarif`]: the outputs.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::policy::line_col;
use crate::policy::OrgPolicy;

mod canaries;
mod credentials;
mod entries;
pub mod format;
mod org_file;
mod problems;
mod request_file;
pub mod rules;
pub mod sarif;
mod script;

pub use rules::{Rule, RuleId, RULES};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Said, never failing a run (not even with `--deny-warnings`).
    Info,
    Warning,
    Error,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One finding: which rule, how bad, where, what to do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub rule: RuleId,
    pub severity: Severity,
    pub file: String,
    /// 1-based.
    pub line: usize,
    /// 1-based, in characters.
    pub column: usize,
    pub message: String,
    /// A replacement for the entry, or what to change, where one helps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

/// What a lint run found.
#[derive(Debug, Default, Serialize)]
pub struct Report {
    pub files: Vec<String>,
    pub findings: Vec<Finding>,
    /// Said on standard error in text output: e.g. why `widens-org-policy` was not run.
    pub notes: Vec<String>,
}

impl Report {
    pub fn count(&self, severity: Severity) -> usize {
        self.findings
            .iter()
            .filter(|f| f.severity == severity)
            .count()
    }
}

/// A usage or I/O error: exit 2, unlike findings.
#[derive(Debug, thiserror::Error)]
pub enum LintError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("no policy files (.toml or .json) under {0}")]
    NoFiles(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Org,
    Request,
}

struct Input {
    path: PathBuf,
    name: String,
    kind: Kind,
    text: String,
}

/// Lint `paths` (files, or directories walked for `.toml` and `.json` files). With `org`,
/// request policies are checked against it (and it is linted too); without it, the one
/// organization file among the inputs is used if there is exactly one.
pub fn run(paths: &[PathBuf], org: Option<&Path>) -> Result<Report, LintError> {
    let mut files = Vec::new();
    for path in paths {
        let before = files.len();
        collect(path, true, &mut files)?;
        if files.len() == before {
            return Err(LintError::NoFiles(path.display().to_string()));
        }
    }
    if let Some(org) = org {
        let canon = |p: &Path| std::fs::canonicalize(p).ok();
        if !files.iter().any(|f| canon(f) == canon(org)) {
            files.insert(0, org.to_path_buf());
        }
    }
    let inputs = files.into_iter().map(read).collect::<Result<Vec<_>, _>>()?;
    let mut report = Report::default();
    let mut orgs: Vec<(PathBuf, OrgPolicy)> = Vec::new();
    for input in inputs.iter().filter(|i| i.kind == Kind::Org) {
        let (findings, policy) = org_file::lint(&input.name, &input.text);
        report.findings.extend(findings);
        orgs.push((input.path.clone(), policy));
    }
    let chosen = choose_org(org, &orgs, &mut report);
    for input in inputs.iter().filter(|i| i.kind == Kind::Request) {
        let findings = request_file::lint(&input.name, &input.text, chosen);
        report.findings.extend(findings);
    }
    report.files = inputs.iter().map(|i| i.name.clone()).collect();
    report
        .findings
        .sort_by(|a, b| (&a.file, a.line, a.column).cmp(&(&b.file, b.line, b.column)));
    Ok(report)
}

fn choose_org<'a>(
    given: Option<&Path>,
    orgs: &'a [(PathBuf, OrgPolicy)],
    report: &mut Report,
) -> Option<&'a OrgPolicy> {
    let canon = |p: &Path| std::fs::canonicalize(p).ok();
    if let Some(given) = given {
        return orgs
            .iter()
            .find(|(p, _)| canon(p) == canon(given))
            .map(|(_, o)| o);
    }
    match orgs {
        [(_, only)] => Some(only),
        [] => {
            report.notes.push(
                "widens-org-policy not checked: no organization policy (pass --org FILE)".into(),
            );
            None
        }
        _ => {
            report.notes.push(
                "widens-org-policy not checked: several organization policies, pass --org FILE"
                    .into(),
            );
            None
        }
    }
}

/// Files under `path`: `.toml` and `.json` files of directories (sorted, hidden entries
/// skipped); a file named directly is always taken.
fn collect(path: &Path, named: bool, out: &mut Vec<PathBuf>) -> Result<(), LintError> {
    let io = |source| LintError::Io {
        path: path.display().to_string(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(io)?;
    if !meta.is_dir() {
        let ext = path.extension().and_then(|e| e.to_str());
        if named || matches!(ext, Some("toml" | "json")) {
            out.push(path.to_path_buf());
        }
        return Ok(());
    }
    let mut children = std::fs::read_dir(path)
        .map_err(io)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(io)?;
    children.sort();
    for child in children {
        let hidden = child
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with('.'));
        if !hidden {
            collect(&child, false, out)?;
        }
    }
    Ok(())
}

fn read(path: PathBuf) -> Result<Input, LintError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(&path).map_err(|source| LintError::Io {
        path: name.clone(),
        source,
    })?;
    let kind = match path.extension().and_then(|e| e.to_str()) {
        Some("toml") => Kind::Org,
        Some("json") => Kind::Request,
        _ if text.trim_start().starts_with('{') => Kind::Request,
        _ => Kind::Org,
    };
    Ok(Input {
        path,
        name,
        kind,
        text,
    })
}

/// Builds findings for one file.
pub(crate) struct Sink<'a> {
    pub file: &'a str,
    pub text: &'a str,
    pub findings: Vec<Finding>,
}

impl<'a> Sink<'a> {
    pub(crate) fn new(file: &'a str, text: &'a str) -> Sink<'a> {
        Sink {
            file,
            text,
            findings: Vec::new(),
        }
    }

    /// A finding at byte `offset` with the rule's default severity.
    pub(crate) fn at(&mut self, rule: RuleId, offset: usize, message: String, fix: Option<String>) {
        let severity = rule.rule().severity;
        self.with(rule, severity, offset, message, fix);
    }

    pub(crate) fn with(
        &mut self,
        rule: RuleId,
        severity: Severity,
        offset: usize,
        message: String,
        fix: Option<String>,
    ) {
        let (line, column) = line_col(self.text, offset);
        self.at_line(rule, severity, (line, column), message, fix);
    }

    pub(crate) fn at_line(
        &mut self,
        rule: RuleId,
        severity: Severity,
        (line, column): (usize, usize),
        message: String,
        fix: Option<String>,
    ) {
        // One finding, one line: multi-line parser messages are joined.
        let message = message
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join("; ");
        self.findings.push(Finding {
            rule,
            severity,
            file: self.file.to_string(),
            line,
            column,
            message,
            fix,
        });
    }
}
