//! Text a template shows: HTML-escaped in `{{x}}` like any Mustache string, and its single
//! quotes too (Mustache's escaping leaves `'` alone, so a value inside a single-quoted
//! attribute of a custom page could end the attribute: `title='{{pageTitle}}'`).

use ramhorns::encoding::Encoder;
use ramhorns::{Content, Template};
use serde::{Serialize, Serializer};

/// A string variable of a page.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Text(pub(crate) String);

impl std::ops::Deref for Text {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl From<String> for Text {
    fn from(s: String) -> Self {
        Text(s)
    }
}

impl From<&str> for Text {
    fn from(s: &str) -> Self {
        Text(s.to_owned())
    }
}

impl PartialEq<&str> for Text {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl Serialize for Text {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl Content for Text {
    #[inline]
    fn is_truthy(&self) -> bool {
        !self.0.is_empty()
    }

    #[inline]
    fn capacity_hint(&self, _tpl: &Template) -> usize {
        self.0.len()
    }

    fn render_escaped<E: Encoder>(&self, encoder: &mut E) -> Result<(), E::Error> {
        let mut parts = self.0.split('\'');
        if let Some(first) = parts.next() {
            encoder.write_escaped(first)?;
        }
        for part in parts {
            encoder.write_unescaped("&#39;")?;
            encoder.write_escaped(part)?;
        }
        Ok(())
    }

    fn render_unescaped<E: Encoder>(&self, encoder: &mut E) -> Result<(), E::Error> {
        encoder.write_unescaped(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Content)]
    struct Page {
        title: Text,
    }

    #[test]
    fn single_quotes_are_escaped_too() {
        let t = Template::new("<a title='{{title}}'>{{{title}}}</a>").unwrap();
        let html = t.render(&Page {
            title: "x' onmouseover='alert(1) <b>".into(),
        });
        assert_eq!(
            html,
            "<a title='x&#39; onmouseover=&#39;alert(1) &lt;b&gt;'>x' onmouseover='alert(1) <b></a>"
        );
    }
}
