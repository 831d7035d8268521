//! `git push` of a file holding a canary through an inspected git host
//! (docs/reference/dlp.md, "Bodies"): real git, through the proxy, against git's own
//! `http-backend` ([`GitHost`]), with push allowed by the policy so that only the canary
//! can refuse it. The push's pack is the body of `POST .../git-receive-pack`; git
//! zlib-compresses the objects in it, which hides every value (docs/guides/exfiltration.md,
//! "What is not caught"), so both pushes here are made with `core.compression=0`, as a
//! client that stores its objects uncompressed sends them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::shown::encoded_forms;
use super::{values_file, with_canaries, VALUE};
use crate::inspect_git::{blocking, git, missing_tools, ok, GitHost};

/// git.test with every method git uses: clone, fetch and push (a rule on methods is
/// read inside the tunnel, so the host is inspected).
const FULL: &str = r#"{ host = "git.test", methods = ["GET", "POST"] }"#;

/// Every file under `dir`, read whole.
fn files_under(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    // Bounded: a repository's tree, no symlinks followed.
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                todo.push(entry.path());
            } else if kind.is_file() {
                out.push((
                    entry.path(),
                    std::fs::read(entry.path()).unwrap_or_default(),
                ));
            }
        }
    }
    out
}

fn holds(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Commit `content` as `name` in the clone at `dir`.
fn commit(dir: &Path, home: &Path, name: &str, content: &str) {
    std::fs::write(dir.join(name), content).unwrap();
    ok(&git(dir, home, &["add", name]), "git add");
    let ident = ["-c", "user.name=it", "-c", "user.email=it@example.test"];
    let args = [&ident[..], &["commit", "-q", "-m", name]].concat();
    ok(&git(dir, home, &args), "git commit");
}

#[tokio::test]
async fn git_push_of_a_file_holding_a_canary_is_refused_and_the_host_is_unchanged() {
    if let Some(why) = missing_tools() {
        eprintln!("skipped: {why}");
        return;
    }
    let host = Arc::new(GitHost::start().await);
    // The host stores what it receives uncompressed too, so that the probe below can
    // read a pushed file's text in its repository.
    let store = ["config", "core.compression", "0"];
    ok(&git(&host.bare, &host.home, &store), "git config");
    let file = values_file("git-push");
    let (proxy, ca) = host
        .proxy_with(&[FULL], |org| with_canaries(org, &file, "refuse"))
        .await;
    let proxy = Arc::new(proxy);
    let dest = host.dir.join("clone");
    let run = |args: &[&str], dir: PathBuf| {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let (host, proxy, ca) = (host.clone(), proxy.clone(), ca.clone());
        blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            host.git_via(&proxy, &ca, &dir, &args)
        })
    };
    let url = host.url();
    let clone = run(&["clone", &url, dest.to_str().unwrap()], host.dir.clone()).await;
    ok(&clone, "git clone through the proxy");
    let push = ["-c", "core.compression=0", "push", "origin", "main"];

    // The control: the same push of a file without the canary lands, and the host
    // holds the file's text (so the checks below can see a value that arrived).
    let clean = "NOTE=no-canary-in-this-file-7f3b9c2e\n";
    commit(&dest, &host.home, "NOTES", clean);
    ok(&run(&push, dest.clone()).await, "the clean push");
    let landed = git(&dest, &host.home, &["rev-parse", "HEAD"]);
    let landed = String::from_utf8_lossy(&landed.stdout).trim().to_string();
    assert_eq!(host.head(), landed, "the clean push landed");
    assert!(
        holds(&host.bodies(), clean.as_bytes()),
        "the pack carries it"
    );
    let stored = files_under(&host.bare);
    assert!(
        stored.iter().any(|(_, b)| holds(b, clean.as_bytes())),
        "the host stored the file's text"
    );

    // The same push of a file holding the canary.
    commit(
        &dest,
        &host.home,
        ".env",
        &format!("AWS_ACCESS_KEY_ID={VALUE}\n"),
    );
    let refused = run(&push, dest.clone()).await;
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "the push went through: {said}");
    assert!(
        said.contains("403 Egress denied: exfiltration_detected")
            || said.contains("x-egress-denied: exfiltration_detected"),
        "{said}"
    );
    assert_eq!(host.head(), landed, "the host's refs changed");
    let received = host.bodies();
    assert!(
        !holds(&received, &VALUE.as_bytes()[..6]),
        "the host received the value, or its start: {}",
        host.requests()
    );
    for (path, bytes) in files_under(&host.bare) {
        assert!(
            !holds(&bytes, VALUE.as_bytes()),
            "{} holds it",
            path.display()
        );
    }
    let records: Vec<_> = proxy
        .audit_lines()
        .into_iter()
        .filter(|r| r.get("dlp").is_some())
        .collect();
    assert_eq!(records.len(), 1, "one record: {}", proxy.diagnostics());
    let record = &records[0];
    assert_eq!(record["event"], "egress.denied", "{record}");
    assert_eq!(record["reason"], "exfiltration_detected", "{record}");
    assert_eq!(record["policy_level"], "dlp", "{record}");
    assert_eq!(record["method"], "POST", "{record}");
    let dlp = &record["dlp"];
    assert_eq!(
        (dlp["id"].as_str(), dlp["kind"].as_str()),
        (Some("org:2"), Some("generic")),
        "{record}"
    );
    assert_eq!(
        (dlp["encoding"].as_str(), dlp["found_in"].as_str()),
        (Some("plain"), Some("body")),
        "{record}"
    );
    assert!(record.get("url").is_none(), "{record}");
    let shown = format!("{}\n{}", proxy.audit_text(), proxy.stderr());
    for form in encoded_forms(VALUE) {
        assert!(!shown.contains(&form), "{form} shown:\n{shown}");
    }
}
