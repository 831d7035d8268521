//! [`DomainSet`]: compiled domain entries with an index by name, so a lookup costs one
//! hash probe per label depth that some entry has, whatever the number of entries.
//!
//! A decision looks the same host up in several sets (denied, allowed, each request
//! level, shared hosting), so the host is cut once into a [`NameProbe`]: the start and
//! hash of each of its suffixes, hashed right to left in one pass. Every set then probes
//! with those hashes and compares the candidate's name, without hashing again.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::host::{DomainEntry, DomainPattern, HostName};

/// Compiled domain entries, indexed so a lookup costs one probe per label of the host.
#[derive(Clone, Debug, Default)]
pub struct DomainSet {
    entries: Vec<DomainEntry>,
    exact: HeadMap,
    subtree: HeadMap,
    /// `next[i]`: the next entry after `i` whose name has the same hash, or [`NONE`]. A
    /// chain keeps the entries' order, and holds names that merely collide too, so a
    /// lookup compares each candidate's name.
    next: Vec<u32>,
    /// Bit `d` is set when some subtree base has `d` labels: a lookup probes only the
    /// host's suffixes of those depths.
    subtree_depths: u128,
    /// Some entry has rules: without any, "must this be intercepted" costs no lookup.
    any_rules: bool,
}

/// A name's [`suffix_hash`] to the first entry of its chain. The keys are the policy's
/// own entries, never the client's, so an unkeyed hash is safe here: a client can probe
/// but not insert.
type HeadMap = HashMap<u64, u32, BuildHasherDefault<Prehashed>>;

/// The end of a chain in [`DomainSet::next`].
const NONE: u32 = u32::MAX;

/// Keys that are already hashes ([`suffix_hash`]) are used as they are.
#[derive(Default)]
pub(crate) struct Prehashed(u64);

impl Hasher for Prehashed {
    fn write(&mut self, _: &[u8]) {
        unreachable!("only u64 keys, which are already hashes");
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0100_0000_01b3;

/// FNV-1a over the name's bytes from the last to the first: the hash of a name extends
/// the hash of its parent, so one pass over a host yields the hash of every suffix.
fn suffix_hash(name: &str) -> u64 {
    name.bytes().rev().fold(FNV_OFFSET, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(FNV_PRIME)
    })
}

/// A host cut at its labels: for each depth `d` (the number of labels of a suffix), the
/// start and the `suffix_hash` of the suffix with `d` labels. A [`HostName`] has at most
/// 253 bytes, so at most 127 labels.
pub struct NameProbe<'h> {
    name: &'h str,
    labels: usize,
    starts: [u8; 128],
    hashes: [u64; 128],
}

impl<'h> NameProbe<'h> {
    /// One pass over `host`, from its last byte to its first.
    pub fn new(host: &'h HostName) -> NameProbe<'h> {
        let name = host.as_str();
        let mut probe = NameProbe {
            name,
            labels: 0,
            starts: [0; 128],
            hashes: [0; 128],
        };
        let mut h = FNV_OFFSET;
        let mut depth = 0;
        for (i, b) in name.bytes().enumerate().rev() {
            if b == b'.' {
                depth += 1;
                // A HostName is at most 253 bytes, so `i + 1` fits.
                probe.starts[depth] = (i + 1) as u8;
                probe.hashes[depth] = h;
            }
            h = (h ^ u64::from(b)).wrapping_mul(FNV_PRIME);
        }
        probe.labels = depth + 1;
        probe.hashes[depth + 1] = h;
        probe
    }

    /// How many labels the host has.
    pub fn labels(&self) -> usize {
        self.labels
    }

    /// The host's suffix of `depth` labels (the whole host at `labels()`).
    pub fn suffix(&self, depth: usize) -> &'h str {
        &self.name[usize::from(self.starts[depth])..]
    }

    /// The whole host's depth and hash: where [`DomainSet::matching`] starts.
    fn full(&self) -> (usize, u64) {
        (self.labels, self.hashes[self.labels])
    }
}

/// The bits of depths below `depth` (`1..depth`) in a depth mask.
fn depths_below(depth: usize) -> u128 {
    if depth >= 128 {
        !0
    } else {
        (1u128 << depth) - 1
    }
}

impl PartialEq for DomainSet {
    fn eq(&self, other: &Self) -> bool {
        self.entries == other.entries
    }
}

impl Eq for DomainSet {}

