//! Step 4 of the order of judgement (docs/reference/answers.md): the decision under the
//! levels in force, by host and port, or by method and normalised path too where an
//! entry has rules. Its own module so that the judge and the approval step (which
//! decides a held request again under the approved entry) both use it.

use super::approved::Judged;
use super::ask::What;
use super::refusal::Refusal;
use super::request;
use crate::policy::{
    decide, decide_any_port, decide_request, upload_budget, Budget, Decision, Effective, Host,
    Http, Target,
};

/// Step 4: the decision under the levels in `eff`. Where an entry matching the destination
/// has rules (docs/reference/policy-files.md, "Entries with rules"), a request is judged
/// by its method and normalised path too (a path that does not normalise is
/// `invalid_request`), and a tunnel is marked for interception.
pub(super) fn decide_levels(
    eff: &Effective,
    target: &Target,
    what: &What,
) -> Result<(Decision, Judged, Option<Budget>), Refusal> {
    // Section 13's budget: the narrowest of the levels in force.
    let budget = upload_budget(eff.org, eff.levels);
    if let (What::Name, Host::Name(name)) = (what, &target.host) {
        // A name is allowed where any port of it is.
        return Ok((decide_any_port(eff, name), Judged::Whole, budget));
    }
    if !eff.must_intercept(target) {
        return Ok((decide(eff, target), Judged::Whole, budget));
    }
    match what {
        What::Tunnel | What::Name => Ok((decide(eff, target), Judged::Intercept, budget)),
        What::Request(r) => {
            let path = request::normal_path(r.path, target)?;
            let decision = decide_request(
                eff,
                target,
                &Http {
                    method: &r.method,
                    path: &path,
                },
            );
            Ok((decision, Judged::Path(path), budget))
        }
    }
}
