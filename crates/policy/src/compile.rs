//! Policy text -> validated, compiled policies: the only thing the proxy sees, and the
//! only place that makes them.
//!
//! Every compile is lenient: it reads the whole file, leaves out what is invalid, and
//! returns the policy with the position of each entry ([`OrgSpans`], [`RequestSpans`])
//! and every [`Problem`] found ([`Compiled`]). The loaders ([`OrgPolicy::from_toml`],
//! [`RequestPolicy::from_json`]) are that compile, refused if it found any problem; so
//! `lint` (which reads the lenient result) and the proxy can never disagree on a file.
//!
//! - `toml` / `json`: each syntax as a `node::Node`; `json` finds the positions
//!   serde_json does not keep.
//! - `node`: typed reads of a node, worded as serde words its errors.
//! - `org` / `request`: the two kinds of file, and their entry lists.
//! - `problems`: [`Problem`], [`PolicyError`].

use crate::compiled::{OrgPolicy, OrgSpans, RequestPolicy, RequestSpans};

mod credentials;
mod dlp;
mod entry;
mod json;
mod limits;
mod node;
mod org;
mod problems;
mod request;
mod toml;

pub use problems::{line_col, PolicyError, Problem, ProblemKind};

/// What a lenient compile gives: the policy as far as the text reads (invalid entries
/// left out), where its entries were written, and every problem found, in text order.
#[derive(Clone, Debug)]
pub struct Compiled<P, S> {
    /// The name of the file, as messages give it.
    pub source: String,
    /// The policy as far as the text reads.
    pub policy: P,
    /// Where each entry of `policy` was written.
    pub spans: S,
    /// Every problem found, in text order; empty when the file is valid.
    pub problems: Vec<Problem>,
}

impl<P, S> Compiled<P, S> {
    /// The policy when nothing is wrong with the file; otherwise every problem.
    pub fn into_result(self) -> Result<P, PolicyError> {
        if self.problems.is_empty() {
            Ok(self.policy)
        } else {
            Err(PolicyError {
                source: self.source,
                problems: self.problems,
            })
        }
    }
}

impl OrgPolicy {
    /// Compile an organization policy (TOML) leniently; `source` names the file.
    pub fn compile_toml(text: &str, source: &str) -> Compiled<OrgPolicy, OrgSpans> {
        let mut p = problems::Problems::new(text);
        let (policy, spans) = match toml::parse(text, &mut p) {
            Some(doc) => org::compile(toml::Toml::Item(doc.as_item()), source, &mut p),
            None => (OrgPolicy::empty(source), OrgSpans::default()),
        };
        Compiled {
            source: source.to_string(),
            policy,
            spans,
            problems: p.finish(),
        }
    }

    /// Load an organization policy; `source` names the file in messages.
    pub fn from_toml(text: &str, source: &str) -> Result<OrgPolicy, PolicyError> {
        OrgPolicy::compile_toml(text, source).into_result()
    }
}

impl RequestPolicy {
    /// Compile a request policy (JSON) leniently; `source` names it.
    pub fn compile_json(text: &str, source: &str) -> Compiled<RequestPolicy, RequestSpans> {
        let mut p = problems::Problems::new(text);
        let compiled = json::parse(text, &mut p).map(|value| {
            let pos = json::positions(text);
            json::duplicate_keys(&pos, &mut p);
            let node = json::Json {
                value: &value,
                pos: Some(&pos),
            };
            request::compile_document(node, &mut p)
        });
        // A text that does not read allows nothing.
        let (policy, spans) =
            compiled.unwrap_or_else(|| (RequestPolicy::Disabled, RequestSpans::default()));
        Compiled {
            source: source.to_string(),
            policy,
            spans,
            problems: p.finish(),
        }
    }

    /// Load a request policy from JSON text; `source` names it in messages.
    pub fn from_json(text: &str, source: &str) -> Result<RequestPolicy, PolicyError> {
        RequestPolicy::compile_json(text, source).into_result()
    }

    /// Load a request policy from a JSON value (no positions in messages).
    pub fn from_value(v: &serde_json::Value, source: &str) -> Result<RequestPolicy, PolicyError> {
        let mut p = problems::Problems::new("");
        let node = json::Json {
            value: v,
            pos: None,
        };
        let (policy, spans) = request::compile_document(node, &mut p);
        Compiled {
            source: source.to_string(),
            policy,
            spans,
            problems: p.finish(),
        }
        .into_result()
    }
}

#[cfg(test)]
#[path = "compile_tests.rs"]
mod tests;

#[cfg(test)]
mod lenient_tests;
