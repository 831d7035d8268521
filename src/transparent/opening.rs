//! What the first bytes of a redirected connection are (docs/reference/confinement.md,
//! "Transparent listener"): the start of an HTTP/1 request, a TLS ClientHello, or bytes
//! that can become neither. Pure, and decided on the bytes seen so far, never on how
//! they were split: a decision made on a prefix is the decision on every longer input,
//! so a client writing one byte at a time is judged as one writing them all at once.
//! Bytes that can still become a request line or a ClientHello are undecided and
//! waited on; they are never relayed.

use crate::judgement::client_hello::{read_hello, TLS_HANDSHAKE};
use crate::policy::FirstBytes;

/// What a redirected connection's first bytes are, as far as they go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Opening {
    /// Still a prefix of a request line or of a ClientHello: wait for more.
    Undecided,
    /// An HTTP/1 request line: the connection code reads and judges its head.
    Http,
    /// A whole ClientHello, or bytes that can no longer become TLS or HTTP: judged as a
    /// tunnel.
    Tunnel(FirstBytes),
}

/// Classify the bytes a client has sent so far.
pub(crate) fn classify(bytes: &[u8]) -> Opening {
    if bytes.first() == Some(&TLS_HANDSHAKE) {
        return match read_hello(bytes) {
            None => Opening::Undecided,
            Some(first) => Opening::Tunnel(first),
        };
    }
    match request_line(bytes) {
        None => Opening::Undecided,
        Some(true) => Opening::Http,
        Some(false) => Opening::Tunnel(FirstBytes::NotTls),
    }
}

/// Whether `bytes` begin an HTTP/1 request line: `None` while they still may.
///
/// Empty lines before it are skipped as the request parser skips them (RFC 9112 lets a
/// server ignore them; the request that follows is what is judged and forwarded). It
/// is a request line once it starts with a method of capitals and `-` and a space (any
/// method hyper reads), or with any method token, a target and `HTTP/` in any case,
/// with spaces or tabs between: wider than what the request parser accepts, so that
/// bytes a lenient origin would read as a request are never relayed unjudged (the
/// connection code refuses what it cannot parse). Anything else, such as an SSH
/// banner, is no request.
fn request_line(bytes: &[u8]) -> Option<bool> {
    let line = skip_empty_lines(bytes)?;
    let Some(line) = line else {
        return Some(false);
    };
    let method = line.iter().take_while(|b| is_tchar(**b)).count();
    let sep = *line.get(method)?;
    if method == 0 || !is_blank(sep) {
        return Some(false);
    }
    if sep == b' '
        && line[..method]
            .iter()
            .all(|b| b.is_ascii_uppercase() || *b == b'-')
    {
        return Some(true);
    }
    let rest = skip_blanks(&line[method..]);
    let target = rest.iter().take_while(|b| is_target(**b)).count();
    if !is_blank(*rest.get(target)?) {
        return Some(false);
    }
    let version = skip_blanks(&rest[target..]);
    let seen = version.len().min(5);
    if !version[..seen].eq_ignore_ascii_case(&b"HTTP/"[..seen]) {
        return Some(false);
    }
    (seen == 5).then_some(true)
}

/// The bytes after any leading empty lines (`\r\n` or `\n`): `None` while they may
/// still be one, `Some(None)` for a `\r` not followed by `\n`.
fn skip_empty_lines(mut bytes: &[u8]) -> Option<Option<&[u8]>> {
    loop {
        match bytes {
            [] | [b'\r'] => return None,
            [b'\r', b'\n', rest @ ..] | [b'\n', rest @ ..] => bytes = rest,
            [b'\r', ..] => return Some(None),
            _ => return Some(Some(bytes)),
        }
    }
}

fn skip_blanks(bytes: &[u8]) -> &[u8] {
    let n = bytes.iter().take_while(|b| is_blank(**b)).count();
    &bytes[n..]
}

