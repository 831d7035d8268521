//! The leaky lab: a network namespace of the test's own whose loopback carries the
//! public addresses the probe tries, with the test's servers behind them
//! ([`super::servers`]), a daemon-like Unix socket, and a resolv.conf naming 8.8.8.8.
//! An open lab leaves every channel open (and has an IPv6 route off loopback, through a veth pair); a closed
//! one drops everything to those addresses (nftables, at input) and its socket has no
//! listener. The probe runs only in here, never in the host's namespace.

use std::net::SocketAddr;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::net::{TcpListener, UdpSocket};

use super::servers::{self, LabProxy};
use crate::support::proxy::binary;

/// The addresses on the lab's loopback.
const V4: [&str; 3] = ["1.1.1.1", "8.8.8.8", "169.254.169.254"];
const V6: [&str; 2] = ["2606:4700:4700::1111", "fd00:ec2::254"];
/// The lab proxy's address, which `HTTP_PROXY` and `HTTPS_PROXY` name.
pub(super) const PROXY: &str = "127.0.0.1:3128";
/// The credentials in the proxy variables (the user `probe`, the password `s3cr%et`),
/// as a gateway's session puts them there: the open lab's proxy requires them.
pub(super) const PROXY_USERINFO: &str = "probe:s3cr%25et";
/// How long one probe may take before the test fails.
const PROBE_LIMIT: Duration = Duration::from_secs(30);

static NEXT: AtomicU32 = AtomicU32::new(0);

