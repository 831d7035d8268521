//! Secret detectors (docs/reference/dlp.md, "Secret detectors"): the built-in detectors
//! of the vendors' documented token formats, and the organization's and request
//! policies' own patterns, each a regular expression whose matches are at most
//! [`MAX_MATCH`] bytes long, so that a stream scanned piece by piece need hold back no
//! more than that. Compiled here, once, for the proxy to scan with; which bytes are
//! scanned, and what a match does, are the proxy's.

use std::fmt;
use std::sync::{Arc, LazyLock};

use regex::bytes::{Regex, RegexBuilder};
use serde::Deserialize;

/// The longest match a detector may have, in bytes.
pub const MAX_MATCH: usize = 256;

/// What a detector's match does: `[dlp] action`, or a request policy's `"dlp"`'s.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DlpAction {
    /// Refuse what carries it (`secret_detected`), the default.
    #[default]
    Refuse,
    /// Let it through and record it (`egress.flagged`).
    Report,
}

impl DlpAction {
    /// As the files and the metrics spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            DlpAction::Refuse => "refuse",
            DlpAction::Report => "report",
        }
    }
}

/// A built-in detector, by the name `detectors = [...]` gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Builtin {
    /// `AKIA` or `ASIA` and 16 upper-case letters and digits.
    AwsAccessKeyId,
    /// `ghp_`, `gho_`, `ghu_`, `ghs_`, `ghr_` and 36 letters and digits, or
    /// `github_pat_` and 82 letters, digits and `_`.
    GithubToken,
    /// A PEM private key's first line (`-----BEGIN RSA PRIVATE KEY-----` ...).
    PrivateKey,
    /// `xoxb-`, `xoxp-`, `xoxa-`, `xoxe-`, `xoxo-`, `xoxr-`, `xoxs-` tokens.
    SlackToken,
    /// `AIza` and 35 letters, digits, `-` and `_`.
    GoogleApiKey,
    /// `sk_live_` or `rk_live_` and at least 24 letters and digits.
    StripeSecretKey,
    /// `sk-` and 48 letters and digits, or `sk-proj-`, `sk-svcacct-`, `sk-admin-` and
    /// at least 40 letters, digits, `-` and `_`.
    OpenaiApiKey,
    /// A JSON Web Token's header and the start of its payload (`eyJ...`.`eyJ...`).
    Jwt,
}

impl Builtin {
    /// Every built-in detector.
    pub const ALL: [Builtin; 8] = [
        Builtin::AwsAccessKeyId,
        Builtin::GithubToken,
        Builtin::PrivateKey,
        Builtin::SlackToken,
        Builtin::GoogleApiKey,
        Builtin::StripeSecretKey,
        Builtin::OpenaiApiKey,
        Builtin::Jwt,
    ];

    /// Its name, as files and records spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Builtin::AwsAccessKeyId => "aws_access_key_id",
            Builtin::GithubToken => "github_token",
            Builtin::PrivateKey => "private_key",
            Builtin::SlackToken => "slack_token",
            Builtin::GoogleApiKey => "google_api_key",
            Builtin::StripeSecretKey => "stripe_secret_key",
            Builtin::OpenaiApiKey => "openai_api_key",
            Builtin::Jwt => "jwt",
        }
    }

    /// Its regular expression: bounded, without `\b` (a boundary a chunk's edge would
    /// fake), matching the value as it is.
    fn source(self) -> &'static str {
        match self {
            Builtin::AwsAccessKeyId => r"(?:AKIA|ASIA)[A-Z0-9]{16}",
            Builtin::GithubToken => r"gh[pousr]_[A-Za-z0-9]{36}|github_pat_[A-Za-z0-9_]{82}",
            Builtin::PrivateKey => {
                r"-----BEGIN (?:RSA |EC |DSA |OPENSSH |ENCRYPTED |PGP )?PRIVATE KEY(?: BLOCK)?-----"
            }
            Builtin::SlackToken => r"xox[abeoprs]-[0-9]{6,20}-[0-9A-Za-z-]{8,100}",
            Builtin::GoogleApiKey => r"AIza[0-9A-Za-z_-]{35}",
            Builtin::StripeSecretKey => r"[sr]k_live_[0-9A-Za-z]{24,99}",
            Builtin::OpenaiApiKey => {
                r"sk-(?:(?:proj|svcacct|admin)-[A-Za-z0-9_-]{40,200}|[A-Za-z0-9]{48})"
            }
            Builtin::Jwt => r"eyJ[A-Za-z0-9_-]{8,200}\.eyJ[A-Za-z0-9_-]{8}",
        }
    }

    /// Its detector, compiled once for the whole process.
    pub fn detector(self) -> Detector {
        static COMPILED: LazyLock<Vec<Detector>> = LazyLock::new(|| {
            Builtin::ALL
                .iter()
                .map(|b| {
                    let name = b.as_str();
                    Detector::compile(name, "detector", b.source())
                        .expect("the built-in detectors are bounded regexes")
                })
                .collect()
        });
        COMPILED[self as usize].clone()
    }
}

