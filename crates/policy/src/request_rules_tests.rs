//! Entries with rules: reading them (TOML and JSON alike), their errors, and deciding a
//! request's method and path with them.

use crate::{
    decide, decide_request, explain_request, normalize_path, Effective, Host, Http, OrgPolicy,
    Reason, RequestPolicy, Target, VerdictKind,
};

const ORG: &str = r#"
version = 1
allowed_domains = [
  "docs.test",
  { host = "api.test", methods = ["GET", "HEAD"], paths = ["/repos/acme/*", "/user"] },
  { host = "git.test", access = "read-only" },
  { host = "git.test", methods = ["POST"], paths = ["/acme/repo.git/git-upload-pack"] },
  { host = "up.test", inspect = true },
  { host = "plain.test" },
  { host = "alt.test:8080", methods = ["GET"] },
  "alt.test",
]
"#;

fn org() -> OrgPolicy {
    OrgPolicy::from_toml(ORG, "org.toml").unwrap_or_else(|e| panic!("{e}"))
}

fn json(text: &str) -> RequestPolicy {
    RequestPolicy::from_json(text, "request.json").unwrap_or_else(|e| panic!("{e}"))
}

fn target(host: &str, port: u16) -> Target {
    Target {
        host: Host::parse(host).unwrap(),
        port,
    }
}

/// (verdict, reason, rule) of `method url-path` to `host:port`.
fn judge(
    org: &OrgPolicy,
    levels: &[&RequestPolicy],
    (host, port): (&str, u16),
    method: &str,
    path: &str,
) -> (VerdictKind, Option<Reason>, Option<String>) {
    let eff = Effective { org, levels };
    let path = normalize_path(path).unwrap();
    let http = Http {
        method,
        path: &path,
    };
    let d = decide_request(&eff, &target(host, port), &http);
    (
        d.verdict.kind(),
        d.reason(),
        d.rule.as_deref().map(String::from),
    )
}

const READ_ONLY_GIT: &str = "{ host = \"git.test\", access = \"read-only\" }";
const UPLOAD_GIT: &str =
    "{ host = \"git.test\", methods = [\"POST\"], paths = [\"/acme/repo.git/git-upload-pack\"] }";
const API: &str =
    "{ host = \"api.test\", methods = [\"GET\", \"HEAD\"], paths = [\"/repos/acme/*\", \"/user\"] }";

/// method, path, verdict, reason, rule.
type Row<'a> = (
    &'a str,
    &'a str,
    VerdictKind,
    Option<Reason>,
    Option<&'a str>,
);

#[test]
fn several_entries_for_one_host() {
    use Reason::*;
    use VerdictKind::*;
    let org = org();
    #[rustfmt::skip]
    let rows: &[Row] = &[
        ("GET", "/acme/repo.git/info/refs", Allow, None, Some(READ_ONLY_GIT)),
        ("HEAD", "/", Allow, None, Some(READ_ONLY_GIT)),
        ("OPTIONS", "/x", Allow, None, Some(READ_ONLY_GIT)),
        ("POST", "/acme/repo.git/git-upload-pack", Allow, None, Some(UPLOAD_GIT)),
        ("POST", "/acme/repo.git/git-receive-pack", Deny, Some(PathNotAllowed), Some(UPLOAD_GIT)),
        ("PUT", "/acme/repo.git/git-upload-pack", Deny, Some(MethodNotAllowed), Some(READ_ONLY_GIT)),
        ("get", "/", Deny, Some(MethodNotAllowed), Some(READ_ONLY_GIT)),
    ];
    for (method, path, verdict, reason, rule) in rows {
        let got = judge(&org, &[], ("git.test", 443), method, path);
        let want = (*verdict, *reason, rule.map(String::from));
        assert_eq!(got, want, "{method} {path}");
    }
}

