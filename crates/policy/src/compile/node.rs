//! Reading a policy document, TOML or JSON alike: the [`Node`] a syntax offers, and the
//! typed reads the compiler makes of it. A value of the wrong shape is a problem worded
//! as serde words it, at the value's position, and reading goes on.

use serde::de::value::{Error as SerdeError, StrDeserializer};
use serde::de::{DeserializeOwned, Error as _, Unexpected};

use super::problems::{ProblemKind, Problems};

/// One value of a policy document.
pub(super) trait Node<'a>: Copy {
    /// The byte offset where the value starts (`None` when there is no text).
    fn at(self) -> Option<usize>;
    fn as_str(self) -> Option<&'a str>;
    fn as_int(self) -> Option<i64>;
    fn as_bool(self) -> Option<bool>;
    /// JSON's `null`, which an optional key may take to mean "not set".
    fn is_null(self) -> bool;
    /// The elements of an array.
    fn elements(self) -> Option<Vec<Self>>;
    /// The keys of a table (or object), in the order written, each with where the key is.
    fn entries(self) -> Option<Vec<Entry<'a, Self>>>;
    /// What the value is, for "invalid type" messages.
    fn unexpected(self) -> Unexpected<'a>;
}

/// One key of a table and its value.
#[derive(Clone, Copy)]
pub(super) struct Entry<'a, N> {
    pub key: &'a str,
    pub at: Option<usize>,
    pub value: N,
}

/// serde's wording for a value of the wrong type.
fn invalid_type(unexpected: Unexpected, expected: &str) -> String {
    SerdeError::invalid_type(unexpected, &expected).to_string()
}

/// serde's wording for a missing key.
pub(super) fn missing(key: &'static str) -> String {
    SerdeError::missing_field(key).to_string()
}

pub(super) fn wrong<'a, N: Node<'a>>(p: &mut Problems, node: N, expected: &str) {
    p.invalid(node.at(), invalid_type(node.unexpected(), expected));
}

pub(super) fn string<'a, N: Node<'a>>(p: &mut Problems, node: N) -> Option<&'a str> {
    let s = node.as_str();
    if s.is_none() {
        wrong(p, node, "a string");
    }
    s
}

pub(super) fn int<'a, N: Node<'a>>(p: &mut Problems, node: N) -> Option<i64> {
    let n = node.as_int();
    if n.is_none() {
        wrong(p, node, "i64");
    }
    n
}

pub(super) fn boolean<'a, N: Node<'a>>(p: &mut Problems, node: N) -> Option<bool> {
    let b = node.as_bool();
    if b.is_none() {
        wrong(p, node, "a boolean");
    }
    b
}

/// One of the names of the enum `T` (its serde derive holds the names).
pub(super) fn variant<'a, T: DeserializeOwned, N: Node<'a>>(
    p: &mut Problems,
    node: N,
) -> Option<T> {
    let Some(name) = node.as_str() else {
        wrong(p, node, "variant identifier");
        return None;
    };
    T::deserialize(StrDeserializer::<SerdeError>::new(name))
        .map_err(|e| p.invalid(node.at(), e.to_string()))
        .ok()
}

pub(super) fn elements<'a, N: Node<'a>>(p: &mut Problems, node: N) -> Option<Vec<N>> {
    let list = node.elements();
    if list.is_none() {
        wrong(p, node, "a sequence");
    }
    list
}

/// A string element of a list, with where it was written.
pub(super) struct Item<'a> {
    pub text: &'a str,
    pub at: Option<usize>,
}

/// The strings of a list; elements of another type are problems and left out. `None`
/// when the value is not a list at all.
pub(super) fn strings<'a, N: Node<'a>>(p: &mut Problems, node: N) -> Option<Vec<Item<'a>>> {
    let list = elements(p, node)?;
    let at = node.at();
    Some(
        list.into_iter()
            .filter_map(|e| {
                let text = string(p, e)?;
                Some(Item {
                    text,
                    at: e.at().or(at),
                })
            })
            .collect(),
    )
}

/// A table's keys and values.
pub(super) struct Table<'a, N> {
    pub at: Option<usize>,
    entries: Vec<Entry<'a, N>>,
}

pub(super) fn table<'a, N: Node<'a>>(
    p: &mut Problems,
    node: N,
    expected: &str,
) -> Option<Table<'a, N>> {
    let Some(entries) = node.entries() else {
        wrong(p, node, expected);
        return None;
    };
    Some(Table {
        at: node.at(),
        entries,
    })
}

impl<'a, N: Node<'a>> Table<'a, N> {
    /// The values of `keys`, in their order (`None` for a key not set).
    pub(super) fn take<const K: usize>(&self, keys: &[&str; K]) -> [Option<N>; K] {
        keys.map(|k| {
            self.entries
                .iter()
                .find(|e| e.key == k)
                .map(|e| e.value)
                .filter(|v| !v.is_null())
        })
    }

    /// Each key not in `known` is a problem; `table` says where the table sits.
    pub(super) fn unknown(
        &self,
        p: &mut Problems,
        table: &'static str,
        known: &'static [&'static str],
    ) {
        for e in self.entries.iter().filter(|e| !known.contains(&e.key)) {
            let kind = ProblemKind::UnknownKey {
                table,
                key: e.key.to_string(),
                known,
            };
            let message = SerdeError::unknown_field(e.key, known).to_string();
            p.push(e.at.or(e.value.at()), kind, None, message);
        }
    }
}
