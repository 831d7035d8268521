//! Upload budgets (docs/reference/policy-files.md, "Upload budget"): the organization's
//! `[limits] upload_bytes` and each request level's `max_upload_bytes` cap the bytes a
//! client may send upstream. The budget in force is the narrowest of the levels; a
//! request level that asks for more than a level above widens it (`policy_widening`),
//! like an entry the level above does not cover.

use super::compiled::{OrgPolicy, RequestPolicy};
use super::verdict::Level;

/// The budget in force for one request: the fewest bytes any level allows, and the
/// level (and key) that set it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// The bytes a client may send upstream.
    pub bytes: u64,
    /// The level that set it: [`Level::Org`] (`[limits] upload_bytes`) or
    /// [`Level::Request`] (a `max_upload_bytes`).
    pub level: Level,
}

impl Budget {
    /// The rule of a refusal it makes: the key and value that set it, as written.
    pub fn rule(&self) -> String {
        match self.level {
            Level::Org => format!("upload_bytes = {}", self.bytes),
            _ => budget_text(self.bytes),
        }
    }
}

/// How a request level's budget is named in messages and widening entries.
pub(crate) fn budget_text(bytes: u64) -> String {
    format!("max_upload_bytes = {bytes}")
}

fn level_budget(level: &RequestPolicy) -> Option<u64> {
    match level {
        RequestPolicy::Allowlist {
            max_upload_bytes, ..
        } => *max_upload_bytes,
        RequestPolicy::Disabled => None,
    }
}

/// The budget in force under `org` and the request `levels` (widest first); `None` when
/// no level sets one. Among equal budgets the widest level is named.
pub fn upload_budget(org: &OrgPolicy, levels: &[&RequestPolicy]) -> Option<Budget> {
    let org = org.upload_bytes.map(|bytes| Budget {
        bytes,
        level: Level::Org,
    });
    let requests = levels
        .iter()
        .filter_map(|l| level_budget(l))
        .map(|bytes| Budget {
            bytes,
            level: Level::Request,
        });
    org.into_iter().chain(requests).reduce(|narrowest, b| {
        if b.bytes < narrowest.bytes {
            b
        } else {
            narrowest
        }
    })
}

/// `req`'s budget, as `(entry text, why)`, when it is larger than a level above it.
pub(crate) fn budget_widening(
    org: &OrgPolicy,
    uppers: &[&RequestPolicy],
    req: &RequestPolicy,
) -> Option<(String, String)> {
    let asked = level_budget(req)?;
    let above = upload_budget(org, uppers)?;
    (asked > above.bytes).then(|| {
        let who = match above.level {
            Level::Org => "the organization's",
            _ => "the level above's",
        };
        let why = format!("more than {who} budget ({})", above.rule());
        (budget_text(asked), why)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn org(limits: &str) -> OrgPolicy {
        let text = format!("version = 1\nallowed_domains = [\"a.test\"]\n{limits}");
        OrgPolicy::from_toml(&text, "org.toml").unwrap()
    }

    fn req(budget: Option<u64>) -> RequestPolicy {
        let extra = budget.map_or(String::new(), |n| format!(", \"max_upload_bytes\": {n}"));
        let json = format!("{{\"type\": \"allowlist\", \"allowed_domains\": [\"a.test\"]{extra}}}");
        RequestPolicy::from_json(&json, "p.json").unwrap()
    }

    #[test]
    fn the_narrowest_level_sets_the_budget() {
        let org = org("[limits]\nupload_bytes = 1000\n");
        let (wide, narrow, none) = (req(Some(900)), req(Some(10)), req(None));
        let got = |levels: &[&RequestPolicy]| upload_budget(&org, levels);
        assert_eq!(
            got(&[]),
            Some(Budget {
                bytes: 1000,
                level: Level::Org
            })
        );
        assert_eq!(
            got(&[&none]).unwrap().bytes,
            1000,
            "a level without one inherits"
        );
        let b = got(&[&wide, &narrow, &none]).unwrap();
        assert_eq!((b.bytes, b.level), (10, Level::Request));
        assert_eq!(b.rule(), "max_upload_bytes = 10");
        assert_eq!(
            upload_budget(&self::org(""), &[&none]),
            None,
            "no budget anywhere"
        );
    }

    #[test]
    fn a_larger_request_budget_widens_and_a_smaller_or_equal_one_does_not() {
        let org = org("[limits]\nupload_bytes = 1000\n");
        assert_eq!(budget_widening(&org, &[], &req(Some(1000))), None);
        assert_eq!(budget_widening(&org, &[], &req(Some(5))), None);
        assert_eq!(budget_widening(&org, &[], &req(None)), None);
        let (entry, why) = budget_widening(&org, &[], &req(Some(1001))).unwrap();
        assert_eq!(entry, "max_upload_bytes = 1001");
        assert!(why.contains("upload_bytes = 1000"), "{why}");
        let above = req(Some(10));
        let (_, why) = budget_widening(&org, &[&above], &req(Some(11))).unwrap();
        assert!(why.contains("max_upload_bytes = 10"), "{why}");
        // Without any budget above, any budget narrows.
        assert_eq!(
            budget_widening(&self::org(""), &[], &req(Some(i64::MAX as u64))),
            None
        );
    }
}
