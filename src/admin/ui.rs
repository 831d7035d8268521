//! `GET /ui`: the console, one page served from the binary (docs/reference/control-plane.md,
//! "Console").
//!
//! Four files, compiled in with `include_str!`: the page (`ui/index.html`), its script
//! (`ui/app.js`: the token, the calls, the event stream), the script's view
//! (`ui/view.js`: the elements, built as text) and the style sheet (`ui/app.css`). They carry no secret, so they are
//! served without the bearer token: the page asks for the token, keeps it in a variable of
//! its script, and sends it on every call it makes to the API, which checks it as it
//! checks any other caller's. Nothing is fetched from anywhere else: no build step, no CDN,
//! no web font.
//!
//! The script and the style sheet are files of their own, not inline, so the Content
//! Security Policy can allow scripts and styles from this origin only (`'self'`, with no
//! `'unsafe-inline'`): what the page shows is attacker-influenced (host names, paths,
//! labels), and even if some of it ever reached the document as markup, no script in it
//! would run.

use hyper::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use hyper::{Method, Response};

use super::{full, method_not_allowed, Body};

const PAGE: &str = include_str!("ui/index.html");
const SCRIPT: &str = include_str!("ui/app.js");
const VIEW: &str = include_str!("ui/view.js");
const STYLE: &str = include_str!("ui/app.css");

/// Where the page may load from and connect to: this origin only, and the `data:`
/// favicon (so the browser asks for no `/favicon.ico`, which would need the token).
pub(crate) const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; \
    frame-ancestors 'none'";

/// The headers of every file of the console, besides its `Content-Type`: never cached
/// (a new binary's page is the one shown), never framed, never sniffed, and no
/// `Referer` sent with its calls.
const HEADERS: [(&str, &str); 5] = [
    ("cache-control", "no-store"),
    ("content-security-policy", CSP),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("x-frame-options", "DENY"),
];

/// The console's answer to `method` on `path`, or `None` when `path` is not one of its
/// files (the API's routing goes on, behind the token).
pub(super) fn serve(method: &Method, path: &str) -> Option<Response<Body>> {
    let (text, content_type) = match path {
        "/ui" => (PAGE, "text/html; charset=utf-8"),
        "/ui/app.js" => (SCRIPT, "text/javascript; charset=utf-8"),
        "/ui/view.js" => (VIEW, "text/javascript; charset=utf-8"),
        "/ui/app.css" => (STYLE, "text/css; charset=utf-8"),
        _ => return None,
    };
    if *method != Method::GET && *method != Method::HEAD {
        return Some(method_not_allowed());
    }
    let mut resp = Response::new(full(text));
    let headers = resp.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    for (name, value) in HEADERS {
        headers.insert(
            HeaderName::from_static(name),
            HeaderValue::from_static(value),
        );
    }
    Some(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_console_files_are_served_with_their_types_and_the_strict_headers() {
        for (path, kind) in [
            ("/ui", "text/html"),
            ("/ui/app.js", "text/javascript"),
            ("/ui/view.js", "text/javascript"),
            ("/ui/app.css", "text/css"),
        ] {
            let resp = serve(&Method::GET, path).expect(path);
            assert_eq!(resp.status(), hyper::StatusCode::OK);
            let headers = resp.headers();
            let ct = headers[CONTENT_TYPE].to_str().unwrap();
            assert!(
                ct.starts_with(kind) && ct.ends_with("charset=utf-8"),
                "{ct}"
            );
            assert_eq!(headers["cache-control"], "no-store");
            assert_eq!(headers["content-security-policy"], CSP);
            assert_eq!(headers["x-content-type-options"], "nosniff");
            assert_eq!(headers["referrer-policy"], "no-referrer");
        }
        assert!(serve(&Method::GET, "/ui/").is_none());
        assert!(serve(&Method::GET, "/ui/other.js").is_none());
        let post = serve(&Method::POST, "/ui").unwrap();
        assert_eq!(post.status(), hyper::StatusCode::METHOD_NOT_ALLOWED);
    }

    #[test]
    fn the_page_loads_only_its_own_files_and_nothing_inline() {
        assert!(PAGE.contains(r#"<script type="module" src="/ui/app.js">"#));
        assert!(PAGE.contains(r#"<link rel="stylesheet" href="/ui/app.css">"#));
        // Nothing the policy would refuse: no inline script, style or handler, and no
        // other origin.
        let handlers = [
            " onclick=",
            " onload=",
            " onerror=",
            " onsubmit=",
            " oninput=",
        ];
        for refused in ["<script>", "<style", " style=", "http:", "https:"]
            .into_iter()
            .chain(handlers)
        {
            assert!(!PAGE.contains(refused), "{refused}");
        }
        for script in [SCRIPT, VIEW] {
            for script_sink in [
                "innerHTML",
                "outerHTML",
                "insertAdjacentHTML",
                "document.write",
                "eval(",
            ] {
                assert!(!script.contains(script_sink), "{script_sink}");
            }
            for storage in ["localStorage", "sessionStorage", "document.cookie"] {
                assert!(!script.contains(storage), "{storage}");
            }
        }
    }
}
