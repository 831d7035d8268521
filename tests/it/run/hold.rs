//! Covers that hold (docs/reference/confinement.md, "Covers that hold"): the proxy's
//! files are covered by covering the directory that holds them, so no version of them
//! (an editor's atomic save, a credential rotated by write-then-rename, the audit log
//! rotated by rename and SIGUSR1) is within CMD's reach at any moment of the run; a
//! file in a directory CMD needs is refused.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::files::HostDir;
use super::{finish, require_jail, wait_for_file, Jailed, SpawnChild};
use crate::support::org::{allowlist_json, Org};

const FIRST: &str = "first-secret-9f3a";
const SECOND: &str = "second-secret-7c21";

/// A jail whose proxy files (org with a credential, policy, token, audit log) are in
/// `proxy/` of `start`.
fn jailed_in(start: &Path) -> Jailed {
    let mut jailed = Jailed::new(
        Org::new()
            .allow_entry(r#"{ host = "secure.test", inspect = true }"#)
            .raw_line(
                "[[credentials]]\nhost = \"secure.test\"\nheader = \"Authorization\"\n\
                 value_file = \"secrets/token\"",
            )
            .to_toml(),
    )
    .policy(allowlist_json(&["secure.test"]));
    jailed.dir = start.join("proxy");
    std::fs::create_dir_all(jailed.dir.join("secrets")).unwrap();
    std::fs::write(jailed.dir.join("secrets/token"), FIRST).unwrap();
    jailed
}

/// Replace `path` as an editor or a rotation does: a new file beside it, renamed over.
fn replace(path: &Path, text: &str) {
    let tmp = PathBuf::from(format!("{}.new", path.display()));
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// CMD's loop: until `rotated` appears (at most 10 s) and once more after, it tries
/// `body`; it writes `started` first.
fn looping(body: &str) -> String {
    format!(
        "touch started; i=0; while [ ! -e rotated ] && [ $i -lt 200 ]; do {body}; \
         i=$((i+1)); sleep 0.05; done; {body}; echo done"
    )
}

#[tokio::test]
async fn a_credential_and_the_org_file_replaced_on_the_host_stay_covered() {
    require_jail!();
    let start = HostDir::new("hold-replace");
    let jailed = jailed_in(&start.0);
    let dir = jailed.dir.clone();
    let body = "cat proxy/secrets/token proxy/secrets/token.new proxy/org.toml \
                proxy/org.toml.new 2>/dev/null; \
                (echo '# jailed' >> proxy/org.toml) 2>/dev/null && echo org-written; \
                (echo '# jailed' >> proxy/org.toml.new) 2>/dev/null && echo org-written";
    let mut command = jailed.command(&["sh", "-c", &looping(body)]);
    command.current_dir(&start.0);
    let audit = jailed.audit_path();
    let (root, token, org) = (
        start.0.clone(),
        dir.join("secrets/token"),
        dir.join("org.toml"),
    );
    let out = tokio::task::spawn_blocking(move || {
        let mut child = command.spawn_child();
        wait_for_file(&root.join("started"), &mut child);
        let saved = std::fs::read_to_string(&org).unwrap();
        for round in 0..10 {
            replace(&token, if round % 2 == 0 { SECOND } else { FIRST });
            replace(&org, &format!("{saved}\n# saved {round}\n"));
            std::thread::sleep(Duration::from_millis(100));
        }
        replace(&token, SECOND);
        std::fs::write(root.join("rotated"), "").unwrap();
        finish(child, &audit)
    })
    .await
    .unwrap();
    assert_eq!(out.code(), Some(0), "{out}");
    assert!(out.stdout.contains("done"), "{out}");
    for seen in [FIRST, SECOND, "secure.test", "# saved", "org-written"] {
        assert!(!out.stdout.contains(seen), "CMD got {seen}: {out}");
    }
    // On the host the files are there to read, the last versions.
    assert_eq!(
        std::fs::read_to_string(dir.join("secrets/token")).unwrap(),
        SECOND
    );
    let org = std::fs::read_to_string(dir.join("org.toml")).unwrap();
    assert!(
        org.contains("# saved 9") && !org.contains("# jailed"),
        "{org}"
    );
}

#[tokio::test]
async fn the_audit_log_rotated_by_rename_and_sigusr1_stays_out_of_reach() {
    require_jail!();
    let start = HostDir::new("hold-audit");
    let jailed = jailed_in(&start.0);
    let dir = jailed.dir.clone();
    let body = "getent hosts denied-$i.test >/dev/null; \
                (echo FORGED >> proxy/audit.jsonl) 2>/dev/null && echo forged; \
                (echo FORGED >> proxy/audit.jsonl.1) 2>/dev/null && echo forged";
    let mut command = jailed.command(&["sh", "-c", &looping(body)]);
    command.current_dir(&start.0);
    let audit = jailed.audit_path();
    let root = start.0.clone();
    let out = tokio::task::spawn_blocking(move || {
        let mut child = command.spawn_child();
        wait_for_file(&root.join("started"), &mut child);
        let log = root.join("proxy/audit.jsonl");
        wait_for_file(&log, &mut child);
        std::thread::sleep(Duration::from_millis(300));
        std::fs::rename(&log, root.join("proxy/audit.jsonl.1")).unwrap();
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGUSR1).unwrap();
        wait_for_file(&log, &mut child);
        std::thread::sleep(Duration::from_millis(500));
        std::fs::write(root.join("rotated"), "").unwrap();
        finish(child, &audit)
    })
    .await
    .unwrap();
    assert_eq!(out.code(), Some(0), "{out}");
    assert!(!out.stdout.contains("forged"), "{out}");
    let old = std::fs::read_to_string(dir.join("audit.jsonl.1")).unwrap();
    let new = std::fs::read_to_string(dir.join("audit.jsonl")).unwrap();
    // Both files have the proxy's records: the rotation happened while CMD tried.
    assert!(
        old.contains("denied-") && new.contains("denied-"),
        "{old}\n{new}"
    );
    assert!(
        !old.contains("FORGED") && !new.contains("FORGED"),
        "{old}\n{new}"
    );
}

#[tokio::test]
async fn a_proxy_file_in_the_starting_directory_is_refused_with_125_naming_it() {
    require_jail!();
    let start = HostDir::new("hold-refused");
    let mut jailed = Jailed::new(Org::new().to_toml());
    jailed.dir = start.0.clone();
    let mut command = jailed.command(&["sh", "-c", "touch ran"]);
    command.current_dir(&start.0);
    let audit = jailed.audit_path();
    let out = tokio::task::spawn_blocking(move || finish(command.spawn_child(), &audit))
        .await
        .unwrap();
    assert_eq!(out.code(), Some(125), "{out}");
    // The first of the proxy's files it finds there is named (the audit log, the org).
    let named = ["audit.jsonl", "org.toml"].map(|f| format!("{}: ", start.0.join(f).display()));
    assert!(named.iter().any(|n| out.stderr.contains(n)), "{out}");
    assert!(
        out.stderr.contains("keep it in a directory of its own"),
        "{out}"
    );
    assert!(!start.0.join("ran").exists(), "CMD ran: {out}");
}
