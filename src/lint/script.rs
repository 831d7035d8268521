//! The mixed-script test for `mixed-script`: a label whose letters come from more than
//! one script (`аpple` with a Cyrillic `а`) is a homograph risk. Scripts are told by
//! code point ranges; Han, Hiragana, Katakana and Hangul count as one (CJK) because
//! Japanese and Korean names mix them by nature.

/// For a normalised (ASCII, `xn--`) name: the scripts of the first label that mixes
/// scripts, as `Latin+Cyrillic`, or `None`.
pub(crate) fn mixed(ascii_name: &str) -> Option<String> {
    if !ascii_name.contains("xn--") {
        return None;
    }
    let (unicode, _) = idna::domain_to_unicode(ascii_name);
    unicode.split('.').find_map(|label| {
        let mut seen: Vec<&str> = Vec::new();
        for c in label.chars() {
            if let Some(s) = script(c) {
                if !seen.contains(&s) {
                    seen.push(s);
                }
            }
        }
        (seen.len() > 1).then(|| seen.join("+"))
    })
}

/// The script of a letter; `None` for digits, hyphens and other common characters.
fn script(c: char) -> Option<&'static str> {
    if !c.is_alphabetic() {
        return None;
    }
    let s = match c as u32 {
        0x0041..=0x024F | 0x1E00..=0x1EFF | 0x2C60..=0x2C7F | 0xA720..=0xA7FF => "Latin",
        0x0370..=0x03FF | 0x1F00..=0x1FFF => "Greek",
        0x0400..=0x052F | 0x2DE0..=0x2DFF | 0xA640..=0xA69F => "Cyrillic",
        0x0530..=0x058F => "Armenian",
        0x0590..=0x05FF => "Hebrew",
        0x0600..=0x06FF | 0x0750..=0x077F | 0x08A0..=0x08FF => "Arabic",
        0x0900..=0x097F => "Devanagari",
        0x0980..=0x09FF => "Bengali",
        0x0E00..=0x0E7F => "Thai",
        0x10A0..=0x10FF => "Georgian",
        0x1100..=0x11FF
        | 0x3040..=0x30FF
        | 0x3130..=0x318F
        | 0x3400..=0x4DBF
        | 0x4E00..=0x9FFF
        | 0xAC00..=0xD7AF
        | 0xF900..=0xFAFF => "CJK",
        0x13A0..=0x13FF => "Cherokee",
        _ => "Other",
    };
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::mixed;

    #[test]
    fn mixed_script_labels() {
        #[rustfmt::skip]
        let cases: &[(&str, &str, bool)] = &[
            ("ascii_only",            "apple.com",                 false),
            ("latin_cyrillic",        &idna::domain_to_ascii("аpple.com").unwrap(), true),
            ("all_cyrillic_label",    &idna::domain_to_ascii("пример.рф").unwrap(), false),
            ("latin_with_accents",    &idna::domain_to_ascii("café.fr").unwrap(), false),
            ("japanese_kana_and_han", &idna::domain_to_ascii("日本のサイト.jp").unwrap(), false),
            ("greek_in_latin",        &idna::domain_to_ascii("gοogle.com").unwrap(), true),
            ("scripts_across_labels", &idna::domain_to_ascii("пример.example.com").unwrap(), false),
        ];
        for (rule, name, want) in cases {
            assert_eq!(mixed(name).is_some(), *want, "{rule}: {name}");
        }
    }
}
