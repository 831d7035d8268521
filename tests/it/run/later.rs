//! Files that run later inside writable places, and secrets in the caller's home
//! (docs/reference/confinement.md, "Files that run later" and "Hidden"). CMD runs as
//! uid 0: each refusal is shown to work outside the jail.

use std::process::Command;

use super::files::{sh_in, HostDir};
use super::{require_jail, Jailed};
use crate::support::org::Org;

const ATTACKS: &str = "(echo evil >> .bashrc) 2>/dev/null && echo bashrc-written; \
    cp /bin/true .bashrc 2>/dev/null && echo bashrc-replaced; \
    mv .bashrc b 2>/dev/null && echo bashrc-moved; \
    rm -f .bashrc 2>/dev/null; [ -e .bashrc ] || echo bashrc-removed; \
    (echo evil >> .git/hooks/x) 2>/dev/null && echo hook-written; \
    touch .git/hooks/pre-commit 2>/dev/null && echo hook-added; \
    rm -f .git/hooks/x 2>/dev/null; [ -e .git/hooks/x ] || echo hook-removed; \
    mv .git/hooks h 2>/dev/null && echo hooks-moved; \
    mv .git g 2>/dev/null && echo git-moved; \
    echo 'echo hi' > .envrc && echo envrc-made; echo end";

fn lay_out(dir: &std::path::Path) {
    std::fs::create_dir_all(dir.join(".git/hooks")).unwrap();
    std::fs::write(dir.join(".git/hooks/x"), "#!/bin/sh\n").unwrap();
    std::fs::write(dir.join(".bashrc"), "# mine\n").unwrap();
}

#[tokio::test]
async fn hooks_and_shell_files_in_the_starting_directory_stay_read_only_and_new_ones_are_reported()
{
    require_jail!();
    let outside = HostDir::new("later-outside");
    lay_out(&outside.0);
    let control = Command::new("sh")
        .args(["-c", ATTACKS])
        .current_dir(&outside.0)
        .output()
        .unwrap();
    let control = String::from_utf8_lossy(&control.stdout);
    for worked in ["bashrc-written", "hook-written", "hook-added", "git-moved"] {
        assert!(control.contains(worked), "outside: {worked}: {control}");
    }
    let start = HostDir::new("later-start");
    lay_out(&start.0);
    let out = sh_in(Jailed::new(Org::new().to_toml()), &start.0, ATTACKS).await;
    assert_eq!(out.code(), Some(0), "{out}");
    for worked in [
        "bashrc-written",
        "bashrc-replaced",
        "bashrc-moved",
        "bashrc-removed",
        "hook-written",
        "hook-added",
        "hook-removed",
        "hooks-moved",
        "git-moved",
    ] {
        assert!(!out.stdout.contains(worked), "CMD: {worked}: {out}");
    }
    assert!(out.stdout.contains("envrc-made"), "{out}");
    let note = format!("the command created .envrc in {}: ", start.0.display());
    assert!(out.stderr.contains(&note), "no report: {out}");
    assert!(!out.stderr.contains("created .bashrc"), "{out}");
    assert_eq!(
        std::fs::read_to_string(start.0.join(".bashrc")).unwrap(),
        "# mine\n"
    );
    // --writable-exact lifts it for the one path.
    let exact = start.0.join(".bashrc");
    let jailed = Jailed::new(Org::new().to_toml())
        .arg("--writable-exact")
        .arg(&exact);
    let out = sh_in(
        jailed,
        &start.0,
        "echo ok >> .bashrc && echo bashrc-written",
    )
    .await;
    assert!(out.stdout.contains("bashrc-written"), "{out}");
}

#[tokio::test]
async fn git_init_add_and_commit_work_in_the_starting_directory() {
    require_jail!();
    if super::which("git").is_none() {
        eprintln!("skipped: `git` is not installed");
        return;
    }
    let start = HostDir::new("later-git");
    let script = "git init -q && echo hello > README && git add README && \
                  git -c user.name=jail -c user.email=jail@example.test commit -qm first && \
                  echo hello again >> README && git add README && \
                  git -c user.name=jail -c user.email=jail@example.test commit -qm second && \
                  echo committed";
    let out = sh_in(Jailed::new(Org::new().to_toml()), &start.0, script).await;
    assert_eq!(out.code(), Some(0), "{out}");
    assert!(out.stdout.contains("committed"), "{out}");
    let log = Command::new("git")
        .args(["log", "--oneline"])
        .current_dir(&start.0)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&log.stdout).lines().count(), 2);
    assert!(
        out.stderr.contains("created config in"),
        "git init's config reported: {out}"
    );
}

#[tokio::test]
async fn secrets_in_home_are_hidden_and_show_and_hide_change_that() {
    require_jail!();
    let home = HostDir::new("later-home");
    std::fs::create_dir(home.0.join(".ssh")).unwrap();
    std::fs::write(home.0.join(".ssh/id_ed25519"), "PRIVATE KEY\n").unwrap();
    std::fs::write(home.0.join(".netrc"), "machine x password p\n").unwrap();
    std::fs::write(home.0.join("notes"), "notes\n").unwrap();
    let h = home.0.display().to_string();
    let script = format!(
        "echo \"ssh $(ls -A {h}/.ssh | wc -l)\"; echo \"netrc $(cat {h}/.netrc | wc -c)\"; \
         echo \"notes $(cat {h}/notes 2>/dev/null | wc -c)\"; \
         touch {h}/.ssh/k 2>/dev/null && echo ssh-written; \
         (echo x >> {h}/.netrc) 2>/dev/null && echo netrc-written; echo end"
    );
    let jailed = |args: &[&str]| {
        let mut j = Jailed::new(Org::new().to_toml()).env("HOME", &h);
        for a in args {
            j = j.arg(*a);
        }
        j
    };
    let out = jailed(&["--writable", &h]).sh(&script).await;
    assert_eq!(out.code(), Some(0), "{out}");
    for line in ["ssh 0", "netrc 0", "notes 6"] {
        assert!(out.stdout.contains(&format!("{line}\n")), "{line}: {out}");
    }
    assert!(!out.stdout.contains("-written"), "{out}");
    let (ssh, notes) = (format!("{h}/.ssh"), format!("{h}/notes"));
    let out = jailed(&["--show", &ssh, "--hide", &notes])
        .sh(&script)
        .await;
    assert_eq!(out.code(), Some(0), "{out}");
    for line in ["ssh 1", "netrc 0", "notes 0"] {
        assert!(out.stdout.contains(&format!("{line}\n")), "{line}: {out}");
    }
    let out = jailed(&["--show", &notes]).sh("echo ran").await;
    assert_eq!(out.code(), Some(125), "{out}");
    assert!(out.stderr.contains(&format!("--show {notes}: ")), "{out}");
}
