//! Secret detectors (docs/reference/dlp.md, "Secret detectors"): regular expressions
//! of known token shapes and of the organization's own patterns, and the real values of
//! the organization's `[[credentials]]`, looked for as they are (no decoding) in the
//! same places as the canaries. Which detectors are in force, and their action, is
//! the judgement's to say; this module scans. A hit names the detector, never the bytes.

use std::sync::{Arc, Mutex};

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use regex::bytes::{Regex, RegexSet};
use zeroize::Zeroizing;

use super::{By, Encoding, FoundIn, Hit};

/// The longest match a detector looks for: a longer credential value is looked for by
/// its first this many bytes, which are as much its own.
pub(crate) const MAX_MATCH: usize = 256;

/// One regex detector: its name (the record's `dlp.id`), its kind (`detector` or
/// `pattern`), its regex as written (for bytes) and in either case (for names), and
/// its longest match.
#[derive(Clone)]
pub(crate) struct Rule {
    pub id: Arc<str>,
    pub kind: &'static str,
    pub bytes: Regex,
    pub names: Regex,
    pub longest: usize,
}

/// The `[[credentials]]` values, found in one pass: each always refused, however the
/// organization's `[dlp] action` reads (the sandbox never has them).
struct Literals {
    ids: Vec<Arc<str>>,
    exact: AhoCorasick,
    names: AhoCorasick,
    longest: usize,
}

/// The detectors in force for one request: rules with one action, and the credentials.
#[derive(Clone, Default)]
pub(crate) struct Detectors {
    rules: Vec<Rule>,
    /// The rules' regexes as one set ([`one_set`]): one pass says whether any matches,
    /// where each rule's own would take one pass each. `None` without rules.
    set: Option<RegexSet>,
    literals: Option<Arc<Literals>>,
    /// Set when a rule's match is let through and recorded, not refused.
    report: bool,
}

impl std::fmt::Debug for Detectors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Names only: never a pattern (a credential's is its value).
        let rules: Vec<&str> = self.rules.iter().map(|r| &*r.id).collect();
        let credentials: Vec<&str> = self
            .literals
            .iter()
            .flat_map(|l| &l.ids)
            .map(|id| &**id)
            .collect();
        f.debug_struct("Detectors")
            .field("rules", &rules)
            .field("credentials", &credentials)
            .field("report", &self.report)
            .finish()
    }
}

impl Detectors {
    /// `rules` with their action (`report`), and `credentials` (`(id, value)`, the id
    /// `credential:HOST`), whose values are looked for by their first [`MAX_MATCH`] bytes.
    pub(crate) fn new(
        rules: Vec<Rule>,
        report: bool,
        credentials: Vec<(Arc<str>, Zeroizing<Vec<u8>>)>,
    ) -> Detectors {
        let literals = (!credentials.is_empty()).then(|| {
            let values: Vec<&[u8]> = credentials
                .iter()
                .map(|(_, v)| &v[..v.len().min(MAX_MATCH)])
                .collect();
            let build = |either_case| {
                AhoCorasickBuilder::new()
                    .ascii_case_insensitive(either_case)
                    .match_kind(MatchKind::LeftmostFirst)
                    .build(&values)
                    .expect("credential values are short literals")
            };
            Arc::new(Literals {
                ids: credentials.iter().map(|(id, _)| id.clone()).collect(),
                exact: build(false),
                names: build(true),
                longest: values.iter().map(|v| v.len()).max().unwrap_or(0),
            })
        });
        Detectors {
            set: one_set(&rules),
            rules,
            literals,
            report,
        }
    }

    /// These detectors and `more` rules (a name already in force is kept once), all
    /// with one action: `report` when set, else `refuse`.
    pub(crate) fn with(&self, more: impl IntoIterator<Item = Rule>, report: bool) -> Detectors {
        let mut rules = self.rules.clone();
        for rule in more {
            if !rules.iter().any(|r| r.id == rule.id) {
                rules.push(rule);
            }
        }
        Detectors {
            set: one_set(&rules),
            rules,
            literals: self.literals.clone(),
            report,
        }
    }

