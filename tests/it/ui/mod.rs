//! The console, `GET /ui` (docs/reference/control-plane.md, "Console"): its files and
//! headers on the wire, and the page itself in a real headless Chromium: the token
//! asked for and refused, denials arriving live, sessions, a held request approved
//! from the page and reaching the origin, no error in the browser's console, and
//! screenshots at a laptop's and a phone's width; a denial of an OCSF log
//! (`--audit-format ocsf`) shown alike; a secret a detector in report mode let through
//! (`egress.flagged`) shown first, marked so.
//!
//! - `browser`: the Chromium driver (`driver.py`, Selenium).
//!
//! `EGRESS_UI_SCREENSHOTS=DIR` writes the screenshots there (docs/screenshots/ holds the
//! committed ones); otherwise into a temp dir.

mod approvals;
mod browser;

use std::path::PathBuf;

use serde_json::{json, Value};

use crate::support::client::get_via_proxy;
use crate::support::org::Org;
use crate::support::origin::Origin;
use crate::support::proxy::{Proxy, ProxyBuilder};
use crate::support::unique_temp_dir;
use browser::{require_browser, Browser};

const TOKEN: &str = "ui-console-token";

/// A session label a page must show as text, never run.
const HOSTILE_LABEL: &str = "<img src=x onerror=\"document.title='owned'\">agent-7";

/// The organization allows `allowed.test`, `held.test`, `other.test` and
/// `hooks.webhook.site` (shared hosting, refused under `action = "deny"`); requests
/// without a session get the first and the last. So `held.test` in a session that allows
/// only `allowed.test`, and `other.test` without a session, are refused
/// `not_in_request_policy`, the one refusal a reviewer may approve; `hooks.webhook.site`
/// is refused `shared_hosting`, which never is.
fn org(port: u16) -> Org {
    org_with_dlp(port, "[dlp]\ndetectors = [\"github_token\"]")
}

/// [`org`] with `dlp` as its `[dlp]` table.
fn org_with_dlp(port: u16, dlp: &str) -> Org {
    Org::standard(port)
        .allow("held.test")
        .allow("other.test")
        .allow("hooks.webhook.site")
        .shared_hosting("deny")
        .default_policy(
            r#"{ type = "allowlist", allowed_domains = ["allowed.test", "hooks.webhook.site"] }"#,
        )
        .raw_line(dlp)
}

/// A value the `github_token` detector finds (docs/reference/dlp.md).
const GITHUB: &str = "ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789";

fn builder(origin: &Origin) -> ProxyBuilder {
    builder_with(org(origin.port()))
}

/// [`builder`] for another organization.
fn builder_with(org: Org) -> ProxyBuilder {
    ProxyBuilder::new(org.to_toml())
        .pin("allowed.test")
        .pin("held.test")
        .pin("other.test")
        .pin("hooks.webhook.site")
        .admin(TOKEN)
}

fn url(host: &str, origin: &Origin, path: &str) -> String {
    format!("http://{host}:{}{path}", origin.port())
}

/// `POST /v1/sessions` with `body`; panics unless 201.
async fn create_session(proxy: &Proxy, body: Value) -> Value {
    let resp = proxy
        .admin()
        .call("POST", "/v1/sessions", Some(&body.to_string()))
        .await;
    assert_eq!(resp.status, 201, "{resp:?}");
    resp.json()
}

fn screenshots_dir() -> PathBuf {
    match std::env::var_os("EGRESS_UI_SCREENSHOTS") {
        Some(dir) => {
            let dir = PathBuf::from(dir);
            std::fs::create_dir_all(&dir).expect("the screenshots directory");
            dir
        }
        None => unique_temp_dir("ui-screenshots"),
    }
}

