//! The request rules of an `allowed_domains` entry written as a table
//! (docs/reference/policy-files.md, "Entries with rules"): which methods and paths it
//! allows, and whether its tunnels are inspected.
//!
//! An entry without rules allows every method and path. Rules are compared on the
//! request's method (case-sensitive, as HTTP methods are) and its path normalised by
//! [`super::path::normalize`].

use std::fmt;
use std::sync::Arc;

use super::path::{normalize, NormalPath, PathError};

/// What `access = "read-only"` means.
pub const READ_ONLY: [&str; 3] = ["GET", "HEAD", "OPTIONS"];

/// The rules of one entry. Made only by the compiler, from a table that sets at least
/// one of `methods`, `paths`, `access` or `inspect = true`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rules {
    /// `None`: every method. `access = "read-only"` is [`READ_ONLY`] here.
    pub methods: Option<Vec<String>>,
    /// `None`: every path.
    pub paths: Option<Vec<PathRule>>,
    /// `access = "read-only"` was written (kept to render the entry as written).
    pub read_only: bool,
    /// `inspect = true` (organization file only).
    pub inspect: bool,
    /// The entry as a decision's `rule` names it: an inline table with the host and each
    /// field written, so two entries for one host are told apart.
    pub label: Arc<str>,
}

/// One of `paths`: an exact path, or a prefix written `/prefix/*`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PathRule {
    /// The path itself (`/user`).
    Exact(String),
    /// The prefix with its final `/` (`/repos/acme/` for `/repos/acme/*`).
    Prefix(String),
}

/// Why a `paths` element is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PathRuleError {
    /// A `*` other than a final `/*`.
    #[error("a path is exact (`/user`) or a prefix ending in `/*` (`/repos/acme/*`); `*` may appear only there")]
    Wildcard,
    /// The path does not normalise.
    #[error("{0}")]
    Path(PathError),
    /// The path is not written in normal form: the normal form (with its `*`).
    #[error("write the path in normal form: `{0}`")]
    NotNormal(String),
}

impl PathRule {
    /// `/user` or `/repos/acme/*`, which must already be in normal form (so the file says
    /// exactly what is compared).
    pub fn parse(s: &str) -> Result<PathRule, PathRuleError> {
        let (body, prefix) = match s.strip_suffix('*') {
            Some(body) if body.ends_with('/') => (body, true),
            _ => (s, false),
        };
        if body.contains('*') {
            return Err(PathRuleError::Wildcard);
        }
        if body.contains('?') {
            return Err(PathRuleError::Path(PathError::BadCharacter('?')));
        }
        let normal = normalize(body).map_err(PathRuleError::Path)?;
        if normal.as_str() != body {
            let star = if prefix { "*" } else { "" };
            return Err(PathRuleError::NotNormal(format!("{normal}{star}")));
        }
        let body = body.to_string();
        Ok(if prefix {
            PathRule::Prefix(body)
        } else {
            PathRule::Exact(body)
        })
    }

    /// Whether `path` is the exact path, or starts with the prefix.
    pub fn matches(&self, path: &NormalPath) -> bool {
        match self {
            PathRule::Exact(p) => p == path.as_str(),
            PathRule::Prefix(p) => path.as_str().starts_with(p.as_str()),
        }
    }

    /// Every path `self` matches, `other` matches.
    pub fn inside(&self, other: &PathRule) -> bool {
        match (self, other) {
            (PathRule::Exact(a), PathRule::Exact(b)) => a == b,
            (PathRule::Exact(a) | PathRule::Prefix(a), PathRule::Prefix(b)) => a.starts_with(b),
            (PathRule::Prefix(_), PathRule::Exact(_)) => false,
        }
    }
}

impl fmt::Display for PathRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathRule::Exact(p) => f.write_str(p),
            PathRule::Prefix(p) => write!(f, "{p}*"),
        }
    }
}

/// `methods` elements are upper-case tokens (RFC 9110 `token`, no lower-case letter).
pub fn valid_method(m: &str) -> bool {
    !m.is_empty()
        && m.bytes().all(|b| {
            b.is_ascii_uppercase() || b.is_ascii_digit() || b"!#$%&'*+-.^_`|~".contains(&b)
        })
}

impl Rules {
    /// Rules from the fields as compiled; `host` is the entry's pattern as written.
    pub fn new(
        host: &str,
        methods: Option<Vec<String>>,
        paths: Option<Vec<PathRule>>,
        read_only: bool,
        inspect: bool,
    ) -> Rules {
        let mut rules = Rules {
            methods: if read_only {
                Some(READ_ONLY.map(String::from).to_vec())
            } else {
                methods
            },
            paths,
            read_only,
            inspect,
            label: Arc::from(""),
        };
        rules.label = Arc::from(rules.render(host));
        rules
    }