#[test]
fn methods_and_paths_of_one_entry() {
    use Reason::*;
    use VerdictKind::*;
    let org = org();
    #[rustfmt::skip]
    let rows: &[(&str, &str, VerdictKind, Option<Reason>)] = &[
        ("GET", "/repos/acme/widgets", Allow, None),
        ("GET", "/repos/acme/", Allow, None),
        ("GET", "/user", Allow, None),
        ("GET", "/user/keys", Deny, Some(PathNotAllowed)),
        ("GET", "/repos/acme", Deny, Some(PathNotAllowed)),
        ("GET", "/repos/acme/../other/x", Deny, Some(PathNotAllowed)),
        ("GET", "/repos/%61cme/x", Allow, None),
        ("GET", "/Repos/acme/x", Deny, Some(PathNotAllowed)),
        ("POST", "/user", Deny, Some(MethodNotAllowed)),
        ("POST", "/elsewhere", Deny, Some(MethodNotAllowed)),
    ];
    for (method, path, verdict, reason) in rows {
        let got = judge(&org, &[], ("api.test", 443), method, path);
        let rule = Some(API.to_string());
        assert_eq!(got, (*verdict, *reason, rule), "{method} {path}");
    }
}

#[test]
fn entries_without_rules_allow_every_method_and_path() {
    let org = org();
    for host in ["docs.test", "plain.test", "up.test"] {
        let got = judge(&org, &[], (host, 80), "DELETE", "/anything/at/all");
        assert_eq!(got.0, VerdictKind::Allow, "{host}");
    }
    // `{ host = "plain.test" }` alone is a string entry.
    let got = judge(&org, &[], ("plain.test", 80), "GET", "/");
    assert_eq!(got.2.as_deref(), Some("plain.test"));
}

#[test]
fn rules_hold_on_their_port_only() {
    let org = org();
    let on_8080 = judge(&org, &[], ("alt.test", 8080), "POST", "/");
    assert_eq!(on_8080.1, Some(Reason::MethodNotAllowed));
    let on_443 = judge(&org, &[], ("alt.test", 443), "POST", "/");
    assert_eq!(
        (on_443.0, on_443.2.as_deref()),
        (VerdictKind::Allow, Some("alt.test"))
    );
}

#[test]
fn a_connect_is_decided_by_host_and_port_and_says_whether_to_intercept() {
    let org = org();
    let eff = Effective {
        org: &org,
        levels: &[],
    };
    #[rustfmt::skip]
    let rows: &[(&str, u16, bool)] = &[
        ("git.test", 443, true), ("api.test", 443, true), ("up.test", 443, true),
        ("api.test", 80, true), ("docs.test", 443, false), ("plain.test", 443, false),
        ("alt.test", 8080, true), ("alt.test", 443, false), ("10.0.0.1", 443, false),
    ];
    for (host, port, intercept) in rows {
        let t = target(host, *port);
        if !host.starts_with("10.") {
            assert!(decide(&eff, &t).is_allowed(), "{host}:{port}");
        }
        assert_eq!(eff.must_intercept(&t), *intercept, "{host}:{port}");
    }
}

#[test]
fn a_request_level_with_rules_narrows_and_is_intercepted() {
    let org = org();
    let level = json(
        r#"{"type": "allowlist", "allowed_domains": ["docs.test",
            {"host": "api.test", "methods": ["GET"], "paths": ["/repos/acme/widgets/*"]}]}"#,
    );
    let levels = [&level];
    let ok = judge(
        &org,
        &levels,
        ("api.test", 443),
        "GET",
        "/repos/acme/widgets/x",
    );
    assert_eq!(ok.0, VerdictKind::Allow);
    let path = judge(&org, &levels, ("api.test", 443), "GET", "/repos/acme/other");
    assert_eq!(path.1, Some(Reason::PathNotAllowed));
    let head = judge(
        &org,
        &levels,
        ("api.test", 443),
        "HEAD",
        "/repos/acme/widgets/x",
    );
    assert_eq!(head.1, Some(Reason::MethodNotAllowed));
    let eff = Effective {
        org: &org,
        levels: &levels,
    };
    let d = decide_request(
        &eff,
        &target("api.test", 443),
        &Http {
            method: "HEAD",
            path: &normalize_path("/repos/acme/widgets/x").unwrap(),
        },
    );
    assert_eq!(d.level, crate::Level::Request);
    // docs.test has no rules at either level; a request entry with rules makes it inspected.
    assert!(!eff.must_intercept(&target("docs.test", 443)));
    let narrower = json(
        r#"{"type": "allowlist", "allowed_domains": [{"host": "docs.test", "access": "read-only"}]}"#,
    );
    let levels = [&level, &narrower];
    let eff = Effective {
        org: &org,
        levels: &levels,
    };
    assert!(eff.must_intercept(&target("docs.test", 443)));
}

