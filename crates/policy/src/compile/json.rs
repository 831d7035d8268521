//! The request policy's syntax: JSON, read with serde_json. serde_json keeps no
//! positions, so [`positions`] finds where each value of the (already parsed, hence
//! valid) text starts; the parsed value stays the source of truth.

use serde::de::Unexpected;
use serde_json::Value;

use super::node::{Entry, Node};
use super::problems::{ProblemKind, Problems};

/// A JSON value, with where its parts start when it came from a text.
#[derive(Clone, Copy)]
pub(super) struct Json<'a> {
    pub value: &'a Value,
    pub pos: Option<&'a Pos>,
}

/// Where a value starts, and where its parts do.
#[derive(Debug, Default)]
pub(super) struct Pos {
    pub at: usize,
    parts: Parts,
}

#[derive(Debug, Default)]
enum Parts {
    #[default]
    None,
    List(Vec<Pos>),
    /// Each key as written (decoded), where it is, and its value.
    Object(Vec<(String, usize, Pos)>),
}

/// Parse `text`; a syntax error is the file's one problem.
pub(super) fn parse(text: &str, p: &mut Problems) -> Option<Value> {
    serde_json::from_str(text)
        .map_err(|e| {
            let mut message = e.to_string();
            let suffix = format!(" at line {} column {}", e.line(), e.column());
            if let Some(stripped) = message.strip_suffix(&suffix) {
                message.truncate(stripped.len());
            }
            let position = (e.line() > 0).then(|| (e.line(), e.column().max(1)));
            p.push_at_line(Some(0), position, ProblemKind::Syntax, None, message);
        })
        .ok()
}

/// A key written twice in the top-level object (the parsed value keeps the last).
pub(super) fn duplicate_keys(pos: &Pos, p: &mut Problems) {
    let Parts::Object(keys) = &pos.parts else {
        return;
    };
    for (i, (key, at, _)) in keys.iter().enumerate() {
        if keys[..i].iter().any(|(k, _, _)| k == key) {
            p.invalid(Some(*at), format!("duplicate field `{key}`"));
        }
    }
}

impl<'a> Node<'a> for Json<'a> {
    fn at(self) -> Option<usize> {
        self.pos.map(|p| p.at)
    }

    fn as_str(self) -> Option<&'a str> {
        self.value.as_str()
    }

    fn as_int(self) -> Option<i64> {
        self.value.as_i64()
    }

    fn as_bool(self) -> Option<bool> {
        self.value.as_bool()
    }

    fn is_null(self) -> bool {
        self.value.is_null()
    }

    fn elements(self) -> Option<Vec<Json<'a>>> {
        let list = self.value.as_array()?;
        let pos = match self.pos.map(|p| &p.parts) {
            Some(Parts::List(pos)) => Some(pos),
            _ => None,
        };
        let at = |i: usize| pos.and_then(|pos| pos.get(i)).or(self.pos);
        Some(
            list.iter()
                .enumerate()
                .map(|(i, value)| Json { value, pos: at(i) })
                .collect(),
        )
    }

    fn entries(self) -> Option<Vec<Entry<'a, Json<'a>>>> {
        let object = self.value.as_object()?;
        let keys = match self.pos.map(|p| &p.parts) {
            Some(Parts::Object(keys)) => Some(keys),
            _ => None,
        };
        let entries = object
            .iter()
            .map(|(key, value)| {
                // The last of a repeated key: the one whose value was kept.
                let found = keys.and_then(|keys| keys.iter().rev().find(|(k, _, _)| k == key));
                Entry {
                    key,
                    at: found.map(|(_, at, _)| *at),
                    value: Json {
                        value,
                        pos: found.map(|(_, _, pos)| pos).or(self.pos),
                    },
                }
            })
            .collect();
        Some(entries)
    }

    fn unexpected(self) -> Unexpected<'a> {
        match self.value {
            Value::Null => Unexpected::Other("null"),
            Value::Bool(b) => Unexpected::Bool(*b),
            Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
                (Some(u), _, _) => Unexpected::Unsigned(u),
                (_, Some(i), _) => Unexpected::Signed(i),
                (_, _, Some(f)) => Unexpected::Float(f),
                _ => Unexpected::Other("number"),
            },
            Value::String(s) => Unexpected::Str(s),
            Value::Array(_) => Unexpected::Seq,
            Value::Object(_) => Unexpected::Map,
        }
    }
}

