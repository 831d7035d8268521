//! [`DomainSet`]: compiled domain entries with an index by name, so a lookup costs one
//! hash probe per label of the host, whatever the number of entries.

use std::collections::HashMap;

use crate::policy::host::{DomainEntry, DomainPattern, HostName};

/// Compiled domain entries, indexed so a lookup costs one probe per label of the host.
#[derive(Clone, Debug, Default)]
pub struct DomainSet {
    entries: Vec<DomainEntry>,
    exact: HashMap<String, Vec<usize>>,
    subtree: HashMap<String, Vec<usize>>,
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
        let exact = self.exact.get(h).into_iter().flatten();
        let below = proper_suffixes(h).filter_map(move |s| self.subtree.get(s));
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

/// `b.example.com`, `example.com`, `com` for `a.b.example.com`: slices, no allocation.
fn proper_suffixes(s: &str) -> impl Iterator<Item = &str> {
    s.match_indices('.').map(move |(i, _)| &s[i + 1..])
}