#[tokio::test]
async fn the_console_is_served_without_the_token_with_strict_headers() {
    let origin = Origin::start().await;
    let proxy = builder(&origin).start().await;
    let admin = proxy.admin();
    let page = admin.call_as("GET", "/ui", None, None).await;
    assert_eq!(page.status, 200, "{page:?}");
    assert_eq!(
        page.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    let csp = page.header("content-security-policy").expect("a CSP");
    for directive in [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "connect-src 'self'",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(directive), "{csp}");
    }
    assert!(!csp.contains("unsafe"), "{csp}");
    assert_eq!(page.header("cache-control"), Some("no-store"));
    assert_eq!(page.header("x-content-type-options"), Some("nosniff"));
    assert_eq!(page.header("referrer-policy"), Some("no-referrer"));
    assert!(page.text().contains(r#"src="/ui/app.js""#));
    for (path, kind) in [
        ("/ui/app.js", "text/javascript"),
        ("/ui/view.js", "text/javascript"),
        ("/ui/app.css", "text/css"),
    ] {
        let file = admin.call_as("GET", path, None, None).await;
        assert_eq!(file.status, 200, "{path}: {file:?}");
        assert!(file.header("content-type").unwrap().starts_with(kind));
        assert_eq!(file.header("content-security-policy"), Some(csp));
    }
    // Only GET and HEAD.
    let post = admin.call_as("POST", "/ui", None, None).await;
    assert_eq!(post.status, 405, "{post:?}");
    // The API itself still needs the token, whatever the path looks like.
    for path in ["/v1/sessions", "/ui/../v1/sessions", "/ui/x", "/uix"] {
        let resp = admin.call_as("GET", path, None, None).await;
        assert_eq!(resp.status, 401, "{path}: {resp:?}");
    }
}

/// A browser on `proxy`'s console, signed in with the right token.
fn signed_in(tools: &(PathBuf, PathBuf), proxy: &Proxy) -> Browser {
    let mut browser = Browser::start(tools);
    let admin_url = format!("http://{}/ui", proxy.admin().addr);
    browser.call(json!({"do": "open", "url": admin_url}));
    let signed_in = browser.call(json!({"do": "login", "token": TOKEN}));
    assert_eq!(signed_in["signed_in"], true, "{signed_in}");
    browser
}

/// The log entries at SEVERE, which a console without errors has none of.
fn severe(logs: &[(String, String)]) -> Vec<&(String, String)> {
    logs.iter().filter(|(level, _)| level == "SEVERE").collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_denials_sessions_and_approvals_live_in_a_browser() {
    let tools = require_browser!();
    let origin = Origin::start().await;
    let proxy = approvals::serve_with_approvals(builder(&origin))
        .start()
        .await;
    let admin_url = format!("http://{}/ui", proxy.admin().addr);
    let mut browser = Browser::start(&tools);
    browser.call(json!({"do": "open", "url": admin_url}));
    assert!(severe(&browser.logs()).is_empty(), "the page loads cleanly");

    // A wrong token: refused, said so, and asked again (the field is empty).
    let wrong = browser.call(json!({"do": "login", "token": "not-the-token"}));
    assert_eq!(wrong["signed_in"], false, "{wrong}");
    let message = wrong["message"].as_str().unwrap();
    assert!(message.contains("401"), "{message}");
    assert_eq!(wrong["token_field"], "");
    // The browser reports the refused call itself (a network error, not the page's).
    for (_, text) in severe(&browser.logs()) {
        assert!(text.contains("401"), "only the refused call: {text}");
    }

    let signed_in = browser.call(json!({"do": "login", "token": TOKEN}));
    assert_eq!(signed_in["signed_in"], true, "{signed_in}");

    // Sessions appear, their labels shown as text: one that asks a reviewer, and one
    // whose label is markup that must not run.
    let policy = json!({"type": "allowlist", "allowed_domains": ["allowed.test"], "max_upload_bytes": 65536});
    let body = json!({"network_policy": policy, "label": "agent-7"});
    let session = create_session(&proxy, approvals::ask_session(body)).await;
    let id = session["id"].as_str().unwrap().to_string();
    let shown = browser.call(json!({"do": "session", "id": id}));
    assert_eq!(shown["badges"], json!(["agent-7"]), "{shown}");
    assert_eq!(shown["fields"]["allows"], "allowed.test", "{shown}");
    assert_eq!(shown["fields"]["open tunnels"], "0", "{shown}");
    assert_eq!(shown["fields"]["on deny"], "asks (60s)", "{shown}");
    let budget = shown["fields"]["budget"].as_str().unwrap_or_default();
    assert!(
        budget.starts_with("0 B of "),
        "the budget against what was sent: {shown}"
    );
    let policy = json!({"type": "allowlist", "allowed_domains": ["allowed.test", "held.test"]});
    let body = json!({"network_policy": policy, "label": HOSTILE_LABEL});
    let hostile = create_session(&proxy, body).await;
    let shown = browser.call(json!({"do": "session", "id": hostile["id"]}));
    assert_eq!(shown["badges"], json!([HOSTILE_LABEL]), "{shown}");
    assert_eq!(
        shown["fields"]["allows"], "allowed.test, held.test",
        "{shown}"
    );

    // Denials arrive live, newest first, with their reason and the shared-hosting badge.
    let resp = get_via_proxy(proxy.addr, &url("evil.test", &origin, "/x"), &[]).await;
    assert_eq!(resp.status, 403);
    let denied = browser.call(json!({"do": "denial", "host": "evil.test"}));
    assert_eq!(denied["target"], format!("evil.test:{}", origin.port()));
    assert_eq!(
        denied["badges"],
        json!(["not_in_org_allowlist"]),
        "{denied}"
    );
    assert_eq!(denied["fields"]["session"], "no session");
    assert_eq!(denied["fields"]["method"], "GET");
    // A secret found: shown first, whatever comes after it, with which detector found
    // it and where, never the value.
    let secret_url = url("allowed.test", &origin, "/upload");
    let resp = get_via_proxy(proxy.addr, &secret_url, &[("x-token", GITHUB)]).await;
    assert_eq!(resp.status, 403);
    let found = browser.call(json!({"do": "denial", "host": "allowed.test"}));
    assert_eq!(found["badges"], json!(["secret_detected"]), "{found}");
    assert_eq!(
        found["fields"]["found"], "github_token (detector)",
        "{found}"
    );
    assert_eq!(found["fields"]["in"], "header", "{found}");
    assert_eq!(found["fields"]["encoding"], "plain", "{found}");
    assert!(!found.to_string().contains(GITHUB), "{found}");
    let resp = get_via_proxy(proxy.addr, &url("hooks.webhook.site", &origin, "/"), &[]).await;
    assert_eq!(resp.status, 403);
    let shared = browser.call(json!({"do": "denial", "host": "hooks.webhook.site"}));
    assert_eq!(
        shared["badges"],
        json!(["shared_hosting", "shared hosting"]),
        "{shared}"
    );
    assert_eq!(shared["fields"]["rule"], "webhook.site", "{shared}");
    let order = browser
        .js("return [...document.querySelectorAll('#denials-list li')].map(li => li.dataset.host)");
    assert_eq!(
        order,
        json!(["allowed.test", "hooks.webhook.site", "evil.test"])
    );
    let highlighted = browser.js(
        "return [...document.querySelectorAll('#denials-list li.secret')].map(li => li.dataset.host)",
    );
    assert_eq!(highlighted, json!(["allowed.test"]));

    // Two held requests, pending on the page (and in the screenshots).
    let held = approvals::hold(&mut browser, &proxy, &origin, &session).await;

    // Screenshots, and no horizontal scrolling at a phone's width.
    let dir = screenshots_dir();
    for (name, width, height) in [("laptop", 1280, 800), ("phone", 390, 844)] {
        let path = dir.join(format!("console-{name}.png"));
        let shot = browser.call(json!({
            "do": "screenshot", "width": width, "height": height,
            "path": path.to_str().unwrap(),
        }));
        assert_eq!(shot["saved"], true, "{shot}");
        assert!(shot["overflow_px"].as_i64().unwrap() <= 0, "{name}: {shot}");
        let png = std::fs::read(&path).expect("the screenshot");
        assert!(png.starts_with(b"\x89PNG"), "{}", path.display());
    }

    // Decided there: the one allowed once reaches the origin, the denied one gets its 403.
    approvals::decide(&mut browser, &origin, held).await;

    // Nothing the proxy sent ran as markup, and the token is nowhere but in memory.
    let page = browser.js(
        "return {imgs: document.images.length, title: document.title, \
         stored: localStorage.length + sessionStorage.length, cookie: document.cookie, \
         url: location.href}",
    );
    assert_eq!(page["imgs"], 0, "{page}");
    assert_eq!(page["title"], "egress-proxy console", "{page}");
    assert_eq!(page["stored"], 0, "{page}");
    assert_eq!(page["cookie"], "", "{page}");
    assert!(!page["url"].as_str().unwrap().contains(TOKEN), "{page}");
    let logs = browser.logs();
    assert!(severe(&logs).is_empty(), "console errors: {logs:?}");
}

/// With `--audit-format ocsf` the stream carries OCSF events (the file's lines): the
/// page shows a denial as it shows the proxy's own record.
#[tokio::test]
async fn the_console_shows_a_denial_of_an_ocsf_log() {
    let tools = require_browser!();
    let origin = Origin::start().await;
    let proxy = builder(&origin)
        .arg("--audit-format")
        .arg("ocsf")
        .start()
        .await;
    let mut browser = signed_in(&tools, &proxy);
    let resp = get_via_proxy(proxy.addr, &url("evil.test", &origin, "/x"), &[]).await;
    assert_eq!(resp.status, 403);
    let denied = browser.call(json!({"do": "denial", "host": "evil.test"}));
    assert_eq!(denied["target"], format!("evil.test:{}", origin.port()));
    assert_eq!(
        denied["badges"],
        json!(["not_in_org_allowlist"]),
        "{denied}"
    );
    assert_eq!(denied["fields"]["method"], "GET", "{denied}");
    assert_eq!(denied["fields"]["session"], "no session", "{denied}");
    assert_eq!(denied["fields"]["level"], "org", "{denied}");
    // A secret found is read back from the OCSF event too: first, with its `dlp`.
    let secret_url = url("allowed.test", &origin, "/upload");
    let resp = get_via_proxy(proxy.addr, &secret_url, &[("x-token", GITHUB)]).await;
    assert_eq!(resp.status, 403);
    let found = browser.call(json!({"do": "denial", "host": "allowed.test"}));
    assert_eq!(
        found["fields"]["found"], "github_token (detector)",
        "{found}"
    );
    let order = browser
        .js("return [...document.querySelectorAll('#denials-list li')].map(li => li.dataset.host)");
    assert_eq!(order, json!(["allowed.test", "evil.test"]));
    let line = proxy.audit_text();
    assert!(line.starts_with("{\"category_uid\":4,"), "{line}");
    let logs = browser.logs();
    assert!(severe(&logs).is_empty(), "console errors: {logs:?}");
}

/// A detector in report mode lets the secret through and records it `egress.flagged`:
/// the page shows it with the secrets found, above the other denials, marked as let
/// through, with which detector found it and where, never the value.
#[tokio::test]
async fn the_console_shows_a_secret_let_through_first_and_says_so() {
    let tools = require_browser!();
    let origin = Origin::start().await;
    let reporting = org_with_dlp(
        origin.port(),
        "[dlp]\ndetectors = [\"github_token\"]\naction = \"report\"",
    );
    let proxy = builder_with(reporting).start().await;
    let mut browser = signed_in(&tools, &proxy);
    let resp = get_via_proxy(proxy.addr, &url("evil.test", &origin, "/x"), &[]).await;
    assert_eq!(resp.status, 403);
    let denied = browser.call(json!({"do": "denial", "host": "evil.test"}));
    assert_eq!(
        denied["badges"],
        json!(["not_in_org_allowlist"]),
        "{denied}"
    );
    // Let through: the origin has it.
    let secret_url = url("allowed.test", &origin, "/upload");
    let resp = get_via_proxy(proxy.addr, &secret_url, &[("x-token", GITHUB)]).await;
    assert_eq!(resp.status, 200, "{resp:?}");
    assert_eq!(origin.hits(), 1);
    let flagged = browser.call(json!({"do": "denial", "host": "allowed.test"}));
    assert_eq!(
        flagged["badges"],
        json!(["secret_detected", "let through"]),
        "{flagged}"
    );
    assert_eq!(
        flagged["fields"]["found"], "github_token (detector)",
        "{flagged}"
    );
    assert_eq!(flagged["fields"]["in"], "header", "{flagged}");
    assert!(!flagged.to_string().contains(GITHUB), "{flagged}");
    let order = browser
        .js("return [...document.querySelectorAll('#denials-list li')].map(li => li.dataset.host)");
    assert_eq!(order, json!(["allowed.test", "evil.test"]));
    let marked = browser.js(
        "return [...document.querySelectorAll('#denials-list li.flagged')].map(li => li.dataset.host)",
    );
    assert_eq!(marked, json!(["allowed.test"]));
    let logs = browser.logs();
    assert!(severe(&logs).is_empty(), "console errors: {logs:?}");
}