impl DomainSet {
    /// Only the policy core makes sets: the compiler, and the built-in lists.
    pub(crate) fn from_entries(entries: Vec<DomainEntry>) -> DomainSet {
        let mut set = DomainSet {
            next: vec![NONE; entries.len()],
            any_rules: entries.iter().any(DomainEntry::inspected),
            entries,
            ..DomainSet::default()
        };
        // Backwards, each entry becoming the head of its chain: chains keep entry order.
        for (i, e) in set.entries.iter().enumerate().rev() {
            let (map, name) = match &e.pattern {
                DomainPattern::Exact(n) => (&mut set.exact, n),
                DomainPattern::Subtree(n) => (&mut set.subtree, n),
            };
            let i = u32::try_from(i).expect("fewer than 2^32 entries");
            if let Some(next) = map.insert(suffix_hash(name.as_str()), i) {
                set.next[i as usize] = next;
            }
            if let DomainPattern::Subtree(base) = &e.pattern {
                set.subtree_depths |= 1u128 << depth_of(base.as_str()).min(127);
            }
        }
        set
    }

    /// The entries, in the order written.
    pub fn entries(&self) -> &[DomainEntry] {
        &self.entries
    }

    /// How many entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether some entry has rules (`methods`, `paths`, `access` or `inspect`).
    pub fn has_rules(&self) -> bool {
        self.any_rules
    }

    /// The entries whose name part matches `host` (on any port): exact entries first,
    /// then subtrees from the closest base outwards.
    pub fn matching<'a, 'h>(&'a self, host: &'h HostName) -> Matching<'a, NameProbe<'h>> {
        self.matching_probe(NameProbe::new(host))
    }

    /// [`DomainSet::matching`] for a host already cut into a [`NameProbe`], so several
    /// sets share one pass over the host.
    pub(crate) fn matching_probe<'a, 'h, P: Borrow<NameProbe<'h>>>(
        &'a self,
        probe: P,
    ) -> Matching<'a, P> {
        let (labels, hash) = probe.borrow().full();
        Matching {
            set: self,
            cur: self.head(&self.exact, hash),
            depth: labels,
            depths: self.subtree_depths & depths_below(labels),
            probe,
        }
    }

    /// The exact entries for the host's suffix of `depth` labels.
    pub(crate) fn exact_at<'a, 'p, 'h>(
        &'a self,
        probe: &'p NameProbe<'h>,
        depth: usize,
    ) -> Matching<'a, &'p NameProbe<'h>> {
        Matching {
            set: self,
            cur: self.head(&self.exact, probe.hashes[depth]),
            depth,
            depths: 0,
            probe,
        }
    }

    /// The subtree entries whose base is `base` itself or a name above it.
    pub fn subtrees_at_or_above<'a, 'h>(
        &'a self,
        base: &'h HostName,
    ) -> Matching<'a, NameProbe<'h>> {
        let probe = NameProbe::new(base);
        Matching {
            set: self,
            cur: NONE,
            depth: 0,
            depths: self.subtree_depths & depths_below(probe.labels + 1),
            probe,
        }
    }

    fn head(&self, map: &HeadMap, hash: u64) -> u32 {
        if map.is_empty() {
            return NONE;
        }
        map.get(&hash).copied().unwrap_or(NONE)
    }
}

/// The entries of a [`DomainSet`] that a host matches, in order: the current chain's
/// entries whose name is the host's suffix of `depth` labels, then the subtree chains of
/// the remaining `depths`, deepest first.
pub struct Matching<'a, P> {
    set: &'a DomainSet,
    probe: P,
    cur: u32,
    depth: usize,
    depths: u128,
}

impl<'a, 'h, P: Borrow<NameProbe<'h>>> Iterator for Matching<'a, P> {
    type Item = &'a DomainEntry;

    fn next(&mut self) -> Option<&'a DomainEntry> {
        let set = self.set;
        let probe = self.probe.borrow();
        loop {
            while self.cur != NONE {
                let i = self.cur as usize;
                self.cur = set.next[i];
                let e = &set.entries[i];
                if e.pattern.base().as_str() == probe.suffix(self.depth) {
                    return Some(e);
                }
            }
            if self.depths == 0 {
                return None;
            }
            self.depth = 127 - self.depths.leading_zeros() as usize;
            self.depths &= !(1u128 << self.depth);
            self.cur = set.head(&set.subtree, probe.hashes[self.depth]);
        }
    }
}

/// How many labels a name has.
fn depth_of(name: &str) -> usize {
    name.bytes().filter(|&b| b == b'.').count() + 1
}
