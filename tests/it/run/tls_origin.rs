//! An HTTPS origin on the host's loopback for the real-tool tests: a Python server
//! (`tests/fixtures/run/tls_origin.py`) serving static files (a PEP 503 index) and git's
//! smart HTTP (`git http-backend` as CGI), under a certificate from a test CA the tools
//! in the jail are told to trust.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};

/// One origin process; killed (by its PID) when dropped.
pub(super) struct TlsOrigin {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl TlsOrigin {
    /// Start it with a certificate for `names`, signed by a fresh test CA.
    pub(super) fn start(names: &[&str]) -> TlsOrigin {
        let dir = super::shared_dir("tls-origin");
        write_certificates(&dir, names);
        for sub in ["root", "git"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        std::fs::write(dir.join("root/hello"), "hello from tls origin\n").unwrap();
        let stderr = std::fs::File::create(dir.join("origin.err")).unwrap();
        let mut child = Command::new("python3")
            .arg(Path::new("tests/fixtures/run/tls_origin.py"))
            .args(["cert.pem", "key.pem", "root", "git", "requests.log"].map(|f| dir.join(f)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("start tls_origin.py");
        let mut line = String::new();
        let stdout = child.stdout.take().unwrap();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        let port = line.trim().parse().unwrap_or_else(|_| {
            let err = std::fs::read_to_string(dir.join("origin.err")).unwrap_or_default();
            panic!("tls_origin.py printed no port: {line:?}\n{err}")
        });
        TlsOrigin { child, port, dir }
    }

    pub(super) fn port(&self) -> u16 {
        self.port
    }

    /// The test CA's certificate (PEM), for `--cacert`, `PIP_CERT`, `GIT_SSL_CAINFO`.
    pub(super) fn ca(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// Where the static files are served from (`/` maps here).
    pub(super) fn root(&self) -> PathBuf {
        self.dir.join("root")
    }

    /// `GIT_PROJECT_ROOT`: `/git/NAME.git` serves the bare repository `NAME.git` here.
    pub(super) fn git_root(&self) -> PathBuf {
        self.dir.join("git")
    }

    /// Every request received so far: `METHOD PATH SERVER_NAME`.
    pub(super) fn requests(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.join("requests.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// The requests that came with TLS server name `name`.
    pub(super) fn requests_for(&self, name: &str) -> Vec<String> {
        let suffix = format!(" {name}");
        self.requests()
            .into_iter()
            .filter(|r| r.ends_with(&suffix))
            .collect()
    }

    /// What the server wrote on standard error (tracebacks of failed handshakes).
    pub(super) fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.join("origin.err")).unwrap_or_default()
    }
}

impl Drop for TlsOrigin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `ca.pem` (a CA certificate), `cert.pem` and `key.pem` (a server certificate for
/// `names` signed by it) in `dir`.
fn write_certificates(dir: &Path, names: &[&str]) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "egress-proxy test CA");
    let ca = ca.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let mut leaf = CertificateParams::new(names).unwrap();
    leaf.distinguished_name
        .push(DnType::CommonName, "egress-proxy test origin");
    let leaf = leaf.signed_by(&key, &ca, &ca_key).unwrap();
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
    std::fs::write(dir.join("cert.pem"), leaf.pem()).unwrap();
    std::fs::write(dir.join("key.pem"), key.serialize_pem()).unwrap();
}
