//! A real `redis-server` on a free loopback port, started by the test (no persistence, so
//! a restart comes back empty), and a reader of everything it holds.
//!
//! Tests that need it skip, saying why, when `redis-server` is not installed (`.ci/run`
//! installs it).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::proxy::free_port;
use super::unique_temp_dir;

/// How long a started server may take to answer `PING`.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// `redis-server` on `PATH`, if installed.
fn binary() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("redis-server"))
        .find(|p| p.is_file())
}

/// A running `redis-server`; killed when dropped.
pub(crate) struct RedisServer {
    pub port: u16,
    bin: PathBuf,
    dir: PathBuf,
    child: Option<Child>,
}

impl RedisServer {
    /// Start one, or `None` (with the reason printed) when `redis-server` is missing.
    pub(crate) fn start(test: &str) -> Option<RedisServer> {
        let Some(bin) = binary() else {
            eprintln!(
                "skipping {test}: redis-server is not installed (apt-get install redis-server)"
            );
            return None;
        };
        let port = free_port("127.0.0.1".parse().unwrap()).port();
        let mut server = RedisServer {
            port,
            bin,
            dir: unique_temp_dir("redis"),
            child: None,
        };
        server.spawn();
        Some(server)
    }

    fn spawn(&mut self) {
        let child = Command::new(&self.bin)
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args([
                "--save",
                "",
                "--appendonly",
                "no",
                "--protected-mode",
                "yes",
            ])
            .arg("--dir")
            .arg(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server");
        self.child = Some(child);
        let started = Instant::now();
        while self.ping().is_err() {
            assert!(
                started.elapsed() < READY_TIMEOUT,
                "redis-server on port {} did not answer PING within {READY_TIMEOUT:?}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `redis://127.0.0.1:PORT`.
    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn connection(&self) -> redis::RedisResult<redis::Connection> {
        let client = redis::Client::open(self.url())?;
        let conn = client.get_connection_with_timeout(Duration::from_secs(2))?;
        conn.set_read_timeout(Some(Duration::from_secs(2)))?;
        Ok(conn)
    }

    fn ping(&self) -> redis::RedisResult<String> {
        redis::cmd("PING").query(&mut self.connection()?)
    }

    fn pid(&self) -> String {
        self.child.as_ref().expect("running").id().to_string()
    }

    fn signal(&self, name: &str) {
        let sent = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.pid())
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -{name} redis-server failed");
    }

    /// SIGSTOP: the server keeps its connections and answers nothing.
    pub(crate) fn pause(&self) {
        self.signal("STOP");
    }

    /// SIGCONT: a paused server answers again.
    pub(crate) fn resume(&self) {
        self.signal("CONT");
    }

    /// SIGKILL, and wait for it to be gone.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// A new server on the same port: empty (no persistence).
    pub(crate) fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Every key, and every value under it (hash fields and values, strings), as text.
    pub(crate) fn dump(&self) -> Vec<String> {
        let mut conn = self.connection().expect("connect to redis");
        let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conn).expect("KEYS");
        let mut out = Vec::new();
        for key in keys {
            let kind: String = redis::cmd("TYPE").arg(&key).query(&mut conn).expect("TYPE");
            let values: Vec<String> = match kind.as_str() {
                "hash" => redis::cmd("HGETALL").arg(&key).query(&mut conn),
                "string" => redis::cmd("GET")
                    .arg(&key)
                    .query(&mut conn)
                    .map(|v| vec![v]),
                "set" => redis::cmd("SMEMBERS").arg(&key).query(&mut conn),
                "list" => redis::cmd("LRANGE")
                    .arg(&key)
                    .arg(0)
                    .arg(-1)
                    .query(&mut conn),
                "zset" => redis::cmd("ZRANGE")
                    .arg(&key)
                    .arg(0)
                    .arg(-1)
                    .query(&mut conn),
                other => panic!("key {key} of type {other}: the test cannot read it"),
            }
            .expect("read value");
            out.push(key);
            out.extend(values);
        }
        out
    }

    /// How many commands of `name` (`hgetall`, `pexpire`...) the server has run, and of
    /// all kinds, from `INFO commandstats`.
    pub(crate) fn command_counts(&self) -> Vec<(String, u64)> {
        let mut conn = self.connection().expect("connect to redis");
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut conn)
            .expect("INFO");
        info.lines()
            .filter_map(|l| {
                let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
                let calls = rest.split(',').find_map(|f| f.strip_prefix("calls="))?;
                Some((name.to_string(), calls.parse().ok()?))
            })
            .collect()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
