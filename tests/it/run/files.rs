//! CMD's view of the filesystem (docs/reference/confinement.md, "Files"): read-only but
//! for the starting directory, the jail's own `/tmp`, `/var/tmp` and `/dev/shm`, and each
//! `--writable PATH`;
//! the proxy's own files covered, always; `/sys` and `/proc/sys` read-only, always; no
//! disk in `/dev`. CMD runs as uid 0 here (no `--user`, no `SUDO_UID`), which owns every
//! root-owned file: each write it is refused is shown to work as root outside the jail.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{finish, require_jail, Jailed, Outcome, SpawnChild};
use crate::support::org::{allowlist_json, Org};
use crate::support::tls::ca_init;

/// A fresh root-owned directory outside every writable place (under `/var/lib`),
/// removed when dropped.
pub(super) struct HostDir(pub(super) PathBuf);

impl HostDir {
    pub(super) fn new(tag: &str) -> HostDir {
        let path = PathBuf::from(format!(
            "/var/lib/egress-proxy-it-{}-{tag}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create a directory under /var/lib");
        HostDir(path)
    }
}

impl Drop for HostDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `jailed` running `sh -c script` with `cwd` as its starting directory.
pub(super) async fn sh_in(jailed: Jailed, cwd: &Path, script: &str) -> Outcome {
    let mut command = jailed.command(&["sh", "-c", script]);
    command.current_dir(cwd);
    let audit = jailed.audit_path();
    tokio::task::spawn_blocking(move || finish(command.spawn_child(), &audit))
        .await
        .expect("join")
}

/// A script that tries to create `name` in each of `dirs`, printing `wrote DIR` or
/// `refused DIR` for each.
fn try_writes(dirs: &[&Path], name: &str) -> String {
    let dirs: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    format!(
        "echo uid=$(id -u); for d in {}; do \
         if (echo x > \"$d/{name}\") 2>/dev/null; then echo \"wrote $d\"; \
         else echo \"refused $d\"; fi; done",
        dirs.join(" ")
    )
}

/// As root outside any jail, the write the jail refuses works: the probe is real.
fn root_can_write_outside(dir: &Path) {
    let probe = dir.join("outside");
    let status = Command::new("sh")
        .args(["-c", &format!("echo x > {}", probe.display())])
        .status()
        .expect("run sh");
    assert!(
        status.success() && probe.exists(),
        "root cannot write {dir:?}"
    );
    std::fs::remove_file(probe).unwrap();
}

#[tokio::test]
async fn a_root_command_writes_only_in_the_starting_directory_tmp_and_writable_places() {
    require_jail!();
    let host = HostDir::new("files-host");
    let start = HostDir::new("files-start");
    let extra = HostDir::new("files-extra");
    let tmp = Path::new("/tmp");
    root_can_write_outside(&host.0);
    let name = format!("jailed-{}", std::process::id());
    let script = try_writes(&[&host.0, &start.0, tmp, &extra.0], &name);
    let jailed = Jailed::new(Org::new().to_toml())
        .arg("--writable")
        .arg(&extra.0);
    let out = sh_in(jailed, &start.0, &script).await;
    assert_eq!(out.code(), Some(0), "{out}");
    assert!(out.stdout.contains("uid=0"), "CMD is not uid 0: {out}");
    let line = |verb: &str, dir: &Path| format!("{verb} {}", dir.display());
    assert!(out.stdout.contains(&line("refused", &host.0)), "{out}");
    assert!(!host.0.join(&name).exists(), "CMD wrote outside its places");
    for dir in [&start.0, &extra.0] {
        assert!(out.stdout.contains(&line("wrote", dir)), "{dir:?}: {out}");
        assert!(dir.join(&name).exists(), "{dir:?}");
    }
    // The jail's own /tmp: written there, not in the host's.
    assert!(out.stdout.contains(&line("wrote", tmp)), "{out}");
    assert!(!tmp.join(&name).exists(), "CMD wrote in the host's /tmp");
    assert!(
        !out.stderr.contains("network-only"),
        "a notice without --writable /: {out}"
    );
}

#[tokio::test]
async fn writable_root_gives_back_a_writable_filesystem_and_says_the_jail_is_network_only() {
    require_jail!();
    let host = HostDir::new("files-everything");
    let name = "jailed";
    let jailed = Jailed::new(Org::new().to_toml()).arg("--writable").arg("/");
    let out = sh_in(jailed, &host.0, &try_writes(&[&host.0], name)).await;
    assert_eq!(out.code(), Some(0), "{out}");
    assert!(out.stdout.contains("wrote"), "{out}");
    assert!(host.0.join(name).exists());
    assert!(
        out.stderr.contains("--writable /") && out.stderr.contains("network-only"),
        "no notice: {out}"
    );
}

#[tokio::test]
async fn a_writable_place_that_is_missing_or_the_jails_own_is_refused_with_125() {
    require_jail!();
    for (place, says) in [
        ("/no/such/place", "No such file"),
        ("/proc/self", "the jail makes its own /proc"),
        ("/dev/pts", "the jail makes its own /dev"),
    ] {
        let jailed = Jailed::new(Org::new().to_toml())
            .arg("--writable")
            .arg(place);
        let out = jailed.sh("echo ran").await;
        assert_eq!(out.code(), Some(125), "{place}: {out}");
        assert!(!out.stdout.contains("ran"), "{place}: {out}");
        assert!(out.stderr.contains(&format!("--writable {place}")), "{out}");
        assert!(out.stderr.contains(says), "{place}: {out}");
    }
}

/// The proxy's own files, all in `proxy/` of the starting directory (a directory of
/// their own): the organization file with a credential, `--policy`, the credential's
/// value file, a `--ca` directory and the audit log. CMD tries to read, write, move,
/// unmount and remove each and their directory; it may still create a file of its own.
async fn proxy_files_stay_covered(extra: &[&str]) {
    const SECRET: &str = "s3cr3t-token-value";
    let start = HostDir::new(&format!("covered{}", extra.len()));
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
    jailed.dir = start.0.join("proxy");
    let dir = jailed.dir.clone();
    std::fs::create_dir_all(dir.join("secrets")).unwrap();
    std::fs::write(dir.join("secrets/token"), SECRET).unwrap();
    let ca = ca_init(&dir);
    let mut jailed = jailed.arg("--ca").arg(&ca);
    for arg in extra {
        jailed = jailed.arg(*arg);
    }
    let files = [
        "proxy/org.toml",
        "proxy/policy.json",
        "proxy/secrets/token",
        "proxy/ca",
        "proxy/audit.jsonl",
    ];
    // A refused lookup first: the audit log has a record for CMD to try to read.
    let script = format!(
        "getent hosts denied.test; \
         for f in {}; do \
           echo \"$f read $(cat \"$f\" \"$f\"/* 2>/dev/null | wc -c)\"; \
           (echo x >> \"$f\") 2>/dev/null && echo \"$f written\"; \
           touch \"$f/new\" 2>/dev/null && echo \"$f written\"; \
         done; \
         echo \"proxy holds $(ls -A proxy | wc -l)\"; \
         touch proxy/new 2>/dev/null && echo 'proxy written'; \
         mv proxy proxy.moved 2>/dev/null && echo 'proxy moved'; \
         umount proxy 2>/dev/null && echo 'proxy unmounted'; \
         rm -rf proxy 2>/dev/null; [ -d proxy ] || echo 'proxy removed'; \
         grep -r {SECRET} . 2>/dev/null; \
         echo mine > mine && echo 'wrote mine'",
        files.join(" ")
    );
    let out = sh_in(jailed, &start.0, &script).await;
    assert_eq!(out.code(), Some(0), "{out}");
    for file in files {
        assert!(out.stdout.contains(&format!("{file} read 0\n")), "{out}");
        assert!(!out.stdout.contains(&format!("{file} written")), "{out}");
    }
    assert!(out.stdout.contains("proxy holds 0\n"), "{out}");
    for verb in ["written", "moved", "unmounted", "removed"] {
        assert!(!out.stdout.contains(&format!("proxy {verb}")), "{out}");
    }
    assert!(!out.stdout.contains(SECRET), "CMD found the secret: {out}");
    assert!(out.stdout.contains("wrote mine"), "not writable: {out}");
    // Nothing of them changed on the host, and each has something to read there: an
    // empty read above was a cover, not a miss.
    let read = |file: &str| std::fs::read_to_string(dir.join(file)).unwrap();
    assert_eq!(read("secrets/token"), SECRET);
    assert!(read("org.toml").contains("secure.test"));
    assert!(read("policy.json").contains("secure.test"));
    assert!(ca.join("ca-key.pem").is_file());
    let denied = out.audit.iter().any(|r| r["host"] == "denied.test");
    assert!(denied, "no audit record: {out}");
}

#[tokio::test]
async fn the_proxys_own_files_are_neither_readable_nor_writable_nor_movable() {
    require_jail!();
    proxy_files_stay_covered(&[]).await;
}

#[tokio::test]
async fn the_proxys_own_files_stay_covered_under_writable_root() {
    require_jail!();
    proxy_files_stay_covered(&["--writable", "/"]).await;
}

#[tokio::test]
async fn sys_and_proc_sys_stay_read_only_under_writable_root() {
    require_jail!();
    // Each mount at or below /sys, /proc/sys and /proc/sysrq-trigger, with its options;
    // then a write root may make without any capability but for a read-only mount.
    let script = "awk '$5 ~ \"^/sys(/|$)\" || $5 == \"/proc/sys\" || \
                  $5 == \"/proc/sysrq-trigger\" { print \"mount\", $5, $6 }' \
                  /proc/self/mountinfo; [ -e /proc/sysrq-trigger ] && echo has-sysrq; \
                  cat /proc/sys/kernel/core_pattern > /tmp/core-$$; \
                  cat /tmp/core-$$ > /proc/sys/kernel/core_pattern; rm -f /tmp/core-$$";
    let out = Jailed::new(Org::new().to_toml())
        .arg("--writable")
        .arg("/")
        .sh(script)
        .await;
    let mounts: Vec<&str> = out
        .stdout
        .lines()
        .filter(|l| l.starts_with("mount "))
        .collect();
    let mut places = vec!["/sys", "/proc/sys"];
    if out.stdout.contains("has-sysrq") {
        places.push("/proc/sysrq-trigger");
    }
    for place in places {
        assert!(
            mounts.iter().any(|l| l.split(' ').nth(1) == Some(place)),
            "no mount at {place}: {out}"
        );
    }
    for line in &mounts {
        assert!(
            line.ends_with(" ro") || line.contains(" ro,"),
            "{line}: {out}"
        );
    }
    assert!(
        out.stderr.contains("Read-only file system"),
        "core_pattern was not refused as read-only: {out}"
    );
}

#[tokio::test]
async fn the_jails_dev_has_no_disk_and_its_devices_and_terminals_work() {
    require_jail!();
    let disks = |script: &str| format!("find /dev -type b | wc -l; {script}");
    let outside = Command::new("sh")
        .args(["-c", &disks("")])
        .output()
        .unwrap();
    let host_disks: usize = String::from_utf8_lossy(&outside.stdout)
        .trim()
        .parse()
        .unwrap();
    let pty = format!(
        "{} -c 'import os, pty; m, s = pty.openpty(); os.write(s, b\"ok\\n\"); \
         print(\"pty\", os.ttyname(s), os.read(m, 9))'",
        super::python()
    );
    let script = disks(&format!(
        "echo x > /dev/null && echo null-ok; head -c 4 /dev/urandom | wc -c; {pty}"
    ));
    let out = Jailed::new(Org::new().to_toml())
        .arg("--writable")
        .arg("/")
        .sh(&script)
        .await;
    assert_eq!(out.code(), Some(0), "{out}");
    let mut lines = out.stdout.lines();
    assert_eq!(lines.next(), Some("0"), "a block device in the jail: {out}");
    if host_disks == 0 {
        eprintln!("note: the host's /dev has no block device either");
    }
    assert!(out.stdout.contains("null-ok"), "{out}");
    assert!(out.stdout.contains("\n4\n"), "{out}");
    assert!(out.stdout.contains("pty /dev/pts/"), "{out}");
    assert!(out.stdout.contains("b'ok\\r\\n'"), "{out}");
}

/// A root CMD opens every root-owned terminal of the host's `/dev/pts` without any
/// capability, the caller's included: the jail's `/dev/pts` is its own.
#[tokio::test]
async fn the_hosts_terminals_are_not_in_the_jail() {
    require_jail!();
    let host = nix::pty::openpty(None, None).expect("openpty");
    let name = nix::unistd::ttyname(&host.slave).expect("the slave's name");
    let probe = format!(
        "if [ -e {0} ]; then echo visible; else echo absent; fi",
        name.display()
    );
    let outside = Command::new("sh").args(["-c", &probe]).output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&outside.stdout).trim(),
        "visible",
        "the host's terminal {} is there outside the jail",
        name.display()
    );
    for writable in [false, true] {
        let mut jailed = Jailed::new(Org::new().to_toml());
        if writable {
            jailed = jailed.arg("--writable").arg("/");
        }
        let out = jailed.sh(&format!("{probe}; ls /dev/pts")).await;
        assert_eq!(out.code(), Some(0), "{out}");
        let lines: Vec<&str> = out.stdout.lines().collect();
        assert_eq!(lines, ["absent", "ptmx"], "writable /: {writable}: {out}");
    }
}
