//! `serve --upstream-proxy` without `--upstream-proxy-by-address` warns at start that the
//! parent resolves names itself (docs/guides/parent-proxy.md); with it, no warning. No
//! parent needs to run: nothing is proxied.

use crate::support::proxy::ProxyBuilder;

const WARNING: &str = "warning: the parent proxy resolves names itself";

#[tokio::test]
async fn a_parent_that_resolves_names_is_warned_of_and_by_address_is_not() {
    let warned = ProxyBuilder::standard(9)
        .arg("--upstream-proxy")
        .arg("http://127.0.0.1:9")
        .start()
        .await;
    let text = warned.stderr();
    assert!(text.contains(WARNING), "{text}");
    assert!(text.contains("--upstream-proxy-by-address"), "{text}");
    let quiet = ProxyBuilder::standard(9)
        .arg("--upstream-proxy")
        .arg("http://127.0.0.1:9")
        .arg("--upstream-proxy-by-address")
        .start()
        .await;
    let text = quiet.stderr();
    assert!(text.contains("listening on"), "{text}");
    assert!(!text.contains(WARNING), "{text}");
    let none = ProxyBuilder::standard(9).start().await;
    assert!(!none.stderr().contains(WARNING));
}
