use super::*;

/// One line per trick: the path as sent, and what it normalises to (`Err` names why it
/// is refused).
#[test]
fn every_path_trick() {
    use PathError::*;
    let ok = |s: &str| Ok::<String, PathError>(s.to_string());
    let cases: &[(&str, Result<String, PathError>)] = &[
        ("", ok("/")),
        ("/", ok("/")),
        ("/user", ok("/user")),
        ("/a/b/", ok("/a/b/")),
        ("/a?x=1", ok("/a")),
        ("/a?x=/../..", ok("/a")),
        // Dot segments are removed; climbing above the root is refused.
        ("/a/../b", ok("/b")),
        ("/a/./b", ok("/a/b")),
        ("/a/b/..", ok("/a/")),
        ("/a/.", ok("/a/")),
        ("/..", Err(AboveRoot)),
        ("/a/../../b", Err(AboveRoot)),
        // Encoded dots are unreserved: decoded, then removed as dot segments.
        ("/a/%2e%2e/b", ok("/b")),
        ("/a/%2E%2E/b", ok("/b")),
        ("/a/.%2e/b", ok("/b")),
        ("/%2e%2e/x", Err(AboveRoot)),
        ("/a/%2e/b", ok("/a/b")),
        ("/a/..%2e/b", ok("/a/.../b")),
        // Encoded separators and NUL.
        ("/a%2Fb", Err(EncodedSeparator("%2F".into()))),
        ("/a%2fb", Err(EncodedSeparator("%2f".into()))),
        ("/a%5Cb", Err(EncodedSeparator("%5C".into()))),
        ("/a%5cb", Err(EncodedSeparator("%5c".into()))),
        ("/a%00b", Err(EncodedSeparator("%00".into()))),
        // Double encoding.
        ("/a%252Fb", Err(DoubleEncoded("%252F".into()))),
        // Hex digits escaped after the `%25` are the same trick once decoded.
        ("/%25a%61", Err(DoubleEncoded("%25aa".into()))),
        ("/a%252e%252e/b", Err(DoubleEncoded("%252e".into()))),
        ("/100%25", ok("/100%25")),
        ("/a%25zz", ok("/a%25zz")),
        // Empty segments and parameters.
        ("//", Err(EmptySegment)),
        ("//evil.test/x", Err(EmptySegment)),
        ("/a//b", Err(EmptySegment)),
        ("/a//../b", Err(EmptySegment)),
        ("/a;x=1/b", Err(Parameter)),
        ("/allowed/..;/admin", Err(Parameter)),
        ("/a%3Bb", Err(Parameter)),
        // Backslashes and other characters a path may not hold.
        ("/a\\b", Err(BadCharacter('\\'))),
        ("/a\\..\\b", Err(BadCharacter('\\'))),
        ("/a b", Err(BadCharacter(' '))),
        ("/é", Err(BadCharacter('é'))),
        ("/a#frag", Err(BadCharacter('#'))),
        ("/a%0Ab", Err(BadCharacter('\n'))),
        ("/a%7f", Err(BadCharacter('\u{7f}'))),
        // Escapes: malformed, not UTF-8, case.
        ("/a%", Err(BadEscape)),
        ("/a%2", Err(BadEscape)),
        ("/a%zz", Err(BadEscape)),
        ("/a%FF", Err(NotUtf8)),
        ("/a%C3", Err(NotUtf8)),
        ("/a%c3%a9", ok("/a%C3%A9")),
        ("/a%3a", ok("/a%3A")),
        ("/%61", ok("/a")),
        ("/%7E%41%2D", ok("/~A-")),
        ("/a@b:c!$&'()*+,=", ok("/a@b:c!$&'()*+,=")),
        ("relative", Err(NotAbsolute)),
        ("*", Err(NotAbsolute)),
    ];
    for (input, want) in cases {
        let got = normalize(input).map(|p| p.0);
        assert_eq!(&got, want, "{input:?}");
    }
}

#[test]
fn a_normal_path_is_a_fixed_point() {
    for input in ["/a/../b/%2e/c", "/%61%62/x%c3%a9/", "/a/b/..", "/"] {
        let once = normalize(input).unwrap();
        assert_eq!(normalize(once.as_str()).unwrap(), once, "{input}");
    }
}

proptest::proptest! {
    /// Whatever the input, a path that normalises is a fixed point, and holds no dot or
    /// empty segment.
    #[test]
    fn normalised_paths_are_fixed_points(s in "(/([a-c.;%/\\\\]|%2[eEfF5]|%5[cC]|%00|%61){0,6}){1,5}") {
        if let Ok(p) = normalize(&s) {
            let again = normalize(p.as_str());
            proptest::prop_assert_eq!(again.as_ref(), Ok(&p));
            let rest = &p.as_str()[1..];
            let segments: Vec<&str> = rest.split('/').collect();
            for (i, seg) in segments.iter().enumerate() {
                proptest::prop_assert!(*seg != "." && *seg != "..", "{s} -> {p}");
                proptest::prop_assert!(!seg.is_empty() || i + 1 == segments.len(), "{s} -> {p}");
            }
        }
    }
}
