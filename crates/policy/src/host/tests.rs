//! Table tests for names, hosts and patterns: one line per rule.

use super::*;
use proptest::prelude::*;

fn name(s: &str) -> HostName {
    HostName::parse(s).unwrap_or_else(|e| panic!("{s:?}: {e}"))
}

fn entry(s: &str) -> DomainEntry {
    DomainEntry::parse(s).unwrap_or_else(|e| panic!("{s:?}: {e}"))
}

#[test]
fn normalisation() {
    #[rustfmt::skip]
    let cases: &[(&str, &str, &str)] = &[
        ("lower_case",                 "Example.COM",          "example.com"),
        ("one_trailing_dot_removed",   "example.com.",         "example.com"),
        ("idna_to_punycode",           "bücher.example",       "xn--bcher-kva.example"),
        ("idna_upper_case_mapped",     "BÜCHER.example",       "xn--bcher-kva.example"),
        ("full_width_letters",         "ｅｘａｍｐｌｅ.com",    "example.com"),
        ("full_width_dot_separates",   "example｡com",          "example.com"),
        ("punycode_kept",              "xn--bcher-kva.example", "xn--bcher-kva.example"),
        ("underscore_allowed",         "_dmarc.example.com",   "_dmarc.example.com"),
        ("single_label",               "localhost",            "localhost"),
        ("digits_not_last_label",      "123.example",          "123.example"),
        ("hex_like_not_last_label",    "0x7f.example",         "0x7f.example"),
        ("last_label_alnum_is_name",   "example.1a",           "example.1a"),
    ];
    for (rule, input, want) in cases {
        assert_eq!(
            HostName::parse(input).map(|n| n.0),
            Ok(want.to_string()),
            "{rule}"
        );
    }
}

#[test]
fn invalid_names() {
    let long_label = format!("{}.com", "a".repeat(64));
    let long_name = format!("{}.com", vec!["a".repeat(60); 5].join("."));
    #[rustfmt::skip]
    let cases: Vec<(&str, &str, HostError)> = vec![
        ("empty",                    "",                 HostError::Empty),
        ("only_a_dot",               ".",                HostError::Empty),
        ("decimal_ipv4",             "1.2.3.4",          HostError::IsIpAddress),
        ("single_number_ipv4",       "2130706433",       HostError::IsIpAddress),
        ("hex_ipv4",                 "0x7f.1",           HostError::IsIpAddress),
        ("short_ipv4",               "127.1",            HostError::IsIpAddress),
        ("octal_ipv4",               "0177.0.0.1",       HostError::IsIpAddress),
        ("ipv4_trailing_dot",        "1.2.3.4.",         HostError::IsIpAddress),
        ("full_width_ipv4",          "１２７.０.０.１",   HostError::IsIpAddress),
        ("ends_in_number_invalid",   "example.123",      HostError::InvalidIpv4),
        ("ipv4_overflow",            "1.2.3.256",        HostError::InvalidIpv4),
        ("ipv4_five_parts",          "1.2.3.4.5",        HostError::InvalidIpv4),
        ("two_trailing_dots",        "example.com..",    HostError::EmptyLabel),
        ("empty_inner_label",        "a..com",           HostError::EmptyLabel),
        ("leading_dot",              ".example.com",     HostError::EmptyLabel),
        ("space",                    "exa mple.com",     HostError::InvalidCharacter(' ')),
        ("percent",                  "ex%41mple.com",    HostError::InvalidCharacter('%')),
        ("control_char",             "ex\u{0}ample.com", HostError::InvalidCharacter('\0')),
        ("slash",                    "a/b.com",          HostError::InvalidCharacter('/')),
        ("leading_hyphen",           "-a.com",           HostError::HyphenAtLabelEdge),
        ("trailing_hyphen",          "a-.com",           HostError::HyphenAtLabelEdge),
        ("label_too_long",           &long_label,        HostError::LabelTooLong),
        ("name_too_long",            &long_name,         HostError::NameTooLong),
    ];
    for (rule, input, want) in cases {
        assert_eq!(HostName::parse(input), Err(want), "{rule}");
    }
}

#[test]
fn bad_punycode_is_refused() {
    assert!(HostName::parse("xn--a.example").is_err());
}

#[test]
fn lenient_ipv4() {
    #[rustfmt::skip]
    let cases: &[(&str, Option<[u8; 4]>)] = &[
        ("1.2.3.4",        Some([1, 2, 3, 4])),
        ("2130706433",     Some([127, 0, 0, 1])),
        ("0x7f.1",         Some([127, 0, 0, 1])),
        ("127.1",          Some([127, 0, 0, 1])),
        ("0177.0.0.1",     Some([127, 0, 0, 1])),
        ("127.0.1",        Some([127, 0, 0, 1])),
        ("0x7F000001",     Some([127, 0, 0, 1])),
        ("0x",             Some([0, 0, 0, 0])),
        ("1.2.3.4.",       Some([1, 2, 3, 4])),
        ("4294967295",     Some([255, 255, 255, 255])),
        ("4294967296",     None),
        ("256.1",          None),
        ("1.2.65536",      None),
        ("1.2.3.4.5",      None),
        ("08",             None),
        ("1..2",           None),
        ("",               None),
        ("99999999999999999999999", None),
    ];
    for (input, want) in cases {
        assert_eq!(
            parse_ipv4_lenient(input),
            want.map(Ipv4Addr::from),
            "{input}"
        );
    }
}

