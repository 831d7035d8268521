//! The request levels in force for one judgement (docs/reference/policy-files.md, "How
//! the levels stack"), widest first.

use crate::policy::RequestPolicy;

/// The most levels under the organization: `--policy`, a session's own policy, a
/// `CONNECT`'s `X-Network-Policy` and, inside its tunnel, a request's.
const MAX_LEVELS: usize = 4;

/// The request levels in force, widest first, kept on the stack (a request's judgement
/// allocates nothing for them).
pub(crate) struct Levels<'a> {
    items: [&'a RequestPolicy; MAX_LEVELS],
    len: usize,
}

/// What fills the unused places of a [`Levels`]; never read.
static UNUSED: RequestPolicy = RequestPolicy::Disabled;

impl Default for Levels<'_> {
    fn default() -> Self {
        Levels {
            items: [&UNUSED; MAX_LEVELS],
            len: 0,
        }
    }
}

impl<'a> Levels<'a> {
    /// Add the next, narrower level. There are never more than [`MAX_LEVELS`].
    pub(crate) fn push(&mut self, level: &'a RequestPolicy) {
        self.items[self.len] = level;
        self.len += 1;
    }
}

impl<'a> std::ops::Deref for Levels<'a> {
    type Target = [&'a RequestPolicy];

    fn deref(&self) -> &[&'a RequestPolicy] {
        &self.items[..self.len]
    }
}
