//! A real parent proxy: Debian's `squid`, started by the test on a free loopback port,
//! with an access log that shows what reached it (method, URL or `CONNECT` authority,
//! status, the user it authenticated, the `Proxy-Authorization` it received, and the
//! client port, which tells connections apart).
//!
//! Its names come from a hosts file of its own and its DNS server is 127.0.0.1, so it
//! never asks the system resolver. With credentials required, squid's
//! `basic_fake_auth` helper accepts any user and password and logs the user.
//! Tests skip, saying why, when `squid` is missing (`.ci/run` installs it).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::proxy::free_port;
use super::unique_temp_dir;

const SQUID: &str = "/usr/sbin/squid";
const FAKE_AUTH: &str = "/usr/lib/squid/basic_fake_auth";

/// How long squid may take to accept connections after it starts.
const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// How long a transaction's line may take to reach the access log (squid writes it
/// when the transaction ends: a tunnel's when the tunnel closes).
pub(crate) const LOG_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the parent-proxy tests cannot run here, if they cannot.
pub(crate) fn skip_reason() -> Option<String> {
    if !Path::new(SQUID).is_file() || !Path::new(FAKE_AUTH).is_file() {
        return Some(format!("{SQUID} is not installed (apt-get install squid)"));
    }
    None
}

/// Return from the test, saying why, when squid is missing.
macro_rules! require_squid {
    () => {
        if let Some(reason) = crate::support::squid::skip_reason() {
            eprintln!("skipped: {reason}");
            return;
        }
    };
}
pub(crate) use require_squid;

/// One `squid -N`; killed (by its PID) when dropped.
pub(crate) struct Squid {
    child: Child,
    pub addr: SocketAddr,
    dir: PathBuf,
}

/// One line of the access log.
#[derive(Debug, Clone)]
pub(crate) struct Logged {
    pub method: String,
    /// The absolute URL of a plain request, the authority of a `CONNECT`.
    pub target: String,
    pub status: u16,
    /// The user squid authenticated, `-` for none.
    pub user: String,
    /// The `Proxy-Authorization` it received (URL-encoded by squid), `-` for none.
    pub authorization: String,
    /// The port of the client connection it came on.
    pub client_port: u16,
}

impl Squid {
    /// A parent that asks for credentials (any accepted) when `auth`, and knows the
    /// names `hosts` as 127.0.0.1.
    pub(crate) fn start(auth: bool, hosts: &[&str]) -> Squid {
        let dir = unique_temp_dir("squid");
        // Squid started as root runs as `proxy`, which writes the logs here.
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o777))
            .unwrap();
        let hosts_file: String = hosts.iter().map(|h| format!("127.0.0.1 {h}\n")).collect();
        std::fs::write(dir.join("hosts"), hosts_file).unwrap();
        let addr = free_port("127.0.0.1".parse().unwrap());
        let d = dir.display();
        let access = match auth {
            true => format!(
                "auth_param basic program {FAKE_AUTH}\nacl authed proxy_auth REQUIRED\n\
                 http_access allow authed\nhttp_access deny all\n"
            ),
            false => {
                "acl local src 127.0.0.0/8\nhttp_access allow local\nhttp_access deny all\n".into()
            }
        };
        let config = format!(
            "http_port {addr}\npid_filename {d}/squid.pid\n\
             logformat egress %rm %ru %>Hs %un %{{Proxy-Authorization}}>h %>p\n\
             access_log stdio:{d}/access.log logformat=egress\ncache_log {d}/cache.log\n\
             cache deny all\ncache_mem 8 MB\ncoredump_dir {d}\nhosts_file {d}/hosts\n\
             dns_nameservers 127.0.0.1\npinger_enable off\nnetdb_filename none\n\
             shutdown_lifetime 0 seconds\nstrip_query_terms off\n{access}"
        );
        std::fs::write(dir.join("squid.conf"), config).unwrap();
        let out = std::fs::File::create(dir.join("squid.out")).unwrap();
        let child = Command::new(SQUID)
            // Its own service name: stopping it cannot remove another squid's
            // shared-memory segments (docs/guides/parent-proxy.md).
            .args(["-N", "-n"])
            .arg(format!("egressit{}x{}", std::process::id(), addr.port()))
            .arg("-f")
            .arg(dir.join("squid.conf"))
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("start squid");
        let mut squid = Squid { child, addr, dir };
        squid.wait_listening();
        squid
    }

    fn wait_listening(&mut self) {
        let started = Instant::now();
        while std::net::TcpStream::connect(self.addr).is_err() {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "squid exited ({status}) before listening:\n{}",
                    self.diagnostics()
                );
            }
            assert!(
                started.elapsed() < READY_TIMEOUT,
                "squid did not listen within {READY_TIMEOUT:?}:\n{}",
                self.diagnostics()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `http://[USER:PASS@]ADDR`, for `--upstream-proxy`.
    pub(crate) fn url(&self, credentials: Option<&str>) -> String {
        match credentials {
            Some(c) => format!("http://{c}@{}", self.addr),
            None => format!("http://{}", self.addr),
        }
    }

    /// Every access-log line so far, but the connections that sent nothing (the
    /// readiness probe's).
    pub(crate) fn logged(&self) -> Vec<Logged> {
        let text = std::fs::read_to_string(self.dir.join("access.log")).unwrap_or_default();
        text.lines()
            .filter_map(parse_line)
            .filter(|l| l.method != "-")
            .collect()
    }

    /// The first logged line `pred` accepts, waiting for it; panics past [`LOG_TIMEOUT`].
    pub(crate) async fn wait_logged(&self, pred: impl Fn(&Logged) -> bool) -> Logged {
        let started = Instant::now();
        loop {
            if let Some(line) = self.logged().into_iter().find(&pred) {
                return line;
            }
            assert!(
                started.elapsed() < LOG_TIMEOUT,
                "squid logged no such line within {LOG_TIMEOUT:?}:\n{:#?}\n{}",
                self.logged(),
                self.diagnostics()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Its own output and cache log, for a failing test's message.
    pub(crate) fn diagnostics(&self) -> String {
        let read = |name: &str| std::fs::read_to_string(self.dir.join(name)).unwrap_or_default();
        format!(
            "squid output:\n{}\ncache.log:\n{}",
            read("squid.out"),
            read("cache.log")
        )
    }
}

fn parse_line(line: &str) -> Option<Logged> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let [method, target, status, user, authorization, port] = fields[..] else {
        return None;
    };
    Some(Logged {
        method: method.to_string(),
        target: target.to_string(),
        status: status.parse().ok()?,
        user: user.to_string(),
        authorization: authorization.replace("%20", " "),
        client_port: port.parse().ok()?,
    })
}

impl Drop for Squid {
    fn drop(&mut self) {
        // SIGKILL, by its PID: squid's helpers (basic_fake_auth) end with their pipe.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
