//! One pass over a client's bytes for every canary in force (docs/reference/dlp.md):
//! the forms of every value in automata built once per policy load (`aho-corasick`),
//! so the cost of a scan grows with the bytes, not with the number of canaries.

use std::sync::Arc;

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, AhoCorasickKind, MatchKind};

use super::forms::{forms, name_forms, Encoding};
use super::{Canary, FoundIn, Hit};

/// The most canaries [`Scanner::new`] builds DFAs for.
pub(super) const FAST_UP_TO: usize = 32;

/// An automaton and, for each of its patterns, the canary and the encoding it stands for.
struct Set {
    automaton: AhoCorasick,
    of: Vec<(usize, Encoding)>,
}

impl Set {
    fn build(
        patterns: Vec<(Vec<u8>, usize, Encoding)>,
        either_case: bool,
        kind: Option<AhoCorasickKind>,
    ) -> Option<Set> {
        if patterns.is_empty() {
            return None;
        }
        let automaton = AhoCorasickBuilder::new()
            .kind(kind)
            .ascii_case_insensitive(either_case)
            .match_kind(MatchKind::LeftmostFirst)
            .build(patterns.iter().map(|(bytes, _, _)| bytes))
            .expect("a canary's forms are short literals");
        let of = patterns.into_iter().map(|(_, c, e)| (c, e)).collect();
        Some(Set { automaton, of })
    }

    fn find(&self, bytes: &[u8]) -> Option<(usize, Encoding)> {
        let found = self.automaton.find(bytes)?;
        Some(self.of[found.pattern().as_usize()])
    }
}

/// Every canary in force, ready to look for: in bytes a client sends, and in names.
#[derive(Default)]
pub(crate) struct Scanner {
    ids: Vec<(Arc<str>, Arc<str>)>,
    /// Forms whose letters match as they are (plain, base64).
    exact: Option<Set>,
    /// Forms whose letters match in either case (hexadecimal, percent-encoded).
    folded: Option<Set>,
    /// Every form, either case, for names (which are case-insensitive), and the forms a
    /// name carries across its labels.
    names: Option<Set>,
    /// The longest form in bytes a client sends: a stream scanned piece by piece holds
    /// back one byte less than this, so no match is ever cut in two unseen.
    longest: usize,
}

impl std::fmt::Debug for Scanner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the values: ids only.
        let ids: Vec<&str> = self.ids.iter().map(|(id, _)| &**id).collect();
        f.debug_struct("Scanner").field("canaries", &ids).finish()
    }
}

impl Scanner {
    /// The automata for `canaries`, for those every request is scanned for: DFAs (about
    /// 0.2 MB a canary, scanned about twice as fast as the crate's own pick, measured on
    /// JSON and on base64 text) up to [`FAST_UP_TO`] canaries; past that, whatever
    /// the crate picks, so that a long values file does not take gigabytes.
    pub(crate) fn new(canaries: &[Canary]) -> Scanner {
        let kind = (canaries.len() <= FAST_UP_TO).then_some(AhoCorasickKind::DFA);
        Scanner::with_kind(canaries, kind)
    }

    /// The automata for `canaries` in their compact form (a contiguous NFA: about a
    /// twentieth of the memory, scanned a little slower): for a session's, which there
    /// may be thousands of.
    pub(crate) fn compact(canaries: &[Canary]) -> Scanner {
        Scanner::with_kind(canaries, Some(AhoCorasickKind::ContiguousNFA))
    }

    fn with_kind(canaries: &[Canary], kind: Option<AhoCorasickKind>) -> Scanner {
        let (mut exact, mut folded, mut names) = (Vec::new(), Vec::new(), Vec::new());
        let mut longest = 0;
        for (i, canary) in canaries.iter().enumerate() {
            for form in forms(canary.value()) {
                longest = longest.max(form.bytes.len());
                names.push((form.bytes.clone(), i, form.encoding));
                match form.either_case {
                    true => folded.push((form.bytes, i, form.encoding)),
                    false => exact.push((form.bytes, i, form.encoding)),
                }
            }
            for form in name_forms(canary.value()) {
                names.push((form.bytes, i, form.encoding));
            }
        }
        Scanner {
            ids: canaries
                .iter()
                .map(|c| (c.id.clone(), c.kind.clone()))
                .collect(),
            exact: Set::build(exact, false, kind),
            folded: Set::build(folded, true, kind),
            names: Set::build(names, true, kind),
            longest,
        }
    }

    /// The id and kind of each canary, in order: what may be shown of them.
    pub(crate) fn ids(&self) -> impl Iterator<Item = (&str, &str)> {
        self.ids.iter().map(|(id, kind)| (&**id, &**kind))
    }

    /// The bytes a stream scanned piece by piece must hold back (docs/reference/dlp.md):
    /// the longest form less one byte; 0 with nothing to look for.
    pub(crate) fn hold_back(&self) -> usize {
        self.longest.saturating_sub(1)
    }

    /// The bytes its automata take.
    #[cfg(test)]
    pub(crate) fn memory_usage(&self) -> usize {
        [&self.exact, &self.folded, &self.names]
            .iter()
            .filter_map(|s| s.as_ref())
            .map(|s| s.automaton.memory_usage())
            .sum()
    }

    /// Whether there is nothing to look for (then no scan does any work).
    pub(crate) fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    fn hit(&self, (canary, encoding): (usize, Encoding), found_in: FoundIn) -> Hit {
        let (id, kind) = &self.ids[canary];
        Hit {
            id: id.clone(),
            kind: kind.clone(),
            encoding,
            found_in,
            by: super::By::Canary,
        }
    }

    /// The first canary `bytes` carry, in any of its forms.
    pub(crate) fn scan(&self, bytes: &[u8], found_in: FoundIn) -> Option<Hit> {
        let found = self
            .exact
            .as_ref()
            .and_then(|s| s.find(bytes))
            .or_else(|| self.folded.as_ref().and_then(|s| s.find(bytes)))?;
        Some(self.hit(found, found_in))
    }

    /// The first canary a name carries: in any form, in either case, as it is or across
    /// its labels once the dots are removed.
    pub(crate) fn scan_name(&self, name: &str, found_in: FoundIn) -> Option<Hit> {
        let names = self.names.as_ref()?;
        if let Some(found) = names.find(name.as_bytes()) {
            return Some(self.hit(found, found_in));
        }
        let dotless: Vec<u8> = name.bytes().filter(|&b| b != b'.').collect();
        names.find(&dotless).map(|found| self.hit(found, found_in))
    }
}
