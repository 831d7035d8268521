//! What "never shown" reads (docs/reference/dlp.md, "What is never shown"): every
//! record, the proxy's own log, `/metrics`, the console's data (the admin API calls
//! the console makes: `GET /v1/sessions`, each session, `GET /v1/approvals`; its
//! `GET /v1/events` stream is read by the test into `answers`), and the answers a test
//! got; and every form a value can be shown in, not only the raw value.

use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
use base64::Engine;

use crate::support::proxy::Proxy;

/// Every form of `value` a canary matches in (docs/reference/dlp.md, "What matches"),
/// as text that must not show: as it is and in lower case (names are lowered); base64
/// in both alphabets at each of the three byte offsets it can have inside a longer
/// string (only the characters that depend on its bytes alone, so padded or not);
/// hexadecimal and percent-encoding in either case; and base32, as a DNS name carries
/// it. A value under 16 bytes (a detector's match) is looked for as it is only: its
/// short forms could be anywhere by chance.
pub(crate) fn encoded_forms(value: &str) -> Vec<String> {
    let bytes = value.as_bytes();
    let mut forms = vec![value.to_string(), value.to_ascii_lowercase()];
    if bytes.len() < 16 {
        return forms;
    }
    for offset in 0..3 {
        let mut shifted = vec![0u8; offset];
        shifted.extend_from_slice(bytes);
        // The characters holding bits of the filler, or of what would follow, vary.
        let first = (8 * offset).div_ceil(6);
        let last = 8 * shifted.len() / 6;
        for engine in [&STANDARD_NO_PAD, &URL_SAFE_NO_PAD] {
            forms.push(engine.encode(&shifted)[first..last].to_string());
        }
    }
    let hex = data_encoding::HEXLOWER.encode(bytes);
    forms.push(hex.to_ascii_uppercase());
    forms.push(hex);
    let percent: String = bytes.iter().map(|b| format!("%{b:02X}")).collect();
    forms.push(percent.to_ascii_lowercase());
    forms.push(percent);
    let base32 = data_encoding::BASE32_NOPAD.encode(bytes);
    forms.push(base32.to_ascii_lowercase());
    forms.push(base32);
    forms.sort();
    forms.dedup();
    forms
}

/// Everything the proxy shows: its records, its log, `/metrics`, the console's data,
/// and `answers` (what the test got: answers, events read from the stream).
pub(crate) async fn everything_shown(proxy: &Proxy, answers: &[String]) -> String {
    let admin = proxy.admin();
    let mut shown = vec![
        proxy.audit_text(),
        proxy.stderr(),
        admin.metrics().await,
        answers.join("\n"),
    ];
    let sessions = admin.call("GET", "/v1/sessions", None).await;
    assert_eq!(sessions.status, 200, "{}", sessions.text());
    let listed = sessions.json();
    for session in listed["sessions"].as_array().into_iter().flatten() {
        let id = session["id"].as_str().expect("a session's id");
        let one = admin.call("GET", &format!("/v1/sessions/{id}"), None).await;
        shown.push(one.text());
    }
    shown.push(sessions.text());
    let approvals = admin.call("GET", "/v1/approvals", None).await;
    assert!(
        [200, 404].contains(&approvals.status),
        "{}",
        approvals.text()
    );
    shown.push(approvals.text());
    shown.join("\n")
}

/// No form of any of `values` ([`encoded_forms`]) in anything the proxy shows
/// ([`everything_shown`]).
pub(crate) async fn assert_never_shown(proxy: &Proxy, values: &[&str], answers: &[String]) {
    let shown = everything_shown(proxy, answers).await;
    for value in values {
        for form in encoded_forms(value) {
            assert!(
                !shown.contains(&form),
                "{form} (of {value}) shown:\n{shown}"
            );
        }
    }
}

#[test]
fn the_forms_are_those_a_longer_encoded_string_holds() {
    let value = "AKIAQ7EGRESSCANARY42";
    let forms = encoded_forms(value);
    for prefix in ["", "k", "k=", "key="] {
        let whole = format!("{prefix}{value}&rest");
        for engine in [&STANDARD_NO_PAD, &URL_SAFE_NO_PAD] {
            let encoded = engine.encode(&whole);
            assert!(
                forms.iter().any(|f| encoded.contains(f.as_str())),
                "{prefix:?}: {encoded}"
            );
        }
    }
    assert!(forms.contains(&data_encoding::HEXUPPER.encode(value.as_bytes())));
    assert_eq!(encoded_forms("EMP-482913"), ["EMP-482913", "emp-482913"]);
}
