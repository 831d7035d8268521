//! The organization file's syntax: TOML, read with `toml_edit`, which keeps the
//! position of every key and value.

use serde::de::Unexpected;
use toml_edit::{ImDocument, Item, TableLike, Value};

use super::node::{Entry, Node};
use super::problems::{ProblemKind, Problems};

/// A TOML value: a table or array of tables is an [`Item`], everything else a [`Value`].
#[derive(Clone, Copy)]
pub(super) enum Toml<'a> {
    Item(&'a Item),
    Value(&'a Value),
    /// One table of an array of tables (`[[credentials]]`).
    Table(&'a toml_edit::Table),
}

/// Parse `text`; a syntax error is the file's one problem.
pub(super) fn parse<'t>(text: &'t str, p: &mut Problems) -> Option<ImDocument<&'t str>> {
    ImDocument::parse(text)
        .map_err(|e| {
            let at = e.span().map(|s| s.start);
            p.push(
                at,
                ProblemKind::Syntax,
                None,
                e.message().trim().to_string(),
            );
        })
        .ok()
}

impl<'a> Toml<'a> {
    fn value(self) -> Option<&'a Value> {
        match self {
            Toml::Item(Item::Value(v)) | Toml::Value(v) => Some(v),
            Toml::Item(_) | Toml::Table(_) => None,
        }
    }
}

impl<'a> Node<'a> for Toml<'a> {
    fn at(self) -> Option<usize> {
        let span = match self {
            Toml::Item(i) => i.span(),
            Toml::Value(v) => v.span(),
            Toml::Table(t) => t.span(),
        };
        span.map(|s| s.start)
    }

    fn as_str(self) -> Option<&'a str> {
        self.value()?.as_str()
    }

    fn as_int(self) -> Option<i64> {
        self.value()?.as_integer()
    }

    fn as_bool(self) -> Option<bool> {
        self.value()?.as_bool()
    }

    fn is_null(self) -> bool {
        false
    }

    fn elements(self) -> Option<Vec<Toml<'a>>> {
        if let Toml::Item(Item::ArrayOfTables(tables)) = self {
            return Some(tables.iter().map(Toml::Table).collect());
        }
        Some(self.value()?.as_array()?.iter().map(Toml::Value).collect())
    }

    fn entries(self) -> Option<Vec<Entry<'a, Toml<'a>>>> {
        let table: &dyn TableLike = match self {
            Toml::Item(i) => i.as_table_like()?,
            Toml::Value(v) => v.as_inline_table()?,
            Toml::Table(t) => t as &dyn TableLike,
        };
        let entries = table
            .iter()
            .map(|(key, item)| Entry {
                key,
                at: table
                    .get_key_value(key)
                    .and_then(|(k, _)| k.span())
                    .map(|s| s.start),
                value: Toml::Item(item),
            })
            .collect();
        Some(entries)
    }

    fn unexpected(self) -> Unexpected<'a> {
        match self.value() {
            Some(Value::String(s)) => Unexpected::Str(s.value()),
            Some(Value::Integer(n)) => Unexpected::Signed(*n.value()),
            Some(Value::Float(x)) => Unexpected::Float(*x.value()),
            Some(Value::Boolean(b)) => Unexpected::Bool(*b.value()),
            Some(Value::Datetime(_)) => Unexpected::Other("datetime"),
            Some(Value::Array(_)) => Unexpected::Seq,
            Some(Value::InlineTable(_)) => Unexpected::Map,
            None => match self {
                Toml::Item(Item::ArrayOfTables(_)) => Unexpected::Other("array of tables"),
                Toml::Item(Item::None) => Unexpected::Unit,
                _ => Unexpected::Map,
            },
        }
    }
}