    /// Whether a rule's match is only reported (`[dlp] action = "report"`).
    pub(crate) fn reports(&self) -> bool {
        self.report
    }

    /// Whether there is nothing to look for.
    pub(crate) fn is_empty(&self) -> bool {
        self.rules.is_empty() && self.literals.is_none()
    }

    /// The bytes a stream scanned piece by piece must hold back: the longest match less
    /// one byte (at most 255).
    pub(crate) fn hold_back(&self) -> usize {
        let rules = self.rules.iter().map(|r| r.longest).max().unwrap_or(0);
        let literals = self.literals.as_ref().map_or(0, |l| l.longest);
        rules.max(literals).min(MAX_MATCH).saturating_sub(1)
    }

    fn hit(&self, id: &Arc<str>, kind: &str, by: By, found_in: FoundIn) -> Hit {
        Hit {
            id: id.clone(),
            kind: Arc::from(kind),
            encoding: Encoding::Plain,
            found_in,
            by,
        }
    }

    fn rule_by(&self) -> By {
        match self.report {
            true => By::Reported,
            false => By::Secret,
        }
    }

    /// The first credential's value `bytes` carry: always refused.
    fn scan_credentials(&self, bytes: &[u8], found_in: FoundIn) -> Option<Hit> {
        let l = self.literals.as_ref()?;
        let m = l.exact.find(bytes)?;
        let id = &l.ids[m.pattern().as_usize()];
        Some(self.hit(id, "credential", By::Secret, found_in))
    }

    /// The first rule `bytes` match, with its action.
    fn scan_rules(&self, bytes: &[u8], found_in: FoundIn) -> Option<Hit> {
        // One pass of the set first; each rule alone only where one of them matches.
        if let Some(set) = &self.set {
            if !set.is_match(bytes) {
                return None;
            }
        }
        let rule = self.rules.iter().find(|r| r.bytes.is_match(bytes))?;
        Some(self.hit(&rule.id, rule.kind, self.rule_by(), found_in))
    }

    /// The first secret `bytes` carry: a credential's value first (always refused),
    /// then each rule in order.
    pub(crate) fn scan(&self, bytes: &[u8], found_in: FoundIn) -> Option<Hit> {
        (self.scan_credentials(bytes, found_in)).or_else(|| self.scan_rules(bytes, found_in))
    }

    /// The first secret a name carries, in either case (names are case-insensitive).
    pub(crate) fn scan_name(&self, name: &str, found_in: FoundIn) -> Option<Hit> {
        if let Some(l) = &self.literals {
            if let Some(m) = l.names.find(name.as_bytes()) {
                let id = &l.ids[m.pattern().as_usize()];
                return Some(self.hit(id, "credential", By::Secret, found_in));
            }
        }
        let rule = self
            .rules
            .iter()
            .find(|r| r.names.is_match(name.as_bytes()))?;
        Some(self.hit(&rule.id, rule.kind, self.rule_by(), found_in))
    }

    /// The first refused secret `bytes` carry, skipping those only reported: a
    /// credential's value, then (unless the rules only report) each rule.
    pub(crate) fn scan_refused(&self, bytes: &[u8], found_in: FoundIn) -> Option<Hit> {
        match self.scan_credentials(bytes, found_in) {
            Some(hit) => Some(hit),
            None if self.report => None,
            None => self.scan_rules(bytes, found_in),
        }
    }

    /// The first secret `bytes` carry that a rule only reports (none when the rules
    /// refuse): what goes on, recorded `egress.flagged`.
    pub(crate) fn scan_reported(&self, bytes: &[u8], found_in: FoundIn) -> Option<Hit> {
        match self.report {
            true => self.scan_rules(bytes, found_in),
            false => None,
        }
    }
}

/// The sets of rules made so far, their regexes as written: a set takes about a
/// millisecond to build, and a request policy that adds detectors makes its rules anew
/// for each request. Bounded: past [`SETS`] the oldest is dropped.
static MADE: Mutex<Vec<(Vec<String>, RegexSet)>> = Mutex::new(Vec::new());
const SETS: usize = 64;