#[test]
fn explain_names_the_entry_and_the_request() {
    let org = org();
    let eff = Effective {
        org: &org,
        levels: &[],
    };
    let path = normalize_path("/acme/repo.git/git-receive-pack").unwrap();
    let http = Http {
        method: "POST",
        path: &path,
    };
    let (d, steps) = explain_request(&eff, &target("git.test", 443), Some(&http));
    assert_eq!(d.reason(), Some(Reason::PathNotAllowed));
    let last = format!("{:?}", steps.last().unwrap());
    assert!(
        last.contains("OtherPath") && last.contains("git-receive-pack"),
        "{last}"
    );
}

/// Every problem of an entry with rules names the file, line, column and entry.
#[test]
fn errors_name_file_line_column_and_entry() {
    let text = r#"version = 1
allowed_domains = [
  { host = "a.test", methods = ["GET"], access = "read-only" },
  { host = "b.test", methods = ["get"] },
  { host = "c.test", paths = ["/a*", "/x/../y"] },
  { host = "d.test", access = "write" },
  { host = "e.test", verbs = ["GET"] },
  { methods = ["GET"] },
  { host = "https://f.test" },
  { host = "g.test", inspect = "yes" },
  { host = "h.test", methods = [] },
  3,
]
denied_domains = [{ host = "i.test" }]
"#;
    let err = OrgPolicy::from_toml(text, "org.toml")
        .unwrap_err()
        .to_string();
    let want = [
        "org.toml:3:32: entry \"a.test\": give `methods` or `access`, not both",
        "org.toml:4:33: entry \"b.test\": method `get` is not an upper-case method name",
        "org.toml:5:31: entry \"c.test\": path `/a*`: a path is exact",
        "org.toml:5:38: entry \"c.test\": path `/x/../y`: write the path in normal form: `/y`",
        "org.toml:6:31: unknown variant `write`, expected `read-only`",
        "org.toml:7:22: unknown field `verbs`",
        "org.toml:8:3: missing field `host`",
        "org.toml:9:12: entry \"https://f.test\": entries are host names, not URLs",
        "org.toml:10:32: invalid type: string \"yes\", expected a boolean",
        "org.toml:11:32: entry \"h.test\": methods must not be empty",
        "org.toml:12:3: invalid type: integer `3`, expected a string or a table",
        "org.toml:14:19: invalid type: map, expected a string",
    ];
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), want.len(), "{err}");
    for (line, want) in lines.iter().zip(want) {
        assert!(line.starts_with(want), "{line}\n  wanted {want}");
    }
}

#[test]
fn inspect_is_for_the_organization_only() {
    let text =
        r#"{"type": "allowlist", "allowed_domains": [{"host": "up.test", "inspect": true}]}"#;
    let err = RequestPolicy::from_json(text, "X-Network-Policy").unwrap_err();
    assert_eq!(
        err.to_string(),
        "X-Network-Policy:1:74: entry \"up.test\": `inspect` is set in the organization file only"
    );
    let both = r#"{"type": "allowlist", "allowed_domains": [{"host": "a.test", "access": "read-only", "methods": ["GET"]}]}"#;
    let err = RequestPolicy::from_json(both, "X-Network-Policy").unwrap_err();
    assert!(
        err.to_string()
            .contains("give `methods` or `access`, not both"),
        "{err}"
    );
    let inline = "version = 1\nallowed_domains = [\"up.test\"]\ndefault_network_policy = { type = \"allowlist\", allowed_domains = [{ host = \"up.test\", inspect = true }] }\n";
    let err = OrgPolicy::from_toml(inline, "org.toml").unwrap_err();
    assert!(
        err.to_string()
            .contains("`inspect` is set in the organization file only"),
        "{err}"
    );
}

#[test]
fn json_and_toml_entries_compile_alike() {
    let toml = OrgPolicy::from_toml(
        "version = 1\nallowed_domains = [{ host = \"api.test\", methods = [\"GET\"], paths = [\"/a/*\"] }]\n",
        "org.toml",
    )
    .unwrap();
    let json = json(
        r#"{"type": "allowlist", "allowed_domains": [{"host": "api.test", "methods": ["GET"], "paths": ["/a/*"]}]}"#,
    );
    let RequestPolicy::Allowlist { domains, .. } = &json else {
        panic!("{json:?}");
    };
    assert_eq!(toml.allowed().entries(), domains.entries());
}
