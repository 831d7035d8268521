//! The caller's descriptors stay out of the jail, and the jail's init out of CMD's reach
//! (docs/guides/confinement.md, "The terminal and descriptors").

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::run::{finish, python, require_jail, wait_for_file, wait_for_init, Jailed, Outcome};

/// A directory of the host's outside every writable place (not under the starting
/// directory, /tmp or /var/tmp), removed when dropped.
struct HostDir(PathBuf);

impl Drop for HostDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[tokio::test]
async fn run_leaves_the_callers_descriptors_out_of_the_jail_and_init_out_of_reach() {
    require_jail!();
    let host = HostDir(PathBuf::from(format!(
        "/var/lib/egress-proxy-it-kernel-{}",
        std::process::id()
    )));
    std::fs::create_dir_all(&host.0).unwrap();
    let file = host.0.join("held.txt");
    std::fs::write(&file, "host\n").unwrap();
    // The probe works where a process holds the descriptors: a host `sleep` given 7 and 8.
    let mut holder = with_fds(Command::new("sleep").arg("30"), &file, &host.0)
        .spawn()
        .unwrap();
    let pid = holder.id();
    let started = std::time::Instant::now();
    while std::fs::read_to_string(format!("/proc/{pid}/comm")).map_or(true, |c| c != "sleep\n") {
        assert!(started.elapsed().as_secs() < 10, "sleep did not start");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let reach = |pid: u32| {
        format!(
            "echo planted >> /proc/{pid}/fd/7 && echo APPENDED; \
             touch /proc/{pid}/fd/8/planted && echo CREATED; \
             ls /proc/{pid}/fd >/dev/null && echo LISTED; \
             (exec 9</proc/{pid}/mem) 2>/dev/null && echo MEMOPEN"
        )
    };
    let control = Command::new("sh")
        .args(["-c", &reach(pid)])
        .output()
        .unwrap();
    let _ = holder.kill();
    let _ = holder.wait();
    let control = String::from_utf8_lossy(&control.stdout).to_string();
    for done in ["APPENDED", "CREATED", "LISTED", "MEMOPEN"] {
        assert!(control.contains(done), "outside: {control}");
    }
    std::fs::write(&file, "host\n").unwrap();
    std::fs::remove_file(host.0.join("planted")).unwrap();

    let jailed = Jailed::new("version = 1\n");
    // The markers' directory, in the starting directory (the jail's /tmp is its own, and
    // the proxy's files' directory may not be a writable place).
    let dir = crate::run::shared_dir("kernel-fds");
    let wait = "touch \"$D/ready\"; while [ ! -e \"$D/go\" ]; do sleep 0.05; done";
    let probe = format!(
        "{reach}; {wait}; kill -TERM 1 2>&1; {py} -c \"{ptrace}\"; ls /proc/self/fd",
        reach = reach(1),
        py = python(),
        ptrace = "import ctypes; l = ctypes.CDLL(None, use_errno=True); \
                  r = l.ptrace(16, 1, 0, 0); print('attach', r, ctypes.get_errno())",
    );
    let jailed = jailed.env("D", dir.to_str().unwrap());
    let command = jailed.command(&["sh", "-c", &probe]);
    let mut child = with_fds(&command, &file, &host.0).spawn().unwrap();
    let init = wait_for_init(child.id());
    wait_for_file(&dir.join("ready"), &mut child);
    let held: Vec<String> = std::fs::read_dir(format!("/proc/{init}/fd"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    std::fs::write(dir.join("go"), "").unwrap();
    let out: Outcome = finish(child, &jailed.audit_path());
    assert!(
        !held.contains(&"7".into()) && !held.contains(&"8".into()),
        "the jail's init holds the caller's descriptors: {held:?}"
    );
    for done in ["APPENDED", "CREATED", "LISTED", "MEMOPEN"] {
        assert!(!out.stdout.contains(done), "{done}: {out}");
    }
    assert!(
        out.stdout.contains("Operation not permitted"),
        "kill: {out}"
    );
    // A SIGTERM that reached init would have come back to CMD, which it passes it on to.
    assert_eq!(out.code(), Some(0), "{out}");
    assert!(
        out.stdout.contains(&format!("attach -1 {}", libc::EPERM)),
        "{out}"
    );
    let own: Vec<&str> = out
        .stdout
        .lines()
        .rev()
        .take_while(|l| l.len() == 1)
        .collect();
    assert!(!own.contains(&"7") && !own.contains(&"8"), "{out}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "host\n");
    assert!(!host.0.join("planted").exists());
}

/// `command` run through `sh`, which opens fd 7 (append) on `file` and fd 8 on `dir`,
/// not close-on-exec, then executes it.
fn with_fds(command: &Command, file: &Path, dir: &Path) -> Command {
    let program = command.get_program().to_owned();
    let args: Vec<_> = command.get_args().map(|a| a.to_owned()).collect();
    let mut sh = Command::new("sh");
    sh.arg("-c")
        .arg("exec 7>>\"$0\" 8<\"$1\"; shift; exec \"$@\"")
        .arg(file)
        .arg(dir)
        .arg(program)
        .args(args);
    for (name, value) in command.get_envs() {
        match value {
            Some(value) => sh.env(name, value),
            None => sh.env_remove(name),
        };
    }
    sh.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    sh
}
