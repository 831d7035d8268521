//! `canaries-blind` (info): an organization that sets canaries (`[canaries]`) and allows
//! a host it does not inspect. Inside such a host's TLS tunnels the proxy reads nothing
//! but the target name, the server name and the first bytes, so a canary sent there is
//! not seen (docs/reference/dlp.md, "Where the proxy looks"). Said once per entry, at
//! the entry, and never failing a run.

use super::entries::normal_form;
use super::{RuleId, Sink};
use crate::policy::OrgPolicy;

/// One finding per allowed entry without inspection, when canaries are set (`at`: where
/// each allowed entry was written).
pub(crate) fn blind(sink: &mut Sink, org: &OrgPolicy, at: &[usize]) {
    if org.canaries().values_file.is_none() {
        return;
    }
    let entries = org.allowed().entries().iter().zip(at.iter().copied());
    for (entry, offset) in entries.filter(|(e, _)| !e.inspected()) {
        let msg = format!(
            "allowed_domains: `{}` is not inspected, so a canary sent inside its TLS tunnels cannot be seen (only the target name, server name and first bytes are read); add `inspect = true` if a secret could leave through it",
            normal_form(entry),
        );
        sink.at(RuleId::CanariesBlind, offset, msg, None);
    }
}
