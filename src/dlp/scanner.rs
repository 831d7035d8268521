//! One pass over a client's bytes for every canary in force (docs/reference/dlp.md,
//! "How it is looked for"): a fingerprint index of short windows of every form, probed
//! every few bytes, and a full comparison only where a probe hits. It keeps the values,
//! never their forms: a session's four canaries take under 2 KB, and a scan costs a
//! read, a multiplication and a bit test every 4 to 16 bytes, whatever the number of
//! canaries.
//!
//! Why a probe every `stride` bytes is enough: every form is at least
//! [`WINDOW`]` + stride - 1` bytes long, so wherever a form starts, one probe position
//! (a multiple of `stride` from the start of the bytes) lies within its first `stride`
//! bytes and its window of [`WINDOW`] bytes lies inside the form. The index holds each
//! form's windows at its first `stride` offsets.

use std::sync::Arc;

use super::forms::{forms, name_forms, Encoding, Form};
use super::index::{Index, WINDOW};
use super::{Canary, FoundIn, Hit};

/// The longest probe stride of [`Scanner::new`] (the canaries every request is scanned
/// for): as long as the shortest form allows (a 40-byte value's, 16), at most this.
const FAST_STRIDE: usize = 16;
/// The probe stride of [`Scanner::compact`] (a session's): half the index of the fast one.
const COMPACT_STRIDE: usize = 4;

/// Every canary in force, ready to look for: in bytes a client sends, and in names.
#[derive(Default)]
pub(crate) struct Scanner {
    canaries: Vec<Canary>,
    index: Index,
    /// Whether its index is the compact one (a probe every 4 bytes).
    compact: bool,
    /// The longest form in bytes a client sends: a stream scanned piece by piece holds
    /// back one byte less than this, so no match is ever cut in two unseen.
    longest: usize,
}

impl std::fmt::Debug for Scanner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the values: ids only.
        let ids: Vec<&str> = self.canaries.iter().map(|c| &*c.id).collect();
        f.debug_struct("Scanner").field("canaries", &ids).finish()
    }
}

/// Where to look: bytes a client sends (plain and base64 forms match as they are), or a
/// name (every form in either case, and the forms a name carries across its labels).
#[derive(Clone, Copy, PartialEq, Eq)]
enum In {
    Bytes,
    Name,
}

impl Scanner {
    /// The index for `canaries`, for those every request is scanned for: a probe every 9
    /// to 16 bytes, and a filter large enough (16 KiB at least) that a probe almost never
    /// goes past it without a match.
    pub(crate) fn new(canaries: &[Canary]) -> Scanner {
        Scanner::with(canaries, FAST_STRIDE, true)
    }

    /// The index for `canaries` in its compact form (a probe every 4 bytes, a filter of
    /// a byte a window): for a session's, which there may be thousands of.
    pub(crate) fn compact(canaries: &[Canary]) -> Scanner {
        Scanner::with(canaries, COMPACT_STRIDE, false)
    }

    fn with(canaries: &[Canary], stride: usize, large: bool) -> Scanner {
        let all: Vec<Vec<Form>> = canaries.iter().map(|c| all_forms(c.value())).collect();
        let shortest = all.iter().flatten().map(|f| f.bytes.len()).min();
        // Every value is 16 bytes at least (`check_value`), so every form is too; a
        // shorter one only narrows the stride.
        let stride = shortest.map_or(stride, |s| stride.min((s + 1).saturating_sub(WINDOW)));
        let windows = all.iter().enumerate().flat_map(|(i, forms)| {
            forms.iter().flat_map(move |form| {
                (0..stride)
                    .filter(|o| o + WINDOW <= form.bytes.len())
                    .map(move |o| (&form.bytes[o..o + WINDOW], i))
            })
        });
        let longest = canaries
            .iter()
            .flat_map(|c| forms(c.value()))
            .map(|f| f.bytes.len())
            .max()
            .unwrap_or(0);
        Scanner {
            canaries: canaries.to_vec(),
            index: Index::build(windows, stride.max(1), large),
            compact: !large,
            longest,
        }
    }

