//! What a stream of a client's bytes is looked through for (docs/reference/dlp.md): the
//! canaries in force (the organization's, a session's) and the secret detectors in
//! force, as one value, so that a body, a WebSocket message or a tunnel's first bytes
//! are scanned for both, held back by the longer of the two.

use std::sync::{Arc, OnceLock};

use super::{By, Detectors, FoundIn, Hit, Scanner};

/// The canaries and detectors one request's bytes are looked through for.
pub(crate) struct Lookout {
    canaries: Vec<Arc<Scanner>>,
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
        if let Some(hit) = self.canaries.iter().find_map(|s| s.scan(bytes, found_in)) {
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
}
