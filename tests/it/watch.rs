//! `serve --watch-policy` (docs/scale-out.md, "Policy changes"): the proxy reloads when
//! its organization file changes, including the symlink swap a Kubernetes ConfigMap
//! volume is updated by (`org.toml -> ..data/org.toml`, `..data -> ..TIMESTAMP`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support::client::get_via_proxy;
use crate::support::org::Org;
use crate::support::origin::Origin;
use crate::support::proxy::{Proxy, ProxyBuilder};
use crate::support::unique_temp_dir;

/// The watcher looks every second; a reload must show within this.
const SEEN_WITHIN: Duration = Duration::from_secs(5);

/// A directory laid out as the kubelet lays out a ConfigMap volume.
struct ConfigMap {
    dir: PathBuf,
    version: usize,
}

impl ConfigMap {
    fn new(org: &str) -> ConfigMap {
        let dir = unique_temp_dir("configmap");
        let mut map = ConfigMap { dir, version: 0 };
        map.update(org);
        std::os::unix::fs::symlink("..data/org.toml", map.dir.join("org.toml")).unwrap();
        map
    }

    fn file(&self) -> PathBuf {
        self.dir.join("org.toml")
    }

    /// A new timestamped directory, then `..data` swapped to it by an atomic rename of a
    /// new symlink over the old one, then the old directory removed: what the kubelet
    /// does.
    fn update(&mut self, org: &str) {
        self.version += 1;
        let name = format!(
            "..2026_12_01_00_00_0{}.{}",
            self.version,
            std::process::id()
        );
        let new_dir = self.dir.join(&name);
        std::fs::create_dir(&new_dir).unwrap();
        std::fs::write(new_dir.join("org.toml"), org).unwrap();
        let old = std::fs::read_link(self.dir.join("..data")).ok();
        let tmp = self.dir.join("..data_tmp");
        std::os::unix::fs::symlink(&name, &tmp).unwrap();
        std::fs::rename(&tmp, self.dir.join("..data")).unwrap();
        if let Some(old) = old {
            std::fs::remove_dir_all(self.dir.join(old)).unwrap();
        }
    }
}

fn org(port: u16, names: &[&str]) -> String {
    let mut org = Org::standard(port);
    for name in names {
        org = org.allow(name);
    }
    let list: Vec<String> = ["allowed.test"]
        .iter()
        .chain(names)
        .map(|n| format!("{n:?}"))
        .collect();
    let default = format!(
        "{{ type = \"allowlist\", allowed_domains = [{}] }}",
        list.join(", ")
    );
    org.default_policy(&default).to_toml()
}

async fn status(proxy: &Proxy, url: &str) -> u16 {
    get_via_proxy(proxy.addr, url, &[]).await.status
}

/// Wait until `url` through `proxy` answers `want`.
async fn until(proxy: &Proxy, url: &str, want: u16) {
    let started = Instant::now();
    loop {
        let got = status(proxy, url).await;
        if got == want {
            return;
        }
        assert!(
            started.elapsed() < SEEN_WITHIN,
            "still {got} (not {want}) {SEEN_WITHIN:?} after the change\n{}",
            proxy.diagnostics()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn cleanup(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_configmap_symlink_swap_reloads_the_policy() {
    let origin = Origin::start().await;
    let port = origin.port();
    let mut map = ConfigMap::new(&org(port, &["other.test"]));
    let proxy = ProxyBuilder::new(String::new())
        .org_file(map.file())
        .pin("allowed.test")
        .pin("other.test")
        .arg("--watch-policy")
        .start()
        .await;
    let other = format!("http://other.test:{port}/");
    assert_eq!(status(&proxy, &other).await, 200, "{}", proxy.diagnostics());

    // The new version drops other.test.
    map.update(&org(port, &[]));
    until(&proxy, &other, 403).await;
    // Read from the proxy's standard error by a thread: wait for it (bounded).
    assert!(
        proxy.stderr_shows("policy reloaded", SEEN_WITHIN).await,
        "{}",
        proxy.stderr()
    );

    // A version that does not load leaves the running one in force.
    map.update("version = 1\nallowed_domains = [\"*\"]\n");
    assert!(
        proxy.stderr_shows("reload failed", SEEN_WITHIN).await,
        "{}",
        proxy.stderr()
    );
    assert_eq!(status(&proxy, &other).await, 403);
    let allowed = format!("http://allowed.test:{port}/");
    assert_eq!(status(&proxy, &allowed).await, 200);

    // And a later good version is taken again.
    map.update(&org(port, &["other.test"]));
    until(&proxy, &other, 200).await;
    cleanup(&map.dir);
}

#[tokio::test]
async fn without_watch_policy_a_changed_file_waits_for_sighup() {
    let origin = Origin::start().await;
    let port = origin.port();
    let mut map = ConfigMap::new(&org(port, &["other.test"]));
    let proxy = ProxyBuilder::new(String::new())
        .org_file(map.file())
        .pin("allowed.test")
        .pin("other.test")
        .start()
        .await;
    let other = format!("http://other.test:{port}/");
    map.update(&org(port, &[]));
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert_eq!(
        status(&proxy, &other).await,
        200,
        "reloaded without --watch-policy"
    );
    proxy.hup();
    until(&proxy, &other, 403).await;
    cleanup(&map.dir);
}
