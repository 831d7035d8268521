//! The forms a canary's value is looked for in (docs/reference/dlp.md, "What matches"):
//! as it is; base64 in both alphabets at each of the three byte offsets it can have
//! inside a longer encoded string, padded or not; hexadecimal; fully percent-encoded;
//! and, in a DNS name once its dots are removed, hexadecimal or unpadded base32 at each
//! of the five offsets. An encoded form here is its *core*: only the characters every
//! encoding of a longer string holding the value has, whatever bytes come before or
//! after it, so a match never depends on its neighbours.

use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
use base64::Engine;
use data_encoding::{BASE32_NOPAD, HEXLOWER};

/// How a value was written where it was found: the record's `dlp.encoding`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Encoding {
    Plain,
    Base64,
    Base64url,
    Hex,
    Percent,
    Base32,
}

/// One form of a value: its bytes, and whether letters match in either case.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Form {
    pub bytes: Vec<u8>,
    pub encoding: Encoding,
    pub either_case: bool,
}

/// The characters of `encoded` (the encoding, without padding, of `offset` bytes then
/// the value of `len` bytes) that only the value's bits make, in an encoding of `bits`
/// bits a character.
fn core(encoded: &str, offset: usize, len: usize, bits: usize) -> Vec<u8> {
    let start = (8 * offset).div_ceil(bits);
    let end = (8 * (offset + len)) / bits;
    encoded.as_bytes()[start..end.max(start)].to_vec()
}

/// Every form a value is looked for in, in bytes a client sends (a head, a body, a
/// message, first bytes).
pub(crate) fn forms(value: &[u8]) -> Vec<Form> {
    let mut forms = vec![Form {
        bytes: value.to_vec(),
        encoding: Encoding::Plain,
        either_case: false,
    }];
    for offset in 0..3 {
        let mut prefixed = vec![0u8; offset];
        prefixed.extend_from_slice(value);
        for (engine, encoding) in [
            (&STANDARD_NO_PAD, Encoding::Base64),
            (&URL_SAFE_NO_PAD, Encoding::Base64url),
        ] {
            let bytes = core(&engine.encode(&prefixed), offset, value.len(), 6);
            if !forms.iter().any(|f| f.bytes == bytes) {
                forms.push(Form {
                    bytes,
                    encoding,
                    either_case: false,
                });
            }
        }
    }
    forms.push(Form {
        bytes: HEXLOWER.encode(value).into_bytes(),
        encoding: Encoding::Hex,
        either_case: true,
    });
    forms.push(Form {
        bytes: value
            .iter()
            .flat_map(|b| format!("%{b:02X}").into_bytes())
            .collect(),
        encoding: Encoding::Percent,
        either_case: true,
    });
    forms
}

/// The forms a DNS name carries a value in across its labels, once its dots are
/// removed: hexadecimal, and unpadded base32 at each of its five offsets.
pub(crate) fn name_forms(value: &[u8]) -> Vec<Form> {
    let mut forms = vec![Form {
        bytes: HEXLOWER.encode(value).into_bytes(),
        encoding: Encoding::Hex,
        either_case: true,
    }];
    for offset in 0..5 {
        let mut prefixed = vec![0u8; offset];
        prefixed.extend_from_slice(value);
        forms.push(Form {
            bytes: core(&BASE32_NOPAD.encode(&prefixed), offset, value.len(), 5),
            encoding: Encoding::Base32,
            either_case: true,
        });
    }
    forms
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn contains(haystack: &[u8], needle: &[u8], either_case: bool) -> bool {
        haystack.windows(needle.len()).any(|w| match either_case {
            true => w.eq_ignore_ascii_case(needle),
            false => w == needle,
        })
    }

    proptest! {
        /// Wherever the value sits in a longer string, each encoding of the whole holds
        /// one of the value's forms in that encoding: the core depends on the value only.
        #[test]
        fn a_value_inside_any_string_leaves_its_core_in_every_encoding(
            before in proptest::collection::vec(any::<u8>(), 0..9),
            value in proptest::collection::vec(any::<u8>(), 16..40),
            after in proptest::collection::vec(any::<u8>(), 0..9),
        ) {
            let whole = [&before[..], &value[..], &after[..]].concat();
            let all = forms(&value);
            let found = |encoded: &str, encoding: Encoding| {
                all.iter().filter(|f| f.encoding == encoding || encoding == Encoding::Base64url && f.encoding == Encoding::Base64)
                    .any(|f| contains(encoded.as_bytes(), &f.bytes, f.either_case))
            };
            prop_assert!(found(&base64::engine::general_purpose::STANDARD.encode(&whole), Encoding::Base64));
            prop_assert!(found(&STANDARD_NO_PAD.encode(&whole), Encoding::Base64));
            prop_assert!(found(&URL_SAFE_NO_PAD.encode(&whole), Encoding::Base64url));
            prop_assert!(found(&data_encoding::HEXUPPER.encode(&whole), Encoding::Hex));
            let dns = name_forms(&value);
            let b32 = BASE32_NOPAD.encode(&whole).to_ascii_lowercase();
            prop_assert!(dns.iter().any(|f| f.encoding == Encoding::Base32 && contains(b32.as_bytes(), &f.bytes, true)));
        }
    }

    #[test]
    fn a_value_has_its_plain_hex_and_percent_forms() {
        let f = forms(b"AKIAEXAMPLEEXAMPLE12");
        assert_eq!(f[0].bytes, b"AKIAEXAMPLEEXAMPLE12");
        let hex = f.iter().find(|f| f.encoding == Encoding::Hex).unwrap();
        assert_eq!(hex.bytes, b"414b49414558414d504c454558414d504c453132");
        let pct = f.iter().find(|f| f.encoding == Encoding::Percent).unwrap();
        assert!(pct.bytes.starts_with(b"%41%4B%49%41"));
    }
}
