//! The git scenario (docs/guides/inspection.md): real git, through the proxy, against a
//! smart-HTTP server over TLS (git's own `http-backend` behind
//! `tests/fixtures/git/server.py`). Smart HTTP fetches with `GET .../info/refs` then
//! `POST .../git-upload-pack`, and pushes with `POST .../git-receive-pack`: read-only
//! access stops even a clone, and one more entry for the upload-pack `POST` lets clone
//! and fetch work while a push is still refused and the repository stays unchanged.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use crate::support::org::Org;
use crate::support::proxy::{Proxy, ProxyBuilder};
use crate::support::tls::ca_init;
use crate::support::unique_temp_dir;

const BACKEND: &str = "/usr/lib/git-core/git-http-backend";

/// Why this machine cannot run the scenario, if it cannot.
pub(crate) fn missing_tools() -> Option<String> {
    for tool in ["git", "python3"] {
        let found = Command::new(tool).arg("--version").output();
        if !found.is_ok_and(|o| o.status.success()) {
            return Some(format!("{tool} is not installed"));
        }
    }
    (!Path::new(BACKEND).exists()).then(|| format!("{BACKEND} is missing"))
}

/// Run git with no user or system configuration, bounded in time.
pub(crate) fn git(dir: &Path, home: &Path, args: &[&str]) -> Output {
    git_trusting(dir, home, args, None)
}

