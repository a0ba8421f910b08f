//! What the import could not carry over, or carried over with a choice made: printed to
//! stderr and written as comments at the top of the output.

use serde_json::Value;

use super::fields::show;

/// One setting of Cloudflare's and what was done with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// Where it was in the JSON (`room.host`, `events[0].name`).
    pub field: String,
    /// Its value, on one line (None when the note is about the setting's absence).
    pub value: Option<String>,
    /// What was done with it.
    pub action: String,
}

impl Note {
    /// The note on one line, without control characters (so it is safe in a TOML comment).
    pub fn line(&self) -> String {
        let text = match &self.value {
            Some(v) => format!("`{}` = {v}: {}", self.field, self.action),
            None => format!("`{}`: {}", self.field, self.action),
        };
        text.chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect()
    }
}

/// The notes of one import, in the order the settings were read.
#[derive(Debug, Default)]
pub struct Report {
    /// The notes.
    pub notes: Vec<Note>,
}

impl Report {
    /// Adds a note on `field`, whose value was `value`.
    pub fn note(&mut self, field: String, value: Option<&Value>, action: impl Into<String>) {
        self.notes.push(Note {
            field,
            value: value.map(show),
            action: action.into(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_line_holds_no_control_characters() {
        let mut r = Report::default();
        r.note(
            "room.description".into(),
            Some(&json!("a\nb\u{7f}c")),
            "kept\nas a comment",
        );
        let line = r.notes[0].line();
        assert!(!line.chars().any(char::is_control), "{line:?}");
        assert!(line.starts_with("`room.description` = \"a\\nb"), "{line}");
    }
}
