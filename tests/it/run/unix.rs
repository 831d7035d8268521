//! Unix sockets of the host are out of CMD's reach (docs/reference/confinement.md, "Unix
//! sockets"): a server on the host listening in the starting directory, in `$HOME` or in
//! the host's `/tmp` (shown with `--writable /tmp`) never sees a connection from CMD, as
//! root or as another user, while each is reachable from outside the jail and, with
//! `--allow-unix`, from inside; CMD's own sockets, `socketpair` and abstract sockets work.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::{finish, require_jail, Jailed, Outcome};

/// A server on the host that counts the connections it accepts.
struct HostSocket {
    path: PathBuf,
    accepted: Arc<AtomicUsize>,
}

impl HostSocket {
    fn listen(path: PathBuf) -> HostSocket {
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).expect("bind a host socket");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&accepted);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                count.fetch_add(1, Ordering::SeqCst);
                let _ = std::io::Write::write_all(&mut &stream, b"host\n");
            }
        });
        HostSocket { path, accepted }
    }

    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Reachable from outside the jail: a broken probe cannot pass.
    fn reachable_from_the_host(&self) {
        let before = self.accepted();
        UnixStream::connect(&self.path).expect("the host reaches its own socket");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while self.accepted() == before && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(self.accepted(), before + 1, "{}", self.path.display());
    }
}