pub(super) struct Lab {
    name: String,
    pub dir: PathBuf,
    _socket: Option<UnixListener>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// What a probe in the lab printed and how it exited.
#[derive(Debug)]
pub(super) struct Probed {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    pub took: Duration,
}

impl Probed {
    pub(super) fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("{e}: {self:#?}"))
    }

    /// Each check's result, by id.
    pub(super) fn results(&self) -> Vec<(String, String)> {
        let doc = self.json();
        doc["checks"]
            .as_array()
            .expect("checks")
            .iter()
            .map(|c| {
                (
                    c["id"].as_str().unwrap().into(),
                    c["result"].as_str().unwrap().into(),
                )
            })
            .collect()
    }
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| e.to_string())?;
    match out.status.success() {
        true => Ok(()),
        false => Err(format!(
            "ip {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        )),
    }
}

impl Lab {
    /// A lab whose channels are all open (`open`) or all closed.
    pub(super) fn new(open: bool) -> Lab {
        let name = format!(
            "ep-probe-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(&name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("home/run")).unwrap();
        std::fs::write(dir.join("resolv.conf"), "nameserver 8.8.8.8\n").unwrap();
        ip(&["netns", "add", &name]).unwrap();
        let mut lab = Lab {
            name,
            dir,
            _socket: None,
            stop: None,
            thread: None,
        };
        let n = lab.name.clone();
        ip(&["-n", &n, "link", "set", "lo", "up"]).unwrap();
        for a in V4 {
            ip(&["-n", &n, "addr", "add", &format!("{a}/32"), "dev", "lo"]).unwrap();
        }
        for a in V6 {
            ip(&[
                "-n",
                &n,
                "-6",
                "addr",
                "add",
                &format!("{a}/128"),
                "dev",
                "lo",
                "nodad",
            ])
            .unwrap();
        }
        let socket = lab.dir.join("home/run/daemon.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        if open {
            // An IPv6 route off loopback: a veth pair (whose ends are both in the lab).
            ip(&[
                "-n", &n, "link", "add", "v0", "type", "veth", "peer", "name", "v1",
            ])
            .unwrap();
            for dev in ["v0", "v1"] {
                ip(&["-n", &n, "link", "set", dev, "up"]).unwrap();
            }
            ip(&[
                "-n",
                &n,
                "-6",
                "addr",
                "add",
                "fd00:1::1/64",
                "dev",
                "v0",
                "nodad",
            ])
            .unwrap();
            lab._socket = Some(listener);
        } else {
            drop(listener); // the socket file stays, with nothing listening
            lab.nft_drop();
        }
        lab.start_servers(if open {
            LabProxy::Open
        } else {
            LabProxy::Refusing
        });
        lab
    }

    fn nft_drop(&self) {
        let rules = format!(
            "table inet lab {{\n chain input {{\n  type filter hook input priority 0; policy accept;\n  ip daddr {{ {} }} drop\n  ip6 daddr {{ {} }} drop\n }}\n}}\n",
            V4.join(", "),
            V6.join(", ")
        );
        let path = self.dir.join("lab.nft");
        std::fs::write(&path, rules).unwrap();
        let path = path.to_str().unwrap();
        let out = Command::new("ip")
            .args(["netns", "exec", &self.name, "nft", "-f", path])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "nft: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Bind every server inside the namespace, on a thread that entered it.
    fn start_servers(&mut self, proxy: LabProxy) {
        let netns = format!("/run/netns/{}", self.name);
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), String>>();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let entered = std::fs::File::open(&netns)
                .map_err(|e| e.to_string())
                .and_then(|f| {
                    nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET)
                        .map_err(|e| e.to_string())
                });
            if let Err(e) = entered {
                let _ = ready_tx.send(Err(format!("setns {netns}: {e}")));
                return;
            }
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let _ = ready_tx.send(bind_all(proxy).await.map_err(|e| e.to_string()));
                let _ = stop_rx.await;
            });
        });
        let ready = ready_rx.recv_timeout(Duration::from_secs(10));
        self.stop = Some(stop_tx);
        self.thread = Some(thread);
        ready
            .expect("the lab's servers start")
            .expect("the lab's servers bind");
    }

    /// `egress-proxy probe ARGS` inside the lab, with the proxy variables naming the
    /// lab's proxy, `$HOME` the lab's, and fresh `/tmp` and `/run`.
    pub(super) fn probe(&self, args: &[&str]) -> Probed {
        // The lab's directory and the binary may lie under /tmp (a checkout there): they
        // are kept in the fresh /run first and bound back once /tmp is fresh.
        let script = r#"set -e
mount -t tmpfs lab /run
mkdir /run/keep
mount --bind "$LAB_DIR" /run/keep
touch /run/keep-bin
mount --bind "$1" /run/keep-bin
mount --bind "$LAB_RESOLV" /etc/resolv.conf
mount -t tmpfs lab /tmp
mkdir -p "$LAB_DIR" "$(dirname "$1")"
mount --bind /run/keep "$LAB_DIR"
[ -e "$1" ] || touch "$1"
mount --bind /run/keep-bin "$1"
exec "$@""#;
        let mut cmd = Command::new("ip");
        cmd.args([
            "netns",
            "exec",
            &self.name,
            "unshare",
            "-m",
            "--propagation",
            "private",
        ])
        .args(["sh", "-c", script, "sh"])
        .arg(binary())
        .arg("probe")
        .args(args);
        for var in [
            "http_proxy",
            "https_proxy",
            "all_proxy",
            "ALL_PROXY",
            "no_proxy",
            "NO_PROXY",
        ] {
            cmd.env_remove(var);
        }
        let proxy = format!("http://{PROXY_USERINFO}@{PROXY}");
        cmd.env("HTTP_PROXY", &proxy).env("HTTPS_PROXY", &proxy);
        cmd.env("HOME", self.dir.join("home"))
            .env("LAB_RESOLV", self.dir.join("resolv.conf"))
            .env("LAB_DIR", &self.dir);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let start = Instant::now();
        let mut child = cmd.spawn().expect("start the probe");
        while child.try_wait().unwrap().is_none() {
            if start.elapsed() > PROBE_LIMIT {
                let _ = child.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let took = start.elapsed();
        let out = child.wait_with_output().unwrap();
        Probed {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            took,
        }
    }
}

async fn bind_all(proxy: LabProxy) -> std::io::Result<()> {
    let tcp = |a: &str| TcpListener::bind(a.parse::<SocketAddr>().unwrap());
    for a in ["1.1.1.1:443", "[2606:4700:4700::1111]:443", "1.1.1.1:853"] {
        servers::tls(tcp(a).await?);
    }
    for a in [
        "1.1.1.1:80",
        "[2606:4700:4700::1111]:80",
        "169.254.169.254:80",
        "[fd00:ec2::254]:80",
    ] {
        servers::http(tcp(a).await?);
    }
    for a in ["1.1.1.1:53", "8.8.8.8:53"] {
        servers::dns_udp(UdpSocket::bind(a).await?);
        servers::dns_tcp(tcp(a).await?);
    }
    servers::udp_echo(UdpSocket::bind("1.1.1.1:443").await?);
    servers::proxy(tcp(PROXY).await?, proxy);
    Ok(())
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let _ = ip(&["netns", "del", &self.name]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
