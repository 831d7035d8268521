//! Where a setting is written in NEW, for the position of a change that is not about one
//! entry (the entries' own positions come from the compiler's spans).

use toml_edit::{ImDocument, Item, TableLike};

/// NEW's text, parsed once to find keys in.
pub(super) enum Locator<'t> {
    Toml(Option<ImDocument<&'t str>>),
    Json(&'t str),
}

impl<'t> Locator<'t> {
    pub(super) fn toml(text: &'t str) -> Locator<'t> {
        Locator::Toml(ImDocument::parse(text).ok())
    }

    /// The byte offset of the key at `path` (`["tunnels", "require_tls"]`), if written.
    pub(super) fn key(&self, path: &[&str]) -> Option<usize> {
        match self {
            Locator::Toml(doc) => {
                let mut table: &dyn TableLike = doc.as_ref()?.as_table();
                let (last, init) = path.split_last()?;
                for k in init {
                    table = table.get(k).and_then(Item::as_table_like)?;
                }
                let (key, _) = table.get_key_value(last)?;
                key.span().map(|s| s.start)
            }
            // A request policy's keys are at its top level: `"type"` is written once.
            Locator::Json(text) => text.find(&format!("\"{}\"", path.last()?)),
        }
    }
}