    /// One scanner of the fast kind ([`Scanner::new`]) for the canaries of all of
    /// `scanners`, in their order: for a long stream, where a probe every 9 to 16 bytes
    /// in one index pays for building it. The one scanner itself when it is fast already.
    pub(crate) fn merged(scanners: &[Arc<Scanner>]) -> Arc<Scanner> {
        if let [one] = scanners {
            if !one.compact {
                return one.clone();
            }
        }
        let all: Vec<Canary> = scanners.iter().flat_map(|s| s.canaries.clone()).collect();
        Arc::new(Scanner::new(&all))
    }

    /// The id and kind of each canary, in order: what may be shown of them.
    pub(crate) fn ids(&self) -> impl Iterator<Item = (&str, &str)> {
        self.canaries.iter().map(|c| (&*c.id, &*c.kind))
    }

    /// The bytes a stream scanned piece by piece must hold back (docs/reference/dlp.md):
    /// the longest form less one byte; 0 with nothing to look for.
    pub(crate) fn hold_back(&self) -> usize {
        self.longest.saturating_sub(1)
    }

    /// The bytes its index takes.
    #[cfg(test)]
    pub(crate) fn memory_usage(&self) -> usize {
        self.index.memory_usage()
    }

    /// Whether there is nothing to look for (then no scan does any work).
    pub(crate) fn is_empty(&self) -> bool {
        self.canaries.is_empty()
    }

    fn hit(&self, (canary, encoding): (usize, Encoding), found_in: FoundIn) -> Hit {
        let c = &self.canaries[canary];
        Hit {
            id: c.id.clone(),
            kind: c.kind.clone(),
            encoding,
            found_in,
            by: super::By::Canary,
        }
    }

    /// The first canary `bytes` carry, in any of its forms.
    pub(crate) fn scan(&self, bytes: &[u8], found_in: FoundIn) -> Option<Hit> {
        let found = self.find(bytes, In::Bytes)?;
        Some(self.hit(found, found_in))
    }

    /// The first canary a name carries: in any form, in either case, as it is or across
    /// its labels once the dots are removed.
    pub(crate) fn scan_name(&self, name: &str, found_in: FoundIn) -> Option<Hit> {
        if self.is_empty() {
            return None;
        }
        if let Some(found) = self.find(name.as_bytes(), In::Name) {
            return Some(self.hit(found, found_in));
        }
        let dotless: Vec<u8> = name.bytes().filter(|&b| b != b'.').collect();
        let found = self.find(&dotless, In::Name)?;
        Some(self.hit(found, found_in))
    }

    /// The first canary and encoding found where a probe hits, in probe order.
    fn find(&self, bytes: &[u8], within: In) -> Option<(usize, Encoding)> {
        let stride = self.index.stride();
        self.index
            .probe(bytes, |at: usize, of: &dyn Fn(usize) -> bool| {
                let mut maybe = self.canaries.iter().enumerate().filter(|(i, _)| of(*i));
                maybe.find_map(|(i, c)| Some((i, verify(c.value(), bytes, at, stride, within)?)))
            })
    }
}

/// Every form of `value` the index holds windows of: the forms in bytes, then a name's.
fn all_forms(value: &[u8]) -> Vec<Form> {
    let mut all = forms(value);
    for form in name_forms(value) {
        if !all.iter().any(|f| f.bytes == form.bytes) {
            all.push(form);
        }
    }
    all
}

/// The encoding of `value` that `bytes` hold starting within the `stride` bytes up to
/// `at`, if any: each form compared whole (only here are the forms made again).
fn verify(value: &[u8], bytes: &[u8], at: usize, stride: usize, within: In) -> Option<Encoding> {
    let mut candidates = forms(value);
    if within == In::Name {
        candidates.extend(name_forms(value));
    }
    let starts = at.saturating_sub(stride - 1)..=at;
    candidates.iter().find_map(|form| {
        let n = form.bytes.len();
        let either_case = form.either_case || within == In::Name;
        starts
            .clone()
            .filter_map(|s| bytes.get(s..s + n))
            .any(|seen| match either_case {
                true => seen.eq_ignore_ascii_case(&form.bytes),
                false => seen == &form.bytes[..],
            })
            .then_some(form.encoding)
    })
}
