//! What a stream of a client's bytes is looked through for (docs/reference/dlp.md): the
//! canaries in force (the organization's, a session's) and the secret detectors in
//! force, as one value, so that a body, a WebSocket message or a tunnel's first bytes
//! are scanned for both, held back by the longer of the two.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use super::{By, Detectors, FoundIn, Hit, Scanner};

/// The bytes a stream is scanned for its canaries as they are (a session's in their
/// compact index, a probe every 4 bytes); past them, its canaries are looked for in
/// one index of the fast kind made for this stream ([`Scanner::merged`], a probe every 9
/// to 16 bytes), which takes far less time to build than these take to scan.
const MERGE_AFTER: usize = 256 << 10;

/// The canaries and detectors one request's bytes are looked through for.
pub(crate) struct Lookout {
    canaries: Vec<Arc<Scanner>>,
    /// The canaries in one fast index, once the stream is past [`MERGE_AFTER`].
    merged: OnceLock<Arc<Scanner>>,
    /// The bytes scanned so far.
    seen: AtomicUsize,
    detectors: Option<Arc<Detectors>>,
    hold: usize,
}

impl Lookout {
    /// `canaries` and `detectors`, leaving out those with nothing to look for; `None`
    /// when nothing is left (then no byte is held back or scanned).
    pub(crate) fn new(
        canaries: impl IntoIterator<Item = Arc<Scanner>>,
        detectors: &Arc<Detectors>,
    ) -> Option<Lookout> {
        let canaries: Vec<Arc<Scanner>> = canaries.into_iter().filter(|s| !s.is_empty()).collect();
        let detectors = (!detectors.is_empty()).then(|| detectors.clone());
        if canaries.is_empty() && detectors.is_none() {
            return None;
        }
        let hold = canaries
            .iter()
            .map(|s| s.hold_back())
            .chain(detectors.iter().map(|d| d.hold_back()))
            .max()
            .unwrap_or(0);
        Some(Lookout {
            canaries,
            merged: OnceLock::new(),
            seen: AtomicUsize::new(0),
            detectors,
            hold,
        })
    }

    /// The bytes a stream scanned piece by piece holds back: the longest match less one.
    pub(crate) fn hold_back(&self) -> usize {
        self.hold
    }

    /// The first hit in `bytes` that stops them: a canary, or a secret a detector
    /// refuses. A secret only reported (`[dlp] action = "report"`) is kept in `flagged`
    /// (the first one) and does not stop them.
    pub(crate) fn scan(
        &self,
        bytes: &[u8],
        found_in: FoundIn,
        flagged: &OnceLock<Hit>,
    ) -> Option<Hit> {
        if let Some(hit) = self.scan_canaries(bytes, found_in) {
            return Some(hit);
        }
        let detectors = self.detectors.as_ref()?;
        let hit = detectors.scan(bytes, found_in)?;
        if hit.by != By::Reported {
            return Some(hit);
        }
        // The credentials were looked for first: nothing here is refused.
        let _ = flagged.set(hit);
        None
    }

    /// The first canary in `bytes`: in the scanners as they are, or in one merged
    /// index once the stream is long.
    fn scan_canaries(&self, bytes: &[u8], found_in: FoundIn) -> Option<Hit> {
        if self.canaries.is_empty() {
            return None;
        }
        let seen = self.seen.fetch_add(bytes.len(), Ordering::Relaxed) + bytes.len();
        if seen <= MERGE_AFTER {
            return self.canaries.iter().find_map(|s| s.scan(bytes, found_in));
        }
        let merged = self.merged.get_or_init(|| Scanner::merged(&self.canaries));
        merged.scan(bytes, found_in)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dlp::{Canary, Kind};

    #[test]
    fn a_long_stream_finds_every_canary_in_the_merged_index_by_its_own_id() {
        let minted = |id: &str| {
            let value = Kind::Generic.mint().unwrap().into_bytes();
            Canary::new(id, "generic", value)
        };
        let org = [minted("org:1")];
        let session: Vec<Canary> = (1..=4).map(|i| minted(&format!("c{i}"))).collect();
        let scanners = [
            Arc::new(Scanner::new(&org)),
            Arc::new(Scanner::compact(&session)),
        ];
        let lookout = Lookout::new(scanners, &Arc::default()).unwrap();
        let flagged = OnceLock::new();
        let filler = vec![b'x'; 64 << 10];
        for _ in 0..MERGE_AFTER / filler.len() {
            assert!(lookout.scan(&filler, FoundIn::Body, &flagged).is_none());
        }
        assert!(
            lookout.merged.get().is_none(),
            "not built before the stream is long"
        );
        for canary in org.iter().chain(&session) {
            let hex = data_encoding::HEXUPPER.encode(canary.value());
            let bytes = format!("{}{hex}{}", "y".repeat(1000), "z".repeat(10));
            let hit = lookout.scan(bytes.as_bytes(), FoundIn::Body, &flagged);
            assert_eq!(hit.map(|h| h.id), Some(canary.id.clone()));
            let near = &hex[..hex.len() - 1];
            assert!(lookout
                .scan(near.as_bytes(), FoundIn::Body, &flagged)
                .is_none());
        }
        assert!(lookout.merged.get().is_some());
        assert_eq!(
            lookout.hold_back(),
            Scanner::merged(&lookout.canaries).hold_back()
        );
    }
}
