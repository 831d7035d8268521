//! What is wrong with a policy file: each [`Problem`] with its position and kind, and
//! every problem of one file as one [`PolicyError`].

use std::fmt;

use crate::host::EntryError;

/// One thing wrong with a policy file. Line and column are 1-based.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The line it is on (`None`: the file as a whole, or a policy without a text).
    pub line: Option<usize>,
    /// The column, counted in characters.
    pub column: Option<usize>,
    /// The entry it is about, as written, when it is about one.
    pub entry: Option<String>,
    /// What is wrong, worded for the person who wrote the file.
    pub message: String,
    /// What kind of problem it is.
    pub kind: ProblemKind,
}

/// What kind of problem, for readers (such as `lint`) that say more than the message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProblemKind {
    /// The text is not TOML or JSON at all: nothing else was read.
    Syntax,
    /// A key the format does not have: `key` in the table whose keys are `known`;
    /// `table` is where that table sits (`""` at the top, `shared_hosting.` ...).
    UnknownKey {
        /// Where the table sits.
        table: &'static str,
        /// The key as written.
        key: String,
        /// The keys the table has.
        known: &'static [&'static str],
    },
    /// An entry of the domain list `list` that is not a destination pattern.
    Domain {
        /// The list's name as messages give it (`allowed_domains` ...).
        list: String,
        /// Why the entry is refused.
        error: EntryError,
    },
    /// A field of an entry written as a table in the list `list` (`methods`, `paths`,
    /// `access`, `inspect`) that the format refuses; the entry is named by its `host`.
    Rule {
        /// The list's name as messages give it.
        list: String,
    },
    /// An entry of the CIDR list `list` that is not a CIDR.
    Cidr {
        /// The list's name as messages give it.
        list: String,
    },
    /// A `[[dlp.patterns]]` regex whose matches can be longer than 256 bytes
    /// (docs/reference/dlp.md): the stream could not be held back enough to see it.
    UnboundedPattern {
        /// The pattern's name.
        name: String,
    },
    /// The organization's `default_network_policy` names what the organization does not
    /// allow. Checked only when nothing else is wrong with the file.
    Widening,
    /// Any other value the format refuses: a missing key, a value of the wrong type, an
    /// unsupported version, a port out of range, an empty allowlist.
    Invalid,
}

/// Every problem found in one policy file. (Not derived with thiserror: its `source`
/// field name would be taken for the error's cause.)
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyError {
    /// The name of the file, as messages give it.
    pub source: String,
    /// Every problem found, in text order.
    pub problems: Vec<Problem>,
}

impl std::error::Error for PolicyError {}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            f.write_str(&self.source)?;
            if let Some(line) = p.line {
                write!(f, ":{line}")?;
                if let Some(column) = p.column {
                    write!(f, ":{column}")?;
                }
            }
            f.write_str(": ")?;
            if let Some(entry) = &p.entry {
                write!(f, "entry \"{entry}\": ")?;
            }
            f.write_str(&p.message)?;
        }
        Ok(())
    }
}

/// Collects the problems of one text, each at a byte offset of it.
pub(super) struct Problems<'t> {
    text: &'t str,
    list: Vec<(Option<usize>, Problem)>,
}

impl<'t> Problems<'t> {
    /// `text` is what offsets point into: empty when the policy came without a text.
    pub(super) fn new(text: &'t str) -> Problems<'t> {
        Problems {
            text,
            list: Vec::new(),
        }
    }

    /// A problem at byte offset `at` of the text (`None`: the file as a whole).
    pub(super) fn push(
        &mut self,
        at: Option<usize>,
        kind: ProblemKind,
        entry: Option<&str>,
        message: String,
    ) {
        self.push_at_line(at, at.map(|o| line_col(self.text, o)), kind, entry, message);
    }

    /// A problem at a line and column given by a parser.
    pub(super) fn push_at_line(
        &mut self,
        at: Option<usize>,
        position: Option<(usize, usize)>,
        kind: ProblemKind,
        entry: Option<&str>,
        message: String,
    ) {
        let (line, column) = position.unzip();
        let problem = Problem {
            line,
            column,
            entry: entry.map(str::to_string),
            message,
            kind,
        };
        self.list.push((at, problem));
    }

    /// Anything else the format refuses ([`ProblemKind::Invalid`]).
    pub(super) fn invalid(&mut self, at: Option<usize>, message: String) {
        self.push(at, ProblemKind::Invalid, None, message);
    }

    /// Whether nothing was found so far.
    pub(super) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// How many problems so far: a reader compares it before and after a part.
    pub(super) fn len(&self) -> usize {
        self.list.len()
    }

    /// The problems in the order of the text (those without a position keep theirs).
    pub(super) fn finish(mut self) -> Vec<Problem> {
        self.list.sort_by_key(|(at, _)| *at);
        self.list.into_iter().map(|(_, p)| p).collect()
    }
}

/// 1-based line and column (in characters) of a byte offset of `text`.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}