/// One detector: its name (the record's `dlp.id`), its kind (`detector` for a built-in,
/// `pattern` for a `[[dlp.patterns]]` entry), and its regex compiled twice: as written,
/// for bytes, and in either case, for names (which are case-insensitive).
#[derive(Clone)]
pub struct Detector {
    /// Its name.
    pub name: Arc<str>,
    /// `detector` or `pattern`.
    pub kind: &'static str,
    /// For bytes, as written.
    pub bytes: Regex,
    /// For names, in either case.
    pub names: Regex,
    /// Its longest match, in bytes (at most [`MAX_MATCH`]).
    pub longest: usize,
}

impl fmt::Debug for Detector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Detector({}, {})", self.name, self.kind)
    }
}

impl PartialEq for Detector {
    fn eq(&self, other: &Detector) -> bool {
        self.name == other.name && self.bytes.as_str() == other.bytes.as_str()
    }
}

impl Eq for Detector {}

/// Why a pattern is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PatternError {
    /// Not a regular expression the `regex` crate reads.
    Syntax(String),
    /// Its matches can be longer than [`MAX_MATCH`] bytes (`None`: unbounded).
    Unbounded(Option<usize>),
    /// It matches the empty string, so it would match everything.
    Empty,
}

impl fmt::Display for PatternError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PatternError::Syntax(e) => write!(f, "not a regular expression: {e}"),
            PatternError::Unbounded(None) => write!(
                f,
                "its matches can be of any length (`+`, `*` or `{{n,}}`): bound every repetition so that no match is longer than {MAX_MATCH} bytes"
            ),
            PatternError::Unbounded(Some(n)) => write!(
                f,
                "its matches can be {n} bytes long: no match may be longer than {MAX_MATCH} bytes"
            ),
            PatternError::Empty => f.write_str("it matches the empty string, so it would match every request"),
        }
    }
}

impl Detector {
    /// `source` compiled as the detector `name` of `kind`, if its matches are bounded.
    pub fn compile(name: &str, kind: &'static str, source: &str) -> Result<Detector, PatternError> {
        let hir = regex_syntax::ParserBuilder::new()
            .utf8(false)
            .build()
            .parse(source)
            .map_err(|e| PatternError::Syntax(one_line(&e.to_string())))?;
        let props = hir.properties();
        let longest = match props.maximum_len() {
            Some(n) if n <= MAX_MATCH => n,
            other => return Err(PatternError::Unbounded(other)),
        };
        if props.minimum_len() == Some(0) {
            return Err(PatternError::Empty);
        }
        let syntax = |e: regex::Error| PatternError::Syntax(one_line(&e.to_string()));
        let bytes = RegexBuilder::new(source).build().map_err(syntax)?;
        // Names are ASCII (internationalised ones in their `xn--` form): ASCII case
        // folding, which never makes a match longer. A pattern that needs Unicode
        // (a literal `é`) keeps it, folded the same way.
        let names = RegexBuilder::new(source)
            .case_insensitive(true)
            .unicode(false)
            .build()
            .or_else(|_| RegexBuilder::new(source).case_insensitive(true).build())
            .map_err(syntax)?;
        Ok(Detector {
            name: Arc::from(name),
            kind,
            bytes,
            names,
            longest,
        })
    }
}

/// The regex crate's multi-line error, on one line.
fn one_line(s: &str) -> String {
    s.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// `[dlp]`, or a request policy's `"dlp"`: the detectors it adds (built-ins and
/// patterns, in the order written) and its action (`None`: not set; the organization's
/// default is `refuse`, a request level's is the level above's).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dlp {
    /// The detectors, built-in and patterns.
    pub detectors: Vec<Detector>,
    /// `action`, when written.
    pub action: Option<DlpAction>,
}

impl Dlp {
    /// Whether it sets nothing.
    pub fn is_empty(&self) -> bool {
        self.detectors.is_empty() && self.action.is_none()
    }
}

#[cfg(test)]
#[path = "dlp_tests.rs"]
mod tests;