/// Where each value of a valid JSON text starts. Not a parser: serde_json has accepted
/// the text already, so this only skips over it, decoding nothing but object keys.
pub(super) fn positions(text: &str) -> Pos {
    let mut finder = Finder {
        text,
        bytes: text.as_bytes(),
        i: 0,
    };
    finder.value()
}

struct Finder<'t> {
    text: &'t str,
    bytes: &'t [u8],
    i: usize,
}

impl Finder<'_> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.i).copied()
    }

    fn skip_space(&mut self) {
        while self.peek().is_some_and(|b| b.is_ascii_whitespace()) {
            self.i += 1;
        }
    }

    /// After `expected` (and the space before it), if it is next.
    fn eat(&mut self, expected: u8) -> bool {
        self.skip_space();
        let found = self.peek() == Some(expected);
        if found {
            self.i += 1;
        }
        found
    }

    fn value(&mut self) -> Pos {
        self.skip_space();
        let at = self.i;
        let parts = match self.peek() {
            Some(b'{') => {
                self.i += 1;
                let mut keys = Vec::new();
                while !self.eat(b'}') && self.peek().is_some() {
                    self.skip_space();
                    let key_at = self.i;
                    self.string();
                    let key = serde_json::from_str(&self.text[key_at..self.i]).unwrap_or_default();
                    self.eat(b':');
                    keys.push((key, key_at, self.value()));
                    self.eat(b',');
                }
                Parts::Object(keys)
            }
            Some(b'[') => {
                self.i += 1;
                let mut list = Vec::new();
                while !self.eat(b']') && self.peek().is_some() {
                    list.push(self.value());
                    self.eat(b',');
                }
                Parts::List(list)
            }
            Some(b'"') => {
                self.string();
                Parts::None
            }
            Some(_) => {
                let end = |b: u8| b.is_ascii_whitespace() || matches!(b, b',' | b']' | b'}');
                // At least one byte, so a stray byte cannot stop the walk.
                self.i += 1;
                while self.peek().is_some_and(|b| !end(b)) {
                    self.i += 1;
                }
                Parts::None
            }
            None => Parts::None,
        };
        Pos { at, parts }
    }

    /// Past a string literal starting at its opening quote.
    fn string(&mut self) {
        self.i += 1;
        while let Some(b) = self.peek() {
            self.i += if b == b'\\' { 2 } else { 1 };
            if b == b'"' {
                break;
            }
        }
        self.i = self.i.min(self.bytes.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_of_keys_values_and_elements() {
        let text = " {\"a\\\"b\": [1, \"x\\\\\", {}], \"c\" : {\"d\": true}, \"é\": null}";
        let pos = positions(text);
        assert_eq!(pos.at, 1);
        let Parts::Object(keys) = &pos.parts else {
            panic!("{pos:?}");
        };
        let found: Vec<(&str, &str, &str)> = keys
            .iter()
            .map(|(k, key_at, v)| (k.as_str(), &text[*key_at..], &text[v.at..]))
            .map(|(k, key, value)| (k, &key[..3], &value[..2]))
            .collect();
        assert_eq!(
            found,
            [
                ("a\"b", "\"a\\", "[1"),
                ("c", "\"c\"", "{\""),
                ("é", "\"é", "nu")
            ]
        );
        let Parts::List(list) = &keys[0].2.parts else {
            panic!("{pos:?}");
        };
        let elements: Vec<&str> = list.iter().map(|e| &text[e.at..e.at + 2]).collect();
        assert_eq!(elements, ["1,", "\"x", "{}"]);
    }

    #[test]
    fn positions_never_run_past_the_end() {
        for text in ["", "{", "[", "\"", "{\"a\":", "[1,", "\"\\", "{\"a\" 1}"] {
            positions(text);
        }
    }
}
