//! The jail's own temporary places and the proxy's executable (docs/reference/
//! confinement.md, "Files"): `/tmp`, `/var/tmp` and `/dev/shm` are fresh and empty, and
//! `--writable /tmp` binds the host's instead; CMD can neither change, replace, rename
//! nor remove the executable `run` runs from, even inside the starting directory.

use std::path::Path;
use std::process::{Command, Stdio};

use super::files::HostDir;
use super::{finish, require_jail, Jailed, SpawnChild};
use crate::support::org::Org;

#[tokio::test]
async fn the_temporary_places_are_the_jails_own_and_writable_tmp_binds_the_hosts() {
    require_jail!();
    let id = std::process::id();
    let places = ["/tmp", "/var/tmp", "/dev/shm"];
    for place in places {
        std::fs::write(format!("{place}/egress-it-host-{id}"), "host's\n").unwrap();
    }
    let script = format!(
        "for d in {}; do \
           cat $d/egress-it-host-{id} 2>/dev/null || echo \"$d: not seen\"; \
           echo mine > $d/egress-it-jail-{id} && echo \"$d: wrote\"; \
           echo \"$d: $(stat -c %a $d)\"; \
         done",
        places.join(" ")
    );
    let out = Jailed::new(Org::new().to_toml()).sh(&script).await;
    assert_eq!(out.code(), Some(0), "{out}");
    for place in places {
        // The host's file is there outside the jail: not seeing it inside is the jail.
        assert!(Path::new(&format!("{place}/egress-it-host-{id}")).exists());
        assert!(
            out.stdout.contains(&format!("{place}: not seen\n")),
            "{out}"
        );
        assert!(out.stdout.contains(&format!("{place}: wrote\n")), "{out}");
        assert!(out.stdout.contains(&format!("{place}: 1777\n")), "{out}");
        let jail_file = format!("{place}/egress-it-jail-{id}");
        assert!(
            !Path::new(&jail_file).exists(),
            "{jail_file} is on the host"
        );
    }
    assert!(!out.stdout.contains("host's"), "{out}");
    let out = Jailed::new(Org::new().to_toml())
        .arg("--writable")
        .arg("/tmp")
        .sh(&format!("cat /tmp/egress-it-host-{id}"))
        .await;
    assert_eq!(out.code(), Some(0), "{out}");
    assert_eq!(out.stdout, "host's\n", "{out}");
    for place in places {
        let _ = std::fs::remove_file(format!("{place}/egress-it-host-{id}"));
    }
}

/// The attempts on the executable at `exe` (relative) in its directory `dir` and that
/// directory's parent `parent` (both relative, `-` for none), each printing what worked.
fn attacks(exe: &str, dir: &str, parent: &str) -> String {
    format!(
        "E={exe}; cp /bin/true $E 2>/dev/null && echo overwritten; \
         (echo x >> $E) 2>/dev/null && echo appended; \
         mv $E $E.moved 2>/dev/null && echo moved; \
         rm -f $E 2>/dev/null; [ -e $E ] || echo removed; \
         [ {dir} = - ] || {{ mv {dir} {dir}.moved 2>/dev/null && echo dir-moved; }}; \
         [ {parent} = - ] || {{ mv {parent} {parent}.moved 2>/dev/null && echo parent-moved; }}; \
         echo done"
    )
}

const WORKED: [&str; 6] = [
    "overwritten",
    "appended",
    "moved",
    "removed",
    "dir-moved",
    "parent-moved",
];

#[tokio::test]
async fn the_proxys_executable_in_the_starting_directory_cannot_be_changed_replaced_or_moved() {
    require_jail!();
    // Outside the jail every attempt works on a file laid out the same way.
    let outside = HostDir::new("exe-outside");
    std::fs::create_dir_all(outside.0.join("target/release")).unwrap();
    std::fs::copy("/bin/true", outside.0.join("target/release/egress-proxy")).unwrap();
    let control = Command::new("sh")
        .args([
            "-c",
            &attacks("target/release/egress-proxy", "target/release", "target"),
        ])
        .current_dir(&outside.0)
        .output()
        .unwrap();
    let control = String::from_utf8_lossy(&control.stdout);
    for worked in [
        "overwritten",
        "appended",
        "removed",
        "dir-moved",
        "parent-moved",
    ] {
        assert!(control.contains(worked), "outside: {worked}: {control}");
    }
    for (exe, dir, parent) in [
        ("egress-proxy", "-", "-"),
        ("target/release/egress-proxy", "target/release", "target"),
    ] {
        let start = HostDir::new("exe-start");
        let copy = start.0.join(exe);
        std::fs::create_dir_all(copy.parent().unwrap()).unwrap();
        std::fs::copy(crate::support::proxy::binary(), &copy).unwrap();
        let original = std::fs::metadata(&copy).unwrap().len();
        let script = format!(
            "{}; ./{exe} --version && echo runs",
            attacks(exe, dir, parent)
        );
        let jailed = Jailed::new(Org::new().to_toml());
        let inner = jailed.command(&["sh", "-c", &script]);
        let mut command = Command::new(&copy);
        command.args(inner.get_args()).current_dir(&start.0);
        command.env_remove("SUDO_UID").env_remove("SUDO_GID");
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let audit = jailed.audit_path();
        let out = tokio::task::spawn_blocking(move || finish(command.spawn_child(), &audit))
            .await
            .unwrap();
        assert_eq!(out.code(), Some(0), "{exe}: {out}");
        for worked in WORKED {
            let line = out.stdout.lines().any(|l| l == worked);
            assert!(!line, "{exe}: CMD {worked} it: {out}");
        }
        assert!(
            out.stdout.contains("egress-proxy ") && out.stdout.contains("runs"),
            "{out}"
        );
        assert_eq!(std::fs::metadata(&copy).unwrap().len(), original, "{exe}");
    }
}