#[test]
fn hosts() {
    let ip = |s: &str| Host::Ip(s.parse().unwrap());
    #[rustfmt::skip]
    let cases: Vec<(&str, Result<Host, HostError>)> = vec![
        ("example.com",             Ok(Host::Name(name("example.com")))),
        ("2130706433",              Ok(ip("127.0.0.1"))),
        ("0x7f.1",                  Ok(ip("127.0.0.1"))),
        ("[::1]",                   Ok(ip("::1"))),
        ("::1",                     Ok(ip("::1"))),
        ("[::ffff:127.0.0.1]",      Ok(ip("::ffff:127.0.0.1"))),
        ("[fe80::1%eth0]",          Err(HostError::ZoneId)),
        ("[fe80::1%25eth0]",        Err(HostError::ZoneId)),
        ("[::1",                    Err(HostError::InvalidIpv6)),
        ("[nothex]",                Err(HostError::InvalidIpv6)),
        ("example.com:443",         Err(HostError::InvalidIpv6)),
        ("",                        Err(HostError::Empty)),
    ];
    for (input, want) in cases {
        assert_eq!(Host::parse(input), want, "{input}");
    }
}

#[test]
fn host_display_and_authority() {
    #[rustfmt::skip]
    let cases: &[(&str, &str, &str)] = &[
        ("Example.com",  "example.com", "example.com:443"),
        ("127.1",        "127.0.0.1",   "127.0.0.1:443"),
        ("[::1]",        "::1",         "[::1]:443"),
    ];
    for (input, display, authority) in cases {
        let host = Host::parse(input).unwrap();
        assert_eq!(host.to_string(), *display);
        assert_eq!(host.authority(443), *authority);
    }
}

#[test]
fn pattern_matching() {
    #[rustfmt::skip]
    let cases: &[(&str, &str, &str, bool)] = &[
        ("exact_matches_same_name",           "example.com",   "example.com",       true),
        ("exact_does_not_match_subdomain",    "example.com",   "a.example.com",     false),
        ("exact_matches_after_normalising",   "Example.com.",  "EXAMPLE.COM",       true),
        ("subtree_matches_one_below",         "*.example.com", "a.example.com",     true),
        ("subtree_matches_any_depth",         "*.example.com", "a.b.c.example.com", true),
        ("subtree_does_not_match_apex",       "*.example.com", "example.com",       false),
        ("suffix_match_only_on_label_boundary", "*.example.com", "badexample.com",  false),
        ("suffix_boundary_deeper",            "*.example.com", "a.badexample.com",  false),
        ("subtree_not_a_sibling",             "*.example.com", "example.org",       false),
        ("subtree_of_private_suffix",         "*.github.io",   "me.github.io",      true),
    ];
    for (rule, pattern, host, want) in cases {
        assert_eq!(entry(pattern).matches_host(&name(host)), *want, "{rule}");
    }
}

#[test]
fn port_matching() {
    let defaults = [80, 443];
    #[rustfmt::skip]
    let cases: &[(&str, &str, u16, bool)] = &[
        ("portless_allows_default_443",  "example.com",      443,  true),
        ("portless_allows_default_80",   "example.com",      80,   true),
        ("portless_refuses_other_port",  "example.com",      8080, false),
        ("port_entry_allows_its_port",   "example.com:8080", 8080, true),
        ("port_entry_refuses_defaults",  "example.com:8080", 443,  false),
    ];
    for (rule, pattern, port, want) in cases {
        let host = name("example.com");
        assert_eq!(
            entry(pattern).matches(&host, *port, &defaults),
            *want,
            "{rule}"
        );
    }
}

#[test]
fn valid_entries() {
    #[rustfmt::skip]
    let cases: &[(&str, DomainPattern, Option<u16>)] = &[
        ("example.com",        DomainPattern::Exact(name("example.com")),   None),
        ("*.example.com",      DomainPattern::Subtree(name("example.com")), None),
        ("*.example.org:443",  DomainPattern::Subtree(name("example.org")), Some(443)),
        ("Bücher.example:1",   DomainPattern::Exact(name("xn--bcher-kva.example")), Some(1)),
        ("*.github.io",        DomainPattern::Subtree(name("github.io")),   None),
        ("*.example.co.uk",    DomainPattern::Subtree(name("example.co.uk")), None),
        ("*.corp.internal",    DomainPattern::Subtree(name("corp.internal")), None),
        ("localhost:65535",    DomainPattern::Exact(name("localhost")),     Some(65535)),
    ];
    for (text, pattern, port) in cases {
        let e = entry(text);
        assert_eq!((&e.pattern, e.port, &*e.text), (pattern, *port, *text));
        assert_eq!(e.to_string(), *text);
    }
}