/// [`git`], trusting only `ca` for HTTPS (`GIT_SSL_CAINFO`: the git here ignores
/// `-c http.sslCAInfo`).
fn git_trusting(dir: &Path, home: &Path, args: &[&str], ca: Option<&Path>) -> Output {
    let mut cmd = Command::new("timeout");
    if let Some(ca) = ca {
        // With curl's trace git prints each answer's status line, which names the
        // reason; without it, only "HTTP 403" (git drops a failed RPC's body, and curl 8
        // its reason phrase).
        cmd.env("GIT_SSL_CAINFO", ca).env("GIT_CURL_VERBOSE", "1");
    }
    cmd.arg("60")
        .arg("git")
        .args(args)
        .current_dir(dir)
        .env("HOME", home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env_remove("http_proxy")
        .env_remove("https_proxy")
        .env_remove("HTTPS_PROXY")
        .env_remove("ALL_PROXY")
        .output()
        .expect("run git")
}

pub(crate) fn ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The git host: a bare repository `acme/repo.git` with one commit, served over TLS
/// for `git.test`.
pub(crate) struct GitHost {
    pub(crate) dir: PathBuf,
    pub(crate) home: PathBuf,
    pub(crate) bare: PathBuf,
    port: u16,
    cert: PathBuf,
    log: PathBuf,
    child: Child,
}

impl GitHost {
    pub(crate) async fn start() -> GitHost {
        let dir = unique_temp_dir("git-host");
        let home = dir.join("home");
        std::fs::create_dir_all(&home).unwrap();
        let bare = dir.join("root/acme/repo.git");
        std::fs::create_dir_all(&bare).unwrap();
        ok(
            &git(&bare, &home, &["init", "--bare", "-b", "main"]),
            "git init --bare",
        );
        ok(
            &git(&bare, &home, &["config", "http.receivepack", "true"]),
            "git config",
        );
        let work = dir.join("seed");
        std::fs::create_dir_all(&work).unwrap();
        ok(&git(&work, &home, &["init", "-b", "main"]), "git init");
        std::fs::write(work.join("README"), "hello\n").unwrap();
        let ident = ["-c", "user.name=it", "-c", "user.email=it@example.test"];
        ok(&git(&work, &home, &["add", "README"]), "git add");
        let commit = [&ident[..], &["commit", "-m", "first"]].concat();
        ok(&git(&work, &home, &commit), "git commit");
        let push = ["push", bare.to_str().unwrap(), "main"];
        ok(&git(&work, &home, &push), "seed push");

        let certified = rcgen::generate_simple_self_signed(vec!["git.test".into()]).unwrap();
        let cert = dir.join("git.pem");
        let key = dir.join("git-key.pem");
        std::fs::write(&cert, certified.cert.pem()).unwrap();
        std::fs::write(&key, certified.key_pair.serialize_pem()).unwrap();
        let log = dir.join("requests.log");
        let server = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/git/server.py");
        let mut child = Command::new("python3")
            .arg(server)
            .arg(dir.join("root"))
            .arg(&cert)
            .arg(&key)
            .arg(&log)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the git server");
        let mut line = String::new();
        let stdout = child.stdout.take().unwrap();
        let port = tokio::task::spawn_blocking(move || {
            std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).unwrap();
            line.trim()
                .strip_prefix("listening on ")
                .unwrap()
                .parse::<u16>()
                .unwrap()
        })
        .await
        .unwrap();
        GitHost {
            dir,
            home,
            bare,
            port,
            cert,
            log,
            child,
        }
    }

    pub(crate) fn url(&self) -> String {
        format!("https://git.test:{}/acme/repo.git", self.port)
    }

    /// The commit `main` points at in the host's repository.
    pub(crate) fn head(&self) -> String {
        let out = git(&self.bare, &self.home, &["rev-parse", "refs/heads/main"]);
        ok(&out, "rev-parse");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    pub(crate) fn requests(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Every request body the host read, whole or cut short, one after the other.
    pub(crate) fn bodies(&self) -> Vec<u8> {
        std::fs::read(self.log.with_extension("log.bodies")).unwrap_or_default()
    }

    /// A proxy that allows `git.test` under `entries` (organization and `--policy`).
    async fn proxy(&self, entries: &[&str]) -> (Proxy, PathBuf) {
        self.proxy_with(entries, |org| org).await
    }

    /// [`GitHost::proxy`], its organization file passed through `more` first.
    pub(crate) async fn proxy_with(
        &self,
        entries: &[&str],
        more: impl FnOnce(Org) -> Org,
    ) -> (Proxy, PathBuf) {
        let ca = ca_init(&self.dir.join(format!("proxy-{}", entries.len())));
        let mut org = Org::new().ports(&[self.port]).loopback();
        for entry in entries {
            org = org.allow_entry(entry);
        }
        let json: Vec<String> = entries.iter().map(|e| toml_entry_as_json(e)).collect();
        let policy = format!(
            r#"{{"type":"allowlist","allowed_domains":[{}]}}"#,
            json.join(",")
        );
        let proxy = ProxyBuilder::new(more(org).to_toml())
            .policy(policy)
            .pin("git.test")
            .arg("--ca")
            .arg(ca.to_str().unwrap())
            .arg("--upstream-ca")
            .arg(self.cert.to_str().unwrap())
            .start()
            .await;
        (proxy, ca.join("ca.pem"))
    }

    /// Run git through `proxy`, trusting only the proxy's CA.
    pub(crate) fn git_via(
        &self,
        proxy: &Proxy,
        ca_pem: &Path,
        dir: &Path,
        args: &[&str],
    ) -> Output {
        let proxy_url = format!("http.proxy=http://{}", proxy.addr);
        let all = [&["-c", &proxy_url][..], args].concat();
        git_trusting(dir, &self.home, &all, Some(ca_pem))
    }
}

impl Drop for GitHost {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn toml_entry_as_json(inline: &str) -> String {
    let doc: toml::Table = toml::from_str(&format!("e = {inline}")).unwrap();
    serde_json::to_string(&doc["e"]).unwrap()
}

const READ_ONLY: &str = r#"{ host = "git.test", access = "read-only" }"#;
const UPLOAD_PACK: &str =
    r#"{ host = "git.test", methods = ["POST"], paths = ["/acme/repo.git/git-upload-pack"] }"#;

pub(crate) async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

#[tokio::test]
async fn read_only_alone_refuses_even_a_clone_at_the_upload_pack_post() {
    if let Some(why) = missing_tools() {
        eprintln!("skipped: {why}");
        return;
    }
    let host = GitHost::start().await;
    let (proxy, ca) = host.proxy(&[READ_ONLY]).await;
    let dest = host.dir.join("clone-read-only");
    let out = blocking({
        let (url, dest) = (host.url(), dest.clone());
        let (proxy_addr, home, dir) = (proxy.addr, host.home.clone(), host.dir.clone());
        move || {
            let p = format!("http.proxy=http://{proxy_addr}");
            let args = ["-c", &p, "clone", &url, dest.to_str().unwrap()];
            git_trusting(&dir, &home, &args, Some(&ca))
        }
    })
    .await;
    assert!(!out.status.success(), "the clone went through");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("RPC failed; HTTP 403"),
        "git did not show the refusal: {stderr}"
    );
    // Over HTTP/1.1 the status line names it; over h2 (git offers it, and the proxy
    // takes it) there is no reason phrase, and the header does.
    assert!(
        stderr.contains("403 Egress denied: method_not_allowed")
            || stderr.contains("x-egress-denied: method_not_allowed"),
        "git's trace does not name the reason: {stderr}"
    );
    // The refs were read (GET is allowed); the pack request never reached the host.
    let seen = host.requests();
    assert!(
        seen.contains("GET /acme/repo.git/info/refs?service=git-upload-pack 200"),
        "{seen}"
    );
    assert!(
        !seen.contains("POST"),
        "a POST reached the git host: {seen}"
    );
    let record = proxy
        .wait_audit(
            |r| r["reason"] == "method_not_allowed",
            std::time::Duration::from_secs(5),
        )
        .await;
    assert_eq!(record["method"], "POST");
    let url = format!(
        "https://git.test:{}/acme/repo.git/git-upload-pack",
        host.port
    );
    assert_eq!(record["url"], url);
}

#[tokio::test]
async fn with_the_upload_pack_post_clone_and_fetch_work_and_push_is_refused() {
    if let Some(why) = missing_tools() {
        eprintln!("skipped: {why}");
        return;
    }
    let host = std::sync::Arc::new(GitHost::start().await);
    let before = host.head();
    let (proxy, ca) = host.proxy(&[READ_ONLY, UPLOAD_PACK]).await;
    let proxy = std::sync::Arc::new(proxy);
    let dest = host.dir.join("clone");
    let run = |args: Vec<String>, dir: PathBuf| {
        let (host, proxy, ca) = (host.clone(), proxy.clone(), ca.clone());
        blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            host.git_via(&proxy, &ca, &dir, &args)
        })
    };
    let clone = run(
        vec!["clone".into(), host.url(), dest.display().to_string()],
        host.dir.clone(),
    )
    .await;
    ok(&clone, "git clone through the proxy");
    assert_eq!(
        std::fs::read_to_string(dest.join("README")).unwrap(),
        "hello\n"
    );
    ok(
        &run(vec!["fetch".into(), "origin".into()], dest.clone()).await,
        "git fetch",
    );

    std::fs::write(dest.join("LEAK"), "the sandbox's secrets\n").unwrap();
    ok(&git(&dest, &host.home, &["add", "LEAK"]), "git add");
    let commit = [
        "-c",
        "user.name=it",
        "-c",
        "user.email=it@example.test",
        "commit",
        "-m",
        "leak",
    ];
    ok(&git(&dest, &host.home, &commit), "git commit");
    let push = run(
        vec!["push".into(), "origin".into(), "main".into()],
        dest.clone(),
    )
    .await;
    assert!(!push.status.success(), "the push went through");
    let said = String::from_utf8_lossy(&push.stderr);
    assert!(
        said.contains("403 Egress denied: path_not_allowed")
            || said.contains("x-egress-denied: path_not_allowed"),
        "{said}"
    );
    assert_eq!(host.head(), before, "the host's repository changed");
    let seen = host.requests();
    assert!(
        !seen.contains("POST /acme/repo.git/git-receive-pack"),
        "{seen}"
    );
    let record = proxy
        .wait_audit(
            |r| r["reason"] == "path_not_allowed",
            std::time::Duration::from_secs(5),
        )
        .await;
    assert_eq!(record["method"], "POST");
    assert!(record["url"]
        .as_str()
        .unwrap()
        .ends_with("/acme/repo.git/git-receive-pack"));
}
