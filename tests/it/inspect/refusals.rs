//! Configurations interception refuses: inspecting without a CA, a second `ca init` over
//! a CA, and a credential for a host that is not inspected.

use super::READ_ONLY;
use crate::support::org::Org;
use crate::support::proxy::run_expect_exit;
use crate::support::tls::ca_init;
use crate::support::unique_temp_dir;

#[tokio::test]
async fn a_policy_that_inspects_without_a_ca_refuses_to_start_naming_the_entry() {
    let dir = unique_temp_dir("inspect-no-ca");
    let org = dir.join("org.toml");
    let toml = Org::new().allow_entry(READ_ONLY).to_toml();
    std::fs::write(&org, toml).unwrap();
    let (code, stderr) = run_expect_exit(&[
        "serve",
        "--org",
        org.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--resolve",
        "secure.test=127.0.0.1",
    ]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("secure.test") && stderr.contains("--ca"),
        "{stderr}"
    );
}

#[tokio::test]
async fn ca_init_refuses_to_overwrite_a_ca() {
    let dir = unique_temp_dir("ca-twice");
    let ca = ca_init(&dir);
    let (code, stderr) = run_expect_exit(&["ca", "init", ca.to_str().unwrap()]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("already exists"), "{stderr}");
}

#[tokio::test]
async fn a_credential_for_a_host_allowed_on_443_without_inspection_is_a_load_error() {
    let dir = unique_temp_dir("inspect-credential-plain");
    let org = dir.join("org.toml");
    let toml = Org::new()
        .allow("secure.test")
        .raw_line("[[credentials]]\nhost = \"secure.test\"\nheader = \"Authorization\"\nvalue_file = \"token\"")
        .to_toml();
    std::fs::write(&org, toml).unwrap();
    let (code, stderr) =
        run_expect_exit(&["check", "--org", org.to_str().unwrap(), "secure.test:443"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("without inspection"), "{stderr}");
}
