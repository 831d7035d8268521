//! The scanner on the forms a client would send.

use base64::Engine;

use super::*;

const VALUE: &str = "AKIAQWERTYUIOPASDFGH";

fn scanner() -> Scanner {
    Scanner::new(&[
        Canary::new("org:1", "generic", b"some-other-canary-value".to_vec()),
        Canary::new("org:2", "aws_access_key_id", VALUE.as_bytes().to_vec()),
    ])
}

fn found(s: &Scanner, bytes: &[u8]) -> Option<(String, Encoding)> {
    s.scan(bytes, FoundIn::Url)
        .map(|h| (h.id.to_string(), h.encoding))
}

#[test]
fn each_form_of_a_value_is_found_inside_other_bytes() {
    let s = scanner();
    let b64 = base64::engine::general_purpose::STANDARD;
    let url = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let percent: String = VALUE.bytes().map(|b| format!("%{b:02x}")).collect();
    let cases: Vec<(Vec<u8>, Encoding)> = vec![
        (format!("q={VALUE}&x=1").into_bytes(), Encoding::Plain),
        (
            b64.encode(format!("k={VALUE}")).into_bytes(),
            Encoding::Base64,
        ),
        (
            b64.encode(format!("ke={VALUE}!")).into_bytes(),
            Encoding::Base64,
        ),
        (
            b64.encode(format!("key={VALUE}??")).into_bytes(),
            Encoding::Base64,
        ),
        (
            url.encode(format!("\u{ff}{VALUE}\u{fe}")).into_bytes(),
            Encoding::Base64url,
        ),
        (
            data_encoding::HEXUPPER
                .encode(VALUE.as_bytes())
                .into_bytes(),
            Encoding::Hex,
        ),
        (percent.into_bytes(), Encoding::Percent),
    ];
    for (bytes, encoding) in cases {
        let hit = found(&s, &bytes);
        let id = hit.as_ref().map(|h| h.0.as_str());
        assert_eq!(id, Some("org:2"), "{:?}", String::from_utf8_lossy(&bytes));
        // The url-safe core may equal the standard one: then it is called base64.
        let got = hit.unwrap().1;
        assert!(
            got == encoding || encoding == Encoding::Base64url && got == Encoding::Base64,
            "{encoding:?}: {got:?}"
        );
    }
}

#[test]
fn bytes_without_a_value_and_a_lower_case_plain_value_are_not_found() {
    let s = scanner();
    assert_eq!(found(&s, b"GET /repos?page=2 HTTP/1.1"), None);
    // A plain value is case-sensitive outside names.
    assert_eq!(found(&s, VALUE.to_lowercase().as_bytes()), None);
    assert!(Scanner::new(&[]).is_empty());
    assert_eq!(Scanner::new(&[]).scan(VALUE.as_bytes(), FoundIn::Url), None);
}

#[test]
fn a_name_carries_a_value_across_its_labels_in_hex_or_base32() {
    let s = scanner();
    let hex = data_encoding::HEXLOWER.encode(VALUE.as_bytes());
    let (a, b) = hex.split_at(30);
    let name = format!("{a}.{b}.evil.test");
    let hit = s.scan_name(&name, FoundIn::Dns).unwrap();
    assert_eq!((&*hit.id, hit.encoding), ("org:2", Encoding::Hex));
    let b32 = data_encoding::BASE32_NOPAD
        .encode(format!("x{VALUE}").as_bytes())
        .to_lowercase();
    let (a, b) = b32.split_at(20);
    let hit = s
        .scan_name(&format!("{a}.{b}.evil.test"), FoundIn::Dns)
        .unwrap();
    assert_eq!(hit.encoding, Encoding::Base32);
    assert_eq!(s.scan_name("api.github.com", FoundIn::Dns), None);
}

#[test]
fn a_hit_and_the_scanner_never_show_the_value() {
    let s = scanner();
    let hit = s.scan(VALUE.as_bytes(), FoundIn::Header).unwrap();
    let shown = format!("{hit:?} {} {s:?}", serde_json::to_string(&hit).unwrap());
    assert!(!shown.contains(VALUE), "{shown}");
    assert!(shown.contains("org:2"), "{shown}");
}