    /// `{ host = "x", methods = ["GET"], paths = ["/a/*"] }`, as
    /// docs/reference/policy-files.md writes entries.
    fn render(&self, host: &str) -> String {
        let quoted = |items: Vec<String>| {
            let items: Vec<String> = items.iter().map(|s| format!("{s:?}")).collect();
            format!("[{}]", items.join(", "))
        };
        let mut out = format!("{{ host = {host:?}");
        if self.read_only {
            out.push_str(", access = \"read-only\"");
        } else if let Some(m) = &self.methods {
            out.push_str(&format!(", methods = {}", quoted(m.clone())));
        }
        if let Some(p) = &self.paths {
            let p = p.iter().map(ToString::to_string).collect();
            out.push_str(&format!(", paths = {}", quoted(p)));
        }
        if self.inspect {
            out.push_str(", inspect = true");
        }
        out.push_str(" }");
        out
    }

    /// Whether `methods` allows `method` (no `methods`: every method).
    pub fn allows_method(&self, method: &str) -> bool {
        self.methods
            .as_ref()
            .is_none_or(|m| m.iter().any(|x| x == method))
    }

    /// Whether `paths` allows `path` (no `paths`: every path).
    pub fn allows_path(&self, path: &NormalPath) -> bool {
        self.paths
            .as_ref()
            .is_none_or(|p| p.iter().any(|r| r.matches(path)))
    }

    /// Whether `methods` or `paths` limit what the entry allows (`inspect` alone does
    /// not: an entry that only inspects allows what a string entry does).
    pub fn restricts(&self) -> bool {
        self.methods.is_some() || self.paths.is_some()
    }
}

/// Every request `r` allows, `o` allows (docs/reference/policy-files.md, "Covering":
/// methods a subset, each path
/// inside one of `o`'s; no rules allow everything). `None` when covered, else the field
/// that widens, for the widening message.
pub(crate) fn rules_widen(r: Option<&Rules>, o: Option<&Rules>) -> Option<&'static str> {
    let o = o?;
    let methods_ok = match (&o.methods, r.and_then(|r| r.methods.as_ref())) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(om), Some(rm)) => rm.iter().all(|m| om.contains(m)),
    };
    if !methods_ok {
        return Some("methods");
    }
    let paths_ok = match (&o.paths, r.and_then(|r| r.paths.as_ref())) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(op), Some(rp)) => rp.iter().all(|p| op.iter().any(|q| p.inside(q))),
    };
    (!paths_ok).then_some("paths")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_rules_parse_as_exact_or_prefix() {
        let cases: &[(&str, Result<PathRule, PathRuleError>)] = &[
            ("/user", Ok(PathRule::Exact("/user".into()))),
            ("/repos/acme/*", Ok(PathRule::Prefix("/repos/acme/".into()))),
            ("/*", Ok(PathRule::Prefix("/".into()))),
            ("/a*", Err(PathRuleError::Wildcard)),
            ("/a/*/b", Err(PathRuleError::Wildcard)),
            ("/a/../b", Err(PathRuleError::NotNormal("/b".into()))),
            ("/%61/*", Err(PathRuleError::NotNormal("/a/*".into()))),
            (
                "/a?x",
                Err(PathRuleError::Path(PathError::BadCharacter('?'))),
            ),
            (
                "/a%2Fb",
                Err(PathRuleError::Path(PathError::EncodedSeparator(
                    "%2F".into(),
                ))),
            ),
            ("user", Err(PathRuleError::Path(PathError::NotAbsolute))),
        ];
        for (input, want) in cases {
            assert_eq!(&PathRule::parse(input), want, "{input}");
        }
    }

    #[test]
    fn a_prefix_matches_below_it_only() {
        let rule = PathRule::parse("/repos/acme/*").unwrap();
        let m = |p: &str| rule.matches(&normalize(p).unwrap());
        assert!(m("/repos/acme/x"));
        assert!(m("/repos/acme/"));
        assert!(m("/repos/acme/x/../y"));
        assert!(!m("/repos/acme"));
        assert!(!m("/repos/acmex/y"));
        assert!(!m("/repos/acme/../other"));
        assert!(!m("/Repos/acme/x"), "matching is case-sensitive");
    }

    #[test]
    fn path_inside() {
        let p = |s: &str| PathRule::parse(s).unwrap();
        assert!(p("/a/b").inside(&p("/a/*")));
        assert!(p("/a/b/*").inside(&p("/a/*")));
        assert!(p("/a/b").inside(&p("/a/b")));
        assert!(!p("/a/*").inside(&p("/a/b")));
        assert!(!p("/a/*").inside(&p("/a/b/*")));
        assert!(!p("/ab").inside(&p("/a/*")));
    }

    #[test]
    fn methods_are_upper_case_tokens() {
        for ok in ["GET", "POST", "M-SEARCH", "PROPFIND"] {
            assert!(valid_method(ok), "{ok}");
        }
        for bad in ["", "get", "Get", "G T", "GET,POST"] {
            assert!(!valid_method(bad), "{bad}");
        }
    }

    #[test]
    fn label_names_the_fields() {
        let r = Rules::new("x.test", None, None, true, false);
        assert_eq!(&*r.label, "{ host = \"x.test\", access = \"read-only\" }");
        let paths = vec![PathRule::parse("/a/*").unwrap()];
        let r = Rules::new(
            "x.test",
            Some(vec!["POST".into()]),
            Some(paths),
            false,
            true,
        );
        assert_eq!(
            &*r.label,
            "{ host = \"x.test\", methods = [\"POST\"], paths = [\"/a/*\"], inspect = true }"
        );
    }
}
