//! A parent proxy (`serve --upstream-proxy`, docs/reference/parent-proxy.md), a real one:
//! squid, started by each test on loopback, whose access log shows what reached it.
//! Allowed requests and tunnels go through it (by name, or by the checked address);
//! denied ones never do, and no DNS query is made for them; `--upstream-no-proxy`
//! destinations are dialed directly; its credentials are sent and never logged; a dead
//! or refusing parent is a 502 saying so.
//!
//! - [`plain`]: plain HTTP in absolute form, kept alive to the parent.
//! - [`tunnels`]: `CONNECT`, SOCKS5 and inspected requests as `CONNECT` to the parent.
//! - [`failures`]: a dead parent, a refusing one, and flags that do not start.

mod failures;
mod plain;
mod tunnels;
mod warning;

use crate::support::dns::DnsServer;
use crate::support::org::{allowlist_json, Org};
use crate::support::origin::Origin;
use crate::support::proxy::{Proxy, ProxyBuilder};
use crate::support::squid::Squid;

/// The user and password the proxy gives the parent, and their `Basic` form: neither may
/// appear in anything the proxy writes.
const USER: &str = "alice";
const PASSWORD: &str = "s3cret-Pa55";
/// base64("alice:s3cret-Pa55")
const BASIC: &str = "YWxpY2U6czNjcmV0LVBhNTU=";

/// An origin known as `allowed.test` and `other.test`, a DNS server of the test's own
/// (so a query for a denied name would show), squid asking for credentials, and a
/// proxy with `--upstream-proxy` to it (credentials given) and `extra` flags.
struct Setup {
    origin: Origin,
    dns: DnsServer,
    squid: Squid,
    proxy: Proxy,
}

impl Setup {
    async fn start(extra: &[&str]) -> Setup {
        Setup::with(extra, |b| b).await
    }

    async fn with(extra: &[&str], more: impl FnOnce(ProxyBuilder) -> ProxyBuilder) -> Setup {
        let origin = Origin::start().await;
        let dns = DnsServer::builder()
            .record("allowed.test", "127.0.0.1".parse().unwrap())
            .record("other.test", "127.0.0.1".parse().unwrap())
            .record("denied.test", "127.0.0.1".parse().unwrap())
            .start()
            .await;
        let squid = Squid::start(true, &["allowed.test", "other.test", "denied.test"]);
        let org = Org::standard(origin.port()).allow("other.test").to_toml();
        let mut builder = ProxyBuilder::new(org)
            .policy(allowlist_json(&["allowed.test", "other.test"]))
            .dns_server(dns.addr())
            .audit_allowed()
            .log("debug")
            .arg("--upstream-proxy")
            .arg(&squid.url(Some(&format!("{USER}:{PASSWORD}"))));
        for arg in extra {
            builder = builder.arg(arg);
        }
        let proxy = more(builder).start().await;
        Setup {
            origin,
            dns,
            squid,
            proxy,
        }
    }

    fn authority(&self, host: &str) -> String {
        format!("{host}:{}", self.origin.port())
    }

    /// Neither the password nor its `Basic` form is in the audit log or the proxy's
    /// own log (at `debug`).
    fn assert_credentials_never_written(&self) {
        for (what, text) in [
            ("audit log", self.proxy.audit_text()),
            ("proxy log", self.proxy.diagnostics()),
        ] {
            assert!(
                !text.contains(PASSWORD),
                "the password is in the {what}:\n{text}"
            );
            assert!(
                !text.contains(BASIC),
                "the credentials are in the {what}:\n{text}"
            );
        }
    }
}