#[test]
fn values_are_16_to_256_printable_bytes() {
    assert!(check_value(VALUE.as_bytes()).is_ok());
    assert!(check_value(b"short").is_err());
    assert!(check_value(&[b'a'; 257]).is_err());
    assert!(check_value(b"sixteen bytes ok").is_err(), "a space");
}

#[test]
fn a_sessions_four_canaries_take_a_compact_automaton_that_finds_the_same() {
    let canaries: Vec<Canary> = (0..4)
        .map(|i| {
            let value = Kind::Generic.mint().unwrap().into_bytes();
            Canary::new(&format!("c{i}"), "generic", value)
        })
        .collect();
    let (fast, compact) = (Scanner::new(&canaries), Scanner::compact(&canaries));
    // Measured: about 2 MB as DFAs, under 100 KB compact.
    assert!(
        compact.memory_usage() < 128 * 1024,
        "{}",
        compact.memory_usage()
    );
    assert!(compact.memory_usage() * 10 < fast.memory_usage());
    let value = String::from_utf8(canaries[2].value().to_vec()).unwrap();
    let hex = data_encoding::HEXUPPER.encode(value.as_bytes());
    for s in [&fast, &compact] {
        let found = s
            .scan(format!("x={hex}").as_bytes(), FoundIn::Body)
            .unwrap();
        assert_eq!((&*found.id, found.encoding), ("c2", Encoding::Hex));
        assert!(s
            .scan_name(&format!("{}.test", &hex[..40]), FoundIn::Dns)
            .is_none());
    }
}

/// Whether `haystack` holds any form of any of `values` (naively: every window compared).
fn naive(values: &[Vec<u8>], haystack: &[u8], names: bool) -> bool {
    values.iter().any(|v| {
        let mut all = forms::forms(v);
        if names {
            all.extend(forms::name_forms(v));
        }
        all.iter().any(|f| {
            haystack
                .windows(f.bytes.len())
                .any(|w| match f.either_case || names {
                    true => w.eq_ignore_ascii_case(&f.bytes),
                    false => w == &f.bytes[..],
                })
        })
    })
}

proptest::proptest! {
    /// The index finds a form exactly where comparing every window would, wherever the
    /// form sits (every offset against the probe stride), in either scanner kind, in
    /// bytes and in names, and finds nothing in bytes that hold only pieces of forms.
    #[test]
    fn the_index_finds_what_a_naive_search_finds(
        values in proptest::collection::vec(proptest::collection::vec(0x21u8..0x7f, 16..48), 1..4),
        before in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..24),
        after in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..24),
        pick in 0usize..16,
        cut in 0usize..64,
        upper in proptest::prelude::any::<bool>(),
    ) {
        let canaries: Vec<Canary> = values
            .iter()
            .enumerate()
            .map(|(i, v)| Canary::new(&format!("c{i}"), "generic", v.clone()))
            .collect();
        let value = &values[pick % values.len()];
        let mut all = forms::forms(value);
        all.extend(forms::name_forms(value));
        let form = &all[pick % all.len()];
        let mut bytes = form.bytes.clone();
        if upper {
            bytes.make_ascii_uppercase();
        }
        let whole = [&before[..], &bytes[..], &after[..]].concat();
        // A piece: the form cut short somewhere.
        let piece = [&before[..], &bytes[..cut % bytes.len()], &after[..]].concat();
        for s in [Scanner::new(&canaries), Scanner::compact(&canaries)] {
            for haystack in [&whole, &piece] {
                let found = s.scan(haystack, FoundIn::Body).is_some();
                proptest::prop_assert_eq!(found, naive(&values, haystack, false));
                if let Ok(name) = std::str::from_utf8(haystack) {
                    let dotless: Vec<u8> = name.bytes().filter(|&b| b != b'.').collect();
                    let want = naive(&values, haystack, true) || naive(&values, &dotless, true);
                    proptest::prop_assert_eq!(s.scan_name(name, FoundIn::Dns).is_some(), want);
                }
            }
        }
    }
}
