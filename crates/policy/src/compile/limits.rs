//! `[limits]` (organization file) and `max_upload_bytes` (request policies): upload
//! budgets in bytes (docs/reference/policy-files.md, "Upload budget").

use super::node::{self, Node};
use super::problems::Problems;
use crate::file::LIMITS_KEYS;

/// The `[limits]` table: its `upload_bytes`, if set and valid.
pub(super) fn compile<'a, N: Node<'a>>(p: &mut Problems, limits: N) -> Option<u64> {
    let t = node::table(p, limits, "a table")?;
    t.unknown(p, "limits.", &LIMITS_KEYS);
    let [upload] = t.take(&LIMITS_KEYS);
    upload.and_then(|n| byte_count(p, n))
}

/// A count of bytes: an integer, 0 or more (0: nothing may be sent upstream).
pub(super) fn byte_count<'a, N: Node<'a>>(p: &mut Problems, n: N) -> Option<u64> {
    let value = node::int(p, n)?;
    match u64::try_from(value) {
        Ok(bytes) => Some(bytes),
        Err(_) => {
            p.invalid(
                n.at(),
                format!("{value} bytes: a budget is 0 or more bytes"),
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{OrgPolicy, RequestPolicy};

    fn org_err(text: &str) -> String {
        OrgPolicy::from_toml(text, "org.toml")
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn limits_upload_bytes_loads_and_defaults_to_no_budget() {
        let o = OrgPolicy::from_toml("version = 1\n[limits]\nupload_bytes = 4096\n", "o").unwrap();
        assert_eq!(o.upload_bytes(), Some(4096));
        let none = OrgPolicy::from_toml("version = 1\n[limits]\n", "o").unwrap();
        assert_eq!(none.upload_bytes(), None);
        let zero = OrgPolicy::from_toml("version = 1\n[limits]\nupload_bytes = 0\n", "o").unwrap();
        assert_eq!(zero.upload_bytes(), Some(0), "0: nothing may be sent");
    }

    #[test]
    fn limits_errors_name_file_line_and_column() {
        #[rustfmt::skip]
        let cases: &[(&str, &str, &str)] = &[
            ("unknown_key", "version = 1\n[limits]\nupload = 1\n", "org.toml:3:1: unknown field `upload`, expected `upload_bytes`"),
            ("negative", "version = 1\n[limits]\nupload_bytes = -1\n", "org.toml:3:16: -1 bytes: a budget is 0 or more bytes"),
            ("not_an_int", "version = 1\n[limits]\nupload_bytes = \"1k\"\n", "org.toml:3:16: invalid type: string \"1k\", expected i64"),
            ("not_a_table", "version = 1\nlimits = 5\n", "org.toml:2:10: invalid type"),
            ("default_widens", "version = 1\nallowed_domains = [\"a.com\"]\n[limits]\nupload_bytes = 10\n[default_network_policy]\ntype = \"allowlist\"\nallowed_domains = [\"a.com\"]\nmax_upload_bytes = 11\n",
             "org.toml:8:20: entry \"max_upload_bytes = 11\": default_network_policy widens the organization policy: more than the organization's budget (upload_bytes = 10)"),
        ];
        for (rule, text, want) in cases {
            let err = org_err(text);
            assert!(
                err.starts_with(want),
                "{rule}: got {err:?}, want prefix {want:?}"
            );
        }
    }

    #[test]
    fn max_upload_bytes_in_a_request_policy() {
        let ok = r#"{"type": "allowlist", "allowed_domains": ["a.com"], "max_upload_bytes": 7}"#;
        let p = RequestPolicy::from_json(ok, "p.json").unwrap();
        assert!(matches!(
            p,
            RequestPolicy::Allowlist {
                max_upload_bytes: Some(7),
                ..
            }
        ));
        let neg = r#"{"type": "allowlist", "allowed_domains": ["a.com"], "max_upload_bytes": -7}"#;
        let err = RequestPolicy::from_json(neg, "p.json")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("p.json:1:73: -7 bytes"), "{err}");
        let disabled = r#"{"type": "disabled", "max_upload_bytes": 7}"#;
        let err = RequestPolicy::from_json(disabled, "p.json")
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown field `max_upload_bytes`"), "{err}");
    }
}
