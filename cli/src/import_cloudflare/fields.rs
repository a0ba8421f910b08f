//! Reading one JSON object from Cloudflare field by field: errors name the field, and what is
//! left once every known field is taken is what the importer does not know.

use serde_json::{Map, Value};

/// Longest rendering of a value in a message or a note, in characters.
const SHOWN_CHARS: usize = 120;

/// A JSON value on one line, cut after [`SHOWN_CHARS`] characters.
pub fn show(v: &Value) -> String {
    let text = v.to_string();
    let count = text.chars().count();
    if count <= SHOWN_CHARS {
        text
    } else {
        let head: String = text.chars().take(SHOWN_CHARS).collect();
        format!("{head}… ({} more characters)", count - SHOWN_CHARS)
    }
}

/// One JSON object being read. Each getter removes its field; `null` counts as absent (the
/// Cloudflare API writes `null` for "inherit" and "not set").
pub struct Fields {
    at: String,
    map: Map<String, Value>,
}

impl Fields {
    /// The object `map`, found at `at` (`room`, `events[2]`) for messages.
    pub fn new(at: impl Into<String>, map: Map<String, Value>) -> Self {
        Self { at: at.into(), map }
    }

    /// The dotted name of field `key` in messages and notes.
    pub fn path(&self, key: &str) -> String {
        format!("{}.{key}", self.at)
    }

    /// Takes field `key` as it is.
    pub fn take(&mut self, key: &str) -> Option<Value> {
        self.map.remove(key).filter(|v| !v.is_null())
    }

    fn wrong(&self, key: &str, want: &str, got: &Value) -> String {
        format!("`{}` must be {want}, not {}", self.path(key), show(got))
    }

    /// Takes a string field.
    pub fn string(&mut self, key: &str) -> Result<Option<String>, String> {
        match self.take(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(self.wrong(key, "a string", &v)),
        }
    }

    /// Takes a boolean field.
    pub fn bool(&mut self, key: &str) -> Result<Option<bool>, String> {
        match self.take(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(b)),
            Some(v) => Err(self.wrong(key, "true or false", &v)),
        }
    }

    /// Takes a whole, non-negative number.
    pub fn uint(&mut self, key: &str) -> Result<Option<u64>, String> {
        match self.take(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .map(Some)
                .ok_or_else(|| self.wrong(key, "a whole number of 0 or more", &v)),
        }
    }

    /// Takes a field that must be there.
    pub fn required<T>(
        &mut self,
        key: &str,
        get: impl FnOnce(&mut Self, &str) -> Result<Option<T>, String>,
    ) -> Result<T, String> {
        get(self, key)?.ok_or_else(|| format!("`{}` is missing", self.path(key)))
    }

    /// The fields nobody took, by name.
    pub fn rest(self) -> Map<String, Value> {
        self.map
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(v: Value) -> Fields {
        Fields::new("room", v.as_object().unwrap().clone())
    }

    #[test]
    fn getters_name_the_field_and_null_is_absent() {
        let mut f = fields(json!({"a": null, "b": "x", "c": -1, "d": true}));
        assert_eq!(f.string("a").unwrap(), None);
        assert_eq!(f.string("b").unwrap().as_deref(), Some("x"));
        let err = f.uint("c").unwrap_err();
        assert!(err.contains("`room.c`") && err.contains("-1"), "{err}");
        assert!(f
            .required("zz", Fields::bool)
            .unwrap_err()
            .contains("`room.zz` is missing"));
        assert_eq!(f.bool("d").unwrap(), Some(true));
        assert!(f.rest().is_empty());
    }

    #[test]
    fn long_values_are_cut_on_a_character_boundary() {
        let s = show(&json!("é".repeat(500)));
        assert!(s.ends_with("(382 more characters)"), "{s}");
    }
}