fn is_blank(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

/// A byte of a request target as a lenient reader takes it: visible, or not ASCII.
fn is_target(b: u8) -> bool {
    b > b' ' && b != 0x7f
}

/// A token character (RFC 9110, 5.6.2): a method is a token.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn http() -> Opening {
        Opening::Http
    }

    fn other() -> Opening {
        Opening::Tunnel(FirstBytes::NotTls)
    }

    #[test]
    fn opening_table() {
        let undecided = Opening::Undecided;
        #[rustfmt::skip]
        let cases: &[(&str, &[u8], Opening)] = &[
            ("nothing_is_undecided",             b"",                         undecided.clone()),
            ("one_capital_is_undecided",         b"G",                        undecided.clone()),
            ("a_method_is_undecided",            b"GET",                      undecided.clone()),
            ("method_and_space_is_http",         b"GET ",                     http()),
            ("a_whole_request_is_http",          b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", http()),
            ("extension_method_is_http",         b"M-SEARCH * HTTP/1.1\r\n",  http()),
            ("a_leading_crlf_is_undecided",      b"\r\n",                     undecided.clone()),
            ("a_lone_cr_is_undecided",           b"\r",                       undecided.clone()),
            ("crlf_then_request_is_http",        b"\r\nGET ",                 http()),
            ("empty_lines_then_request_is_http", b"\r\n\n\r\nPOST ",          http()),
            ("cr_without_lf_is_other",           b"\rGET ",                   other()),
            ("lower_case_method_waits",          b"get / HTT",                undecided.clone()),
            ("lower_case_request_is_http",       b"get / http/1.1\r\n",       http()),
            ("tabs_between_is_http",             b"GET\t/x\tHTTP/1.1",        http()),
            ("digits_in_method_wait",            b"SSH-2.0-x y",              undecided.clone()),
            ("ssh_banner_is_other",              b"SSH-2.0-OpenSSH_9.6 Ubuntu-3\r\n", other()),
            ("ssh_banner_without_space_is_other",b"SSH-2.0-OpenSSH_9.6\r\n",  other()),
            ("line_without_version_is_other",    b"get key\r\n",              other()),
            ("control_byte_in_target_is_other",  b"0032git-upload-pack /p.git\0host=a\0", other()),
            ("binary_is_other",                  b"\x00\x00\x00\x08\x04\xd2\x16\x2f", other()),
            ("resp_is_other",                    b"*1\r\n$4\r\nPING\r\n",     other()),
            ("space_first_is_other",             b" GET / HTTP/1.1",          other()),
            ("a_tls_record_start_is_undecided",  &[0x16, 0x03, 0x01],         undecided),
            ("a_bad_tls_record_is_unreadable",   &[0x16, 0x03, 0x01, 0x00, 0x04, 0x02, 0, 0, 0], Opening::Tunnel(FirstBytes::Unreadable)),
        ];
        for (rule, bytes, want) in cases {
            assert_eq!(classify(bytes), *want, "{rule}");
        }
    }

    proptest! {
        /// However the bytes are split, what a prefix decided is what the whole decides:
        /// the judgement never depends on where a write ended.
        #[test]
        fn a_decision_on_a_prefix_holds_for_the_whole(
            bytes in proptest::collection::vec(
                prop_oneof![
                    Just(b'\r'), Just(b'\n'), Just(b' '), Just(b'\t'), Just(b'G'), Just(b'g'),
                    Just(b'-'), Just(b'/'), Just(b'1'), Just(b'H'), Just(b'T'), Just(b'P'),
                    Just(b'h'), Just(b't'), Just(b'p'), Just(0u8), any::<u8>(),
                ],
                0..24,
            ),
            cut in 0usize..24,
        ) {
            let cut = cut.min(bytes.len());
            let early = classify(&bytes[..cut]);
            if early != Opening::Undecided {
                prop_assert_eq!(classify(&bytes), early);
            }
        }
    }
}
