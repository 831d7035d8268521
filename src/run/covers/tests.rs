use std::path::{Path, PathBuf};

use super::*;

fn writable(places: &[&str]) -> Writable {
    Writable {
        places: places.iter().map(PathBuf::from).collect(),
        started_in_root: false,
        own: ["/tmp", "/var/tmp", "/dev/shm"].map(PathBuf::from).to_vec(),
        flagged: Vec::new(),
    }
}

fn plan_for(files: &[&str], exe: &str, w: &Writable) -> Result<Plan, String> {
    let files: Vec<PathBuf> = files.iter().map(PathBuf::from).collect();
    plan(&Inputs {
        start: Path::new("/work/repo"),
        writable: w,
        homes: &[PathBuf::from("/home/me")],
        hidden: &[PathBuf::from("/home/me/.ssh")],
        proxy_files: &files,
        exe: Path::new(exe),
        later: &[PathBuf::from("/work/repo/.bashrc")],
    })
}

#[test]
fn a_proxy_files_directory_is_covered_and_the_executables_made_read_only() {
    let w = writable(&["/work/repo"]);
    let plan = plan_for(
        &[
            "/work/repo/policies/org.toml",
            "/etc/egress/org.toml",
            "/tmp/x/audit.jsonl",
        ],
        "/work/repo/target/release/egress-proxy",
        &w,
    )
    .unwrap();
    let cover: Vec<&str> = plan.cover.iter().map(|p| p.to_str().unwrap()).collect();
    assert_eq!(
        cover,
        ["/etc/egress", "/home/me/.ssh", "/work/repo/policies"]
    );
    let ro: Vec<&str> = plan.read_only.iter().map(|p| p.to_str().unwrap()).collect();
    assert_eq!(ro, ["/work/repo/.bashrc", "/work/repo/target/release"]);
}

#[test]
fn a_proxy_file_in_a_directory_cmd_needs_is_refused_naming_it() {
    let w = writable(&["/work/repo", "/srv/data"]);
    for (file, why) in [
        ("/work/repo/org.toml", "the starting directory"),
        ("/work/org.toml", "holds the starting directory"),
        ("/srv/data/org.toml", "a writable place"),
        ("/etc/org.toml", "a system directory"),
        ("/home/me/org.toml", "a home directory"),
        ("/lib64/org.toml", "a system directory"),
    ] {
        let e = plan_for(&[file], "/usr/bin/egress-proxy", &w).unwrap_err();
        assert!(e.starts_with(file) && e.contains(why), "{file}: {e}");
        assert!(e.contains("keep it in a directory of its own"), "{e}");
    }
}

#[test]
fn a_file_hidden_by_another_rule_is_not_refused() {
    let w = writable(&["/work/repo"]);
    let hidden = ["/home/me/.ssh/org.toml", "/tmp/org.toml", "/run/org.toml"];
    let plan = plan_for(&hidden, "/usr/bin/egress-proxy", &w).unwrap();
    assert_eq!(plan.cover, [PathBuf::from("/home/me/.ssh")]);
}

#[test]
fn the_executable_in_a_directory_cmd_needs_is_made_read_only_alone() {
    let w = writable(&["/work/repo"]);
    let plan = plan_for(&[], "/work/repo/egress-proxy", &w).unwrap();
    assert!(plan
        .read_only
        .contains(&PathBuf::from("/work/repo/egress-proxy")));
    assert!(!plan.read_only.contains(&PathBuf::from("/work/repo")));
}