impl Drop for HostSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Directories on the host outside `/tmp` (which the jail may make its own): the
/// starting directory and a home, open to every user so that only the jail refuses.
fn host_dirs(tag: &str) -> (PathBuf, PathBuf) {
    let base =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("unix-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let (start, home) = (base.join("work"), base.join("home"));
    for dir in [&base, &start, &home] {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    (start, home)
}

/// Tries each path from CMD, then its own socket in /tmp, `socketpair` and an abstract
/// socket of its own; prints one line each.
const PROBE: &str = r#"
import socket, sys, threading
for path in sys.argv[1:]:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path)
        print("open", path)
    except OSError as e:
        print("refused", path, e.errno)
def own(address):
    l = socket.socket(socket.AF_UNIX)
    l.bind(address)
    l.listen()
    threading.Thread(target=lambda: l.accept()[0].sendall(b"ok"), daemon=True).start()
    c = socket.socket(socket.AF_UNIX)
    c.connect(address)
    return c.recv(2).decode()
import os
mine = "/tmp/own-%s.sock" % os.urandom(6).hex()
print("own", own(mine))
os.unlink(mine)
print("abstract", own("\0egress-proxy-own"))
a, b = socket.socketpair()
a.sendall(b"ok")
print("socketpair", b.recv(2).decode())
"#;

async fn probe(start: &Path, home: &Path, extra: &[&str], paths: &[&Path]) -> Outcome {
    let mut jailed = Jailed::new(crate::support::org::Org::standard(80).to_toml())
        .env("HOME", home.to_str().unwrap())
        .arg("--writable")
        .arg("/tmp");
    for arg in extra {
        jailed = jailed.arg(*arg);
    }
    let audit = jailed.audit_path();
    // Another user cannot run an interpreter under root's home (a version manager's).
    let python = if extra.contains(&"--user") {
        "/usr/bin/python3"
    } else {
        super::python()
    };
    let mut cmd: Vec<&str> = vec![python, "-c", PROBE];
    cmd.extend(paths.iter().map(|p| p.to_str().unwrap()));
    let mut command: Command = jailed.command(&cmd);
    command.current_dir(start);
    tokio::task::spawn_blocking(move || finish(command.spawn().expect("spawn run"), &audit))
        .await
        .unwrap()
}

fn assert_own_sockets_work(out: &Outcome) {
    for line in ["own ok", "abstract ok", "socketpair ok"] {
        assert!(out.stdout.contains(line), "{line}: {out}");
    }
}

async fn host_sockets_are_refused(user: Option<&str>) {
    let (start, home) = host_dirs(user.unwrap_or("root"));
    let tmp = PathBuf::from(format!(
        "/tmp/egress-proxy-unix-{}.sock",
        std::process::id()
    ));
    let servers = [
        HostSocket::listen(start.join("daemon.sock")),
        HostSocket::listen(home.join("agent.sock")),
        HostSocket::listen(tmp),
    ];
    for server in &servers {
        server.reachable_from_the_host();
    }
    let before: Vec<usize> = servers.iter().map(HostSocket::accepted).collect();
    let paths: Vec<&Path> = servers.iter().map(|s| s.path.as_path()).collect();
    // The starting directory's socket also by a relative name.
    let mut paths_and_relative = paths.clone();
    paths_and_relative.push(Path::new("daemon.sock"));
    let user_args: Vec<&str> = user.map(|u| vec!["--user", u]).unwrap_or_default();
    let out = probe(&start, &home, &user_args, &paths_and_relative).await;
    assert_eq!(out.code(), Some(0), "{out}");
    for path in &paths_and_relative {
        let line = format!("refused {} {}", path.display(), libc::EACCES);
        assert!(out.stdout.contains(&line), "{line}: {out}");
    }
    let after: Vec<usize> = servers.iter().map(HostSocket::accepted).collect();
    assert_eq!(before, after, "a host server saw a connection: {out}");
    assert_own_sockets_work(&out);
    // The same probe reaches the one socket --allow-unix names, and only it.
    let allow = servers[0].path.to_str().unwrap().to_string();
    let mut args = user_args.clone();
    args.extend(["--allow-unix", allow.as_str()]);
    let out = probe(&start, &home, &args, &paths).await;
    assert!(out.stdout.contains(&format!("open {allow}")), "{out}");
    assert!(out.stderr.contains("--allow-unix"), "run says so: {out}");
    assert_eq!(servers[0].accepted(), before[0] + 1, "{out}");
    assert_eq!(servers[1].accepted(), before[1], "{out}");
    let _ = std::fs::remove_dir_all(start.parent().unwrap());
}

#[tokio::test]
async fn a_root_command_cannot_connect_to_the_hosts_unix_sockets() {
    require_jail!();
    host_sockets_are_refused(None).await;
}

#[tokio::test]
async fn another_user_cannot_connect_to_the_hosts_unix_sockets() {
    require_jail!();
    host_sockets_are_refused(Some("nobody")).await;
}

#[tokio::test]
async fn a_tmux_server_on_the_host_cannot_run_commands_for_cmd() {
    require_jail!();
    if Command::new("tmux").arg("-V").output().is_err() {
        eprintln!("skipped: tmux is not installed");
        return;
    }
    let (start, home) = host_dirs("tmux");
    let socket = start.join("tmux.sock");
    let escaped = start.join("escaped");
    let tmux = |args: &[&str]| {
        Command::new("tmux")
            .arg("-S")
            .arg(&socket)
            .args(args)
            .output()
            .expect("tmux")
    };
    assert!(tmux(&["new-session", "-d", "sleep 60"]).status.success());
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o777)).unwrap();
    // Reachable from the host: the same run-shell there does run.
    let probe = start.join("from-host");
    let shell = format!("touch {}", probe.display());
    assert!(tmux(&["run-shell", &shell]).status.success());
    assert!(probe.exists(), "tmux runs commands for the host");
    let script = format!(
        "tmux -S {s} run-shell 'touch {e}'; echo rc=$?; tmux -S {s} send-keys 'touch {e}' Enter; echo rc=$?",
        s = socket.display(),
        e = escaped.display()
    );
    let audit_dir = Jailed::new(crate::support::org::Org::standard(80).to_toml())
        .env("HOME", home.to_str().unwrap());
    let audit = audit_dir.audit_path();
    let mut command = audit_dir.command(&["sh", "-c", &script]);
    command.current_dir(&start);
    let out = tokio::task::spawn_blocking(move || finish(command.spawn().unwrap(), &audit))
        .await
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let _ = tmux(&["kill-server"]);
    assert!(
        !escaped.exists(),
        "the host's tmux ran CMD's command: {out}"
    );
    assert!(out.stderr.contains("Permission denied"), "{out}");
    let _ = std::fs::remove_dir_all(start.parent().unwrap());
}