/// `rules`' regexes as one [`RegexSet`], each as written and built as its own was (so
/// the set matches exactly where one of them does); `None` without rules, or if the
/// set is too large to build (then each rule is run alone, as before).
fn one_set(rules: &[Rule]) -> Option<RegexSet> {
    if rules.is_empty() {
        return None;
    }
    // Found without allocating: a request policy's rules are looked up per request.
    let same = |sources: &[String]| {
        sources.len() == rules.len()
            && (sources.iter().zip(rules)).all(|(s, r)| s == r.bytes.as_str())
    };
    let made = || MADE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, set)) = made().iter().find(|(s, _)| same(s)) {
        return Some(set.clone());
    }
    let sources: Vec<String> = rules.iter().map(|r| r.bytes.as_str().to_owned()).collect();
    let set = RegexSet::new(&sources).ok()?;
    let mut made = made();
    if made.len() >= SETS {
        made.remove(0);
    }
    made.push((sources, set.clone()));
    Some(set)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(id: &str, re: &str) -> Rule {
        Rule {
            id: Arc::from(id),
            kind: "pattern",
            bytes: Regex::new(re).unwrap(),
            names: regex::bytes::RegexBuilder::new(re)
                .case_insensitive(true)
                .build()
                .unwrap(),
            longest: 10,
        }
    }

    #[test]
    fn a_credential_is_refused_even_where_rules_report_and_debug_shows_no_value() {
        let value = Zeroizing::new(b"s3cr3t-credential-value".to_vec());
        let d = Detectors::new(
            vec![rule("employee-id", "EMP-[0-9]{6}")],
            true,
            vec![(Arc::from("credential:api.test"), value)],
        );
        let hit = d.scan(b"x=s3cr3t-credential-value", FoundIn::Body).unwrap();
        assert_eq!((&*hit.id, hit.by), ("credential:api.test", By::Secret));
        let hit = d.scan(b"id EMP-123456", FoundIn::Header).unwrap();
        assert_eq!((&*hit.id, hit.by), ("employee-id", By::Reported));
        assert!(d.scan_refused(b"id EMP-123456", FoundIn::Header).is_none());
        let reported = d.scan_reported(b"id EMP-123456", FoundIn::Header).unwrap();
        assert_eq!((&*reported.id, reported.by), ("employee-id", By::Reported));
        let both = b"EMP-123456 s3cr3t-credential-value";
        assert_eq!(
            &*d.scan_refused(both, FoundIn::Body).unwrap().id,
            "credential:api.test"
        );
        assert!(d
            .scan_credentials(b"id EMP-123456", FoundIn::Body)
            .is_none());
        assert!(d.scan(b"EMP-12345", FoundIn::Body).is_none());
        let name = d.scan_name("emp-123456.evil.test", FoundIn::Dns).unwrap();
        assert_eq!(&*name.id, "employee-id");
        assert_eq!(d.hold_back(), 22);
        let shown = format!("{d:?}");
        assert!(
            !shown.contains("s3cr3t") && !shown.contains("EMP-"),
            "{shown}"
        );
    }

    #[test]
    fn the_rules_as_one_set_match_where_one_of_them_does() {
        // A comment in extended mode, which would swallow whatever followed it were the
        // rules joined into one pattern.
        let d = Detectors::new(
            vec![
                rule("commented", "(?x) ZZ-[0-9]{4} # an id"),
                rule("employee-id", "EMP-[0-9]{6}"),
            ],
            false,
            Vec::new(),
        );
        assert!(d.set.is_some());
        let hit = d.scan(b"id EMP-123456", FoundIn::Body).unwrap();
        assert_eq!(&*hit.id, "employee-id");
        let hit = d.scan(b"ZZ-1234 and EMP-123456", FoundIn::Body).unwrap();
        assert_eq!(&*hit.id, "commented", "the first rule in order");
        assert!(d.scan(b"EMP-12345 ZZ-123", FoundIn::Body).is_none());
        let again = Detectors::default().with([rule("employee-id", "EMP-[0-9]{6}")], true);
        assert!(again.scan(b"EMP-654321", FoundIn::Url).is_some());
    }
}
