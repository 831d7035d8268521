//! The audit log's chain from the outside (docs/reference/audit-log.md, "The chain"):
//! `audit keygen`, a proxy signing checkpoints with `--audit-signing-key` while its log
//! is rotated under it by SIGUSR1, and `audit verify` across both files with the public
//! key (exit 0), another key, the files out of order and a removed line (exit 1), and
//! an unreadable file (exit 2).

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::lint::egress;
use crate::support::client::get_via_proxy;
use crate::support::origin::Origin;
use crate::support::proxy::ProxyBuilder;
use crate::support::unique_temp_dir;

fn records(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

fn verify(args: &[&Path]) -> crate::lint::Out {
    let mut argv = vec!["audit", "verify"];
    argv.extend(args.iter().map(|p| p.to_str().unwrap()));
    egress(&argv)
}

#[test]
fn keygen_writes_a_key_pair_once() {
    let dir = unique_temp_dir("keygen");
    let keys = dir.join("keys");
    let out = egress(&["audit", "keygen", keys.to_str().unwrap()]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let private = std::fs::read_to_string(keys.join("audit-signing-key.pem")).unwrap();
    assert!(
        private.starts_with("-----BEGIN PRIVATE KEY-----"),
        "{private}"
    );
    let public = std::fs::read_to_string(keys.join("audit-signing-key.pub.pem")).unwrap();
    assert!(public.starts_with("-----BEGIN PUBLIC KEY-----"), "{public}");
    let again = egress(&["audit", "keygen", keys.to_str().unwrap()]);
    assert_eq!(again.code, 2, "never overwrites a key");
    assert!(again.stderr.contains("already exists"), "{}", again.stderr);
    assert_eq!(
        std::fs::read_to_string(keys.join("audit-signing-key.pem")).unwrap(),
        private
    );
}

#[tokio::test]
async fn a_log_rotated_by_sigusr1_verifies_across_both_files_with_its_key() {
    let dir = unique_temp_dir("chain");
    let keys = dir.join("keys");
    assert_eq!(egress(&["audit", "keygen", keys.to_str().unwrap()]).code, 0);
    let (other, _) = (dir.join("other"), ());
    assert_eq!(
        egress(&["audit", "keygen", other.to_str().unwrap()]).code,
        0
    );
    let public = keys.join("audit-signing-key.pub.pem");
    let origin = Origin::start().await;
    let mut proxy = ProxyBuilder::standard(origin.port())
        .audit_allowed()
        .arg("--audit-signing-key")
        .arg(keys.join("audit-signing-key.pem").to_str().unwrap())
        .start()
        .await;
    let rotated = proxy.dir.join("audit.jsonl.1");
    let addr = proxy.addr;
    let allowed = format!("http://allowed.test:{}/", origin.port());
    // A steady stream of denials and allowed requests while the file is renamed and
    // reopened under it.
    let load = tokio::spawn(async move {
        for n in 0..60 {
            let url = if n % 2 == 0 {
                format!("http://evil-{n}.test/")
            } else {
                allowed.clone()
            };
            let resp = get_via_proxy(addr, &url, &[]).await;
            assert!(matches!(resp.status, 200 | 403), "{resp:?}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    std::fs::rename(&proxy.audit_path, &rotated).unwrap();
    proxy.signal("USR1");
    assert!(
        proxy
            .stderr_shows("audit log reopened", Duration::from_secs(5))
            .await,
        "{}",
        proxy.diagnostics()
    );
    load.await.unwrap();
    assert!(proxy.terminate().await.success(), "{}", proxy.diagnostics());

    let (old, new) = (records(&rotated), records(&proxy.audit_path));
    assert!(
        !old.is_empty() && !new.is_empty(),
        "both files hold records"
    );
    assert_eq!(old[0]["seq"], 1);
    assert_eq!(
        old[0]["prev"],
        "0".repeat(64),
        "a chain begins with 64 zeros"
    );
    assert_eq!(new[0]["seq"], 1, "seq starts again in the new file");
    let last = new.last().unwrap();
    assert_eq!(
        last["event"], "audit.checkpoint",
        "a checkpoint at shutdown"
    );
    assert!(last["signature"].is_string(), "{last}");
    let total = old.len() + new.len();
    assert_eq!(total, 60 + 1, "every record, and the shutdown checkpoint");

    let out = verify(&[
        Path::new("--public-key"),
        &public,
        &rotated,
        &proxy.audit_path,
    ]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout
            .starts_with("intact: 60 records in 2 files; 1 checkpoint signed by key"),
        "{}",
        out.stdout
    );

    let wrong = other.join("audit-signing-key.pub.pem");
    let out = verify(&[
        Path::new("--public-key"),
        &wrong,
        &rotated,
        &proxy.audit_path,
    ]);
    assert_eq!(out.code, 1, "another key: {}", out.stdout);
    assert!(out.stdout.contains("signed by key"), "{}", out.stdout);

    let out = verify(&[&proxy.audit_path, &rotated]);
    assert_eq!(out.code, 1, "out of order: {}", out.stdout);
    assert!(
        out.stdout
            .contains(&format!("{}:1: the file does not go on", rotated.display())),
        "{}",
        out.stdout
    );

    // One line removed from the old file.
    let text = std::fs::read_to_string(&rotated).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    if lines.len() >= 3 {
        lines.remove(1);
        let cut = dir.join("cut.jsonl");
        std::fs::write(&cut, lines.join("\n") + "\n").unwrap();
        let out = verify(&[&cut]);
        assert_eq!(out.code, 1, "{}", out.stdout);
        assert!(
            out.stdout.contains(&format!(
                "{}:2: a line was removed before this one (seq 2 is missing)",
                cut.display()
            )),
            "{}",
            out.stdout
        );
    }

    let out = verify(&[&dir.join("missing.jsonl")]);
    assert_eq!(out.code, 2, "{}", out.stderr);
}
