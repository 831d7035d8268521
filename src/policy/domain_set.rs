//! [`DomainSet`]: compiled domain entries with an index by name, so a lookup costs one
//! hash probe per label of the host, whatever the number of entries.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::policy::host::{DomainEntry, DomainPattern, HostName};

/// Compiled domain entries, indexed so a lookup costs one probe per label of the host.
#[derive(Clone, Debug, Default)]
pub struct DomainSet {
    entries: Vec<DomainEntry>,
    exact: NameMap,
    subtree: NameMap,
    /// Bit `d` is set when some subtree base has `d` labels (127 and more share bit 127):
    /// a lookup probes only the host's suffixes of those depths.
    subtree_depths: u128,
}

/// Names to entry indices. The keys are the policy's own entries, never the client's,
/// so a fast unkeyed hash (FNV-1a) is safe here: a client can probe but not insert.
type NameMap = HashMap<String, Vec<usize>, BuildHasherDefault<Fnv>>;

/// FNV-1a, 64-bit: a few instructions per byte for the short keys host names are.
#[derive(Default)]
pub struct Fnv(u64);

impl Hasher for Fnv {
    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

impl PartialEq for DomainSet {
    fn eq(&self, other: &Self) -> bool {
        self.entries == other.entries
    }
}

impl Eq for DomainSet {}

impl DomainSet {
    pub fn from_entries(entries: Vec<DomainEntry>) -> DomainSet {
        let mut set = DomainSet {
            entries,
            ..DomainSet::default()
        };
        for (i, e) in set.entries.iter().enumerate() {
            let (map, name) = match &e.pattern {
                DomainPattern::Exact(n) => (&mut set.exact, n),
                DomainPattern::Subtree(n) => (&mut set.subtree, n),
            };
            map.entry(name.as_str().to_string()).or_default().push(i);
            if let DomainPattern::Subtree(base) = &e.pattern {
                set.subtree_depths |= depth_bit(base.as_str());
            }
        }
        set
    }

    pub fn entries(&self) -> &[DomainEntry] {
        &self.entries
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries whose name part matches `host` (on any port): exact entries first,
    /// then subtrees from the closest base outwards.
    pub fn matching<'a, 'h>(
        &'a self,
        host: &'h HostName,
    ) -> impl Iterator<Item = &'a DomainEntry> + use<'a, 'h> {
        let h = host.as_str();
        let exact = (!self.exact.is_empty())
            .then(|| self.exact.get(h))
            .flatten()
            .into_iter()
            .flatten();
        let depths = self.subtree_depths;
        let labels = if depths == 0 { 0 } else { depth_of(h) };
        let below = proper_suffixes(if depths == 0 { "" } else { h })
            .enumerate()
            .filter(move |(k, _)| depths & (1u128 << (labels - k - 1).min(127)) != 0)
            .filter_map(move |(_, s)| self.subtree.get(s));
        exact.chain(below.flatten()).map(move |&i| &self.entries[i])
    }

    /// The subtree entries whose base is `base` itself or a name above it.
    pub(crate) fn subtrees_at_or_above<'a, 'h>(
        &'a self,
        base: &'h HostName,
    ) -> impl Iterator<Item = &'a DomainEntry> + use<'a, 'h> {
        let b = base.as_str();
        std::iter::once(b)
            .chain(proper_suffixes(b))
            .filter_map(move |s| self.subtree.get(s))
            .flatten()
            .map(move |&i| &self.entries[i])
    }
}

/// How many labels a name has.
fn depth_of(name: &str) -> usize {
    name.bytes().filter(|&b| b == b'.').count() + 1
}

/// The bit of a name's label count in a depth mask.
fn depth_bit(name: &str) -> u128 {
    1u128 << depth_of(name).min(127)
}

/// `b.example.com`, `example.com`, `com` for `a.b.example.com`: slices, no allocation.
fn proper_suffixes(s: &str) -> impl Iterator<Item = &str> {
    s.bytes()
        .enumerate()
        .filter(|&(_, b)| b == b'.')
        .map(move |(i, _)| &s[i + 1..])
}