#[test]
fn invalid_entries() {
    use EntryError as E;
    #[rustfmt::skip]
    let cases: &[(&str, &str, EntryError)] = &[
        ("empty",                   "",                       E::Empty),
        ("bare_wildcard",           "*",                      E::BareWildcard),
        ("bare_wildcard_port",      "*:443",                  E::BareWildcard),
        ("wildcard_in_label",       "*foo.com",               E::MisplacedWildcard),
        ("wildcard_inner_label",    "a.*.com",                E::MisplacedWildcard),
        ("double_wildcard",         "**.com",                 E::MisplacedWildcard),
        ("two_wildcards",           "*.*.example.com",        E::MisplacedWildcard),
        ("trailing_wildcard",       "example.*",              E::MisplacedWildcard),
        ("scheme",                  "https://example.com",    E::Scheme),
        ("path",                    "example.com/api",        E::Path),
        ("userinfo",                "user@example.com",       E::Userinfo),
        ("query",                   "example.com?a=b",        E::QueryOrFragment),
        ("fragment",                "example.com#x",          E::QueryOrFragment),
        ("ipv4",                    "1.2.3.4",                E::IpAddress),
        ("ipv4_with_port",          "1.2.3.4:443",            E::IpAddress),
        ("ipv4_lenient",            "2130706433",             E::IpAddress),
        ("ipv4_hex",                "0x7f.1",                 E::IpAddress),
        ("ipv6_bare",               "::1",                    E::IpAddress),
        ("ipv6_bracketed",          "[::1]",                  E::IpAddress),
        ("ipv6_bracketed_port",     "[::1]:443",              E::IpAddress),
        ("wildcard_over_ip",        "*.1.2.3.4",              E::IpAddress),
        ("port_zero",               "example.com:0",          E::InvalidPort("0".into())),
        ("port_too_big",            "example.com:65536",      E::InvalidPort("65536".into())),
        ("port_not_numeric",        "example.com:https",      E::InvalidPort("https".into())),
        ("port_empty",              "example.com:",           E::InvalidPort("".into())),
        ("port_signed",             "example.com:+443",       E::InvalidPort("+443".into())),
        ("wildcard_over_tld",       "*.com",                  E::PublicSuffixWildcard("com".into())),
        ("wildcard_over_cc_suffix", "*.co.uk",                E::PublicSuffixWildcard("co.uk".into())),
        ("wildcard_over_unknown",   "*.internal",             E::PublicSuffixWildcard("internal".into())),
        ("wildcard_over_psl_star",  "*.foo.ck",               E::PublicSuffixWildcard("foo.ck".into())),
        ("bad_name",                "exa mple.com",           E::Host(HostError::InvalidCharacter(' '))),
    ];
    for (rule, text, want) in cases {
        assert_eq!(DomainEntry::parse(text).as_ref(), Err(want), "{rule}");
    }
}

#[test]
fn ip_entry_message_points_to_allowed_cidrs() {
    let err = DomainEntry::parse("10.0.0.1").unwrap_err();
    assert!(err.to_string().contains("IPs go in allowed_cidrs"), "{err}");
}

proptest! {
    #[test]
    fn parse_is_idempotent_on_its_own_output(s in "[a-zA-Z0-9._\\-ü]{1,30}") {
        if let Ok(n) = HostName::parse(&s) {
            prop_assert_eq!(HostName::parse(n.as_str()), Ok(n.clone()));
        }
    }

    #[test]
    fn parse_is_idempotent_on_labels(labels in proptest::collection::vec("[a-z0-9]{1,5}", 1..5)) {
        let s = labels.join(".");
        if let Ok(n) = HostName::parse(&s) {
            prop_assert_eq!(HostName::parse(n.as_str()), Ok(n.clone()));
        }
    }

    /// The one-pass path gives exactly the general path's name wherever it answers,
    /// and leaves every other input (IDNA, numbers, refusals) to it.
    #[test]
    fn the_one_pass_path_agrees_with_the_general_one(s in "[a-zA-Z0-9.\\-_Xx]{0,70}") {
        if let Some(fast) = plain_name(&s) {
            match general(&s) {
                Ok(Normalised::Name(slow)) => prop_assert_eq!(fast, slow),
                Ok(Normalised::Ipv4(ip)) => prop_assert!(false, "{s:?}: fast {fast:?}, general {ip}"),
                Err(e) => prop_assert!(false, "{s:?}: fast {fast:?}, general {e}"),
            }
        }
    }
}

#[test]
fn the_one_pass_path_leaves_what_it_cannot_read_to_the_general_one() {
    for s in [
        "xn--bcher-kva.test",
        "a.XN--x.test",
        "-a.test",
        "a-.test",
        "a..test",
        "1.2.3.4",
        "a.0x1f",
        "a_b.test",
        ".",
        "",
        "a.b.",
        "A.Test",
    ] {
        let fast = plain_name(s);
        let expected = match s {
            "a.b." => Some("a.b".to_string()),
            "A.Test" => Some("a.test".to_string()),
            _ => None,
        };
        assert_eq!(fast, expected, "{s:?}");
    }
    let long = format!("{}.test", "a".repeat(64));
    assert_eq!(plain_name(&long), None);
    assert!(HostName::parse(&long).is_err());
}
