//! A room's pages as its configuration makes them, compiled once when the configuration
//! loads: its own template (`custom_page` or `custom_page_file`), each event's, its language,
//! and whether visitors' `Accept-Language` picks another.

use std::path::Path;

use crate::config::{EventConfig, RoomConfig};
use crate::error::{Error, Result};
use crate::page::language::Language;
use crate::page::template::Template;
use crate::page::variables::DEFAULT_TITLE;

/// Largest template, in bytes.
pub const MAX_TEMPLATE_BYTES: usize = 1 << 20;

/// A room's compiled pages.
#[derive(Debug)]
pub(crate) struct RoomPages {
    /// The room's template; `None`: the built-in pages.
    pub(crate) custom: Option<Template>,
    /// Each event's template, by the event's index in the room's `events`.
    pub(crate) events: Vec<Option<Template>>,
    /// `default_template_language`.
    pub(crate) language: Language,
    /// `accept_language`.
    pub(crate) accept_language: bool,
    /// The operator's `page_title`; `None` when left at its default.
    pub(crate) title: Option<String>,
}

impl RoomPages {
    /// Reads and compiles the templates of room `cfg` (at `at` in the configuration, for
    /// errors) and checks its language. A template's fault is reported with its line and
    /// column; a file that cannot be read, with its path.
    pub(crate) fn compile(cfg: &RoomConfig, at: &str) -> Result<RoomPages> {
        let language = Language::from_config(&cfg.default_template_language)
            .map_err(|why| Error::invalid(format!("{at}.default_template_language"), why))?;
        let custom = load(
            cfg.custom_page.as_deref(),
            cfg.custom_page_file.as_deref(),
            at,
        )?;
        let events = cfg
            .events
            .iter()
            .enumerate()
            .map(|(i, e): (usize, &EventConfig)| {
                load(
                    e.custom_page.as_deref(),
                    e.custom_page_file.as_deref(),
                    &format!("{at}.events[{i}]"),
                )
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(RoomPages {
            custom,
            events,
            language,
            accept_language: cfg.accept_language,
            title: (cfg.page_title != DEFAULT_TITLE).then(|| cfg.page_title.clone()),
        })
    }

    /// The built-in pages only, in the room's language (English when it names none of the
    /// built-in ones): for a room whose configuration was not loaded through
    /// [`RoomPages::compile`].
    pub(crate) fn builtin(cfg: &RoomConfig) -> RoomPages {
        RoomPages {
            custom: None,
            events: Vec::new(),
            language: Language::from_config(&cfg.default_template_language)
                .unwrap_or(Language::EnUs),
            accept_language: cfg.accept_language,
            title: (cfg.page_title != DEFAULT_TITLE).then(|| cfg.page_title.clone()),
        }
    }

    /// The template in force for the event at `event_index` (if any): the event's own, else
    /// the room's; `None` for the built-in pages.
    pub(crate) fn template(&self, event_index: Option<usize>) -> Option<&Template> {
        event_index
            .and_then(|i| self.events.get(i))
            .and_then(Option::as_ref)
            .or(self.custom.as_ref())
    }
}

/// A template file's text: a regular file (not a pipe or a device, which could hold the load
/// up or never end), read up to one byte past `MAX_TEMPLATE_BYTES` (a longer one is refused
/// by the caller without being read whole).
fn read_bounded(path: &Path) -> std::io::Result<String> {
    use std::io::{Error as IoError, ErrorKind, Read};
    // Without blocking: opening a pipe with no writer would wait for one.
    let file = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)?
    };
    if !file.metadata()?.is_file() {
        return Err(IoError::new(ErrorKind::InvalidInput, "not a regular file"));
    }
    let mut bytes = Vec::new();
    file.take(MAX_TEMPLATE_BYTES as u64 + 1)
        .read_to_end(&mut bytes)?;
    String::from_utf8(bytes).map_err(|_| IoError::new(ErrorKind::InvalidData, "not UTF-8"))
}

/// A template given inline or by file (`at` names the owner, for errors).
fn load(text: Option<&str>, file: Option<&str>, at: &str) -> Result<Option<Template>> {
    let (source, field, origin) = match (text, file) {
        (Some(t), _) => (t.to_owned(), format!("{at}.custom_page"), String::new()),
        (None, Some(path)) => {
            let field = format!("{at}.custom_page_file");
            let source = read_bounded(Path::new(path))
                .map_err(|e| Error::invalid(&field, format!("cannot read `{path}`: {e}")))?;
            (source, field, format!("(`{path}`) "))
        }
        (None, None) => return Ok(None),
    };
    if source.len() > MAX_TEMPLATE_BYTES {
        return Err(Error::invalid(
            field,
            format!(
                "{origin}holds {} bytes; a template may take at most {MAX_TEMPLATE_BYTES}",
                source.len()
            ),
        ));
    }
    Template::compile(source)
        .map(Some)
        .map_err(|e| Error::invalid(field, format!("{origin}{e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_name_the_field_the_file_and_the_place() {
        let mut cfg = RoomConfig::new("r", 1, 1);
        cfg.custom_page = Some("<p>\n{{#waitTimeKnown}}\n".into());
        let e = RoomPages::compile(&cfg, "rooms[0]")
            .unwrap_err()
            .to_string();
        assert!(e.contains("rooms[0].custom_page"), "{e}");
        assert!(e.contains("line 2, column 1"), "{e}");

        let dir = std::env::temp_dir().join(format!("vr-page-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("bad.html");
        std::fs::write(&file, "ok\nok {{/x}}").unwrap();
        let mut cfg = RoomConfig::new("r", 1, 1);
        cfg.custom_page_file = Some(file.display().to_string());
        let e = RoomPages::compile(&cfg, "rooms[1]")
            .unwrap_err()
            .to_string();
        assert!(e.contains("rooms[1].custom_page_file"), "{e}");
        assert!(e.contains("bad.html"), "{e}");
        assert!(e.contains("line 2, column 4"), "{e}");

        cfg.custom_page_file = Some(dir.join("missing.html").display().to_string());
        let e = RoomPages::compile(&cfg, "rooms[1]")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("missing.html") && e.contains("cannot read"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();

        let mut cfg = RoomConfig::new("r", 1, 1);
        cfg.default_template_language = "klingon".into();
        let e = RoomPages::compile(&cfg, "rooms[0]")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("default_template_language") && e.contains("ar-EG"),
            "{e}"
        );
    }
}
