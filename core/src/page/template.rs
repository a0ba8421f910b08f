//! Mustache templates: compiled once (by `ramhorns`), rendered without reparsing.
//!
//! `ramhorns` reports a malformed template without saying where, and lets a section that is
//! never closed pass. So a template is first checked here by a scanner that follows
//! `ramhorns`' own grammar (the same tags, the same names, the same closing braces) and
//! locates the first fault by line and column; only then is it compiled. What the scanner
//! refuses beyond `ramhorns`: a section still open at the end, partials (`{{>name}}`, which
//! have nothing to load from) and delimiter changes (`{{=<% %>=}}`, which `ramhorns` would
//! read as a variable).

use std::fmt;

/// Most sections open at once (`ramhorns`' limit).
const MAX_DEPTH: usize = 16;

/// Where and why a template was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateError {
    /// 1-based line of the offending tag.
    pub line: usize,
    /// 1-based column (in characters) of the offending tag's `{{`.
    pub column: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "line {}, column {}: {}",
            self.line, self.column, self.message
        )
    }
}

impl std::error::Error for TemplateError {}

/// A compiled template.
pub(crate) struct Template {
    inner: ramhorns::Template<'static>,
}

impl fmt::Debug for Template {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Template")
            .field("bytes", &self.inner.source().len())
            .finish()
    }
}

impl Template {
    /// Checks and compiles `source`.
    pub(crate) fn compile(source: String) -> Result<Template, TemplateError> {
        check(&source)?;
        let inner = ramhorns::Template::new(source).map_err(|e| TemplateError {
            line: 1,
            column: 1,
            message: e.to_string(),
        })?;
        Ok(Template { inner })
    }

    /// Renders with `content`: `{{x}}` HTML-escaped, `{{{x}}}` and `{{&x}}` as they are.
    pub(crate) fn render<C: ramhorns::Content>(&self, content: &C) -> String {
        self.inner.render(content)
    }
}

/// The kinds of tag, by the character after `{{`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Variable,
    Triple,
    Section,
    Closing,
    Comment,
    Partial,
}

/// An open section: its name and where its tag starts.
struct Open<'a> {
    name: &'a str,
    at: usize,
}

/// The first fault of `source`, located; `Ok` when `ramhorns` will compile it and every
/// section is closed.
pub(crate) fn check(source: &str) -> Result<(), TemplateError> {
    let bytes = source.as_bytes();
    let fail = |at: usize, message: String| Err(locate(source, at, message));
    let mut open: Vec<Open<'_>> = Vec::new();
    let mut pos = 0;
    while let Some(found) = source[pos..].find("{{") {
        let start = pos + found;
        let mut i = start + 2;
        let kind = match bytes.get(i) {
            Some(b'{') | Some(b'&') => Kind::Triple,
            Some(b'#') | Some(b'^') => Kind::Section,
            Some(b'/') => Kind::Closing,
            Some(b'!') => Kind::Comment,
            Some(b'>') => Kind::Partial,
            Some(b'=') => {
                return fail(
                    start,
                    "changing delimiters (`{{=...=}}`) is not supported".into(),
                )
            }
            _ => Kind::Variable,
        };
        let three = bytes.get(i) == Some(&b'{');
        if kind != Kind::Variable {
            i += 1;
        }
        // The names up to the closing braces, as `ramhorns` reads them: runs of anything but
        // a space or `}`, separated by spaces.
        let mut names: Vec<&str> = Vec::new();
        let end = loop {
            while bytes.get(i) == Some(&b' ') {
                i += 1;
            }
            match bytes.get(i) {
                None => {
                    return fail(
                        start,
                        format!("this tag is never closed with `{}`", closing(three)),
                    )
                }
                Some(b'}') => {
                    let run = bytes[i..].iter().take_while(|&&b| b == b'}').count();
                    if run >= 3 || (run == 2 && !three) {
                        break i + if three { 3 } else { 2 };
                    }
                    return fail(
                        start,
                        format!("this tag must be closed with `{}`", closing(three)),
                    );
                }
                Some(_) => {
                    let len = bytes[i..]
                        .iter()
                        .take_while(|&&b| b != b' ' && b != b'}')
                        .count();
                    names.push(&source[i..i + len]);
                    i += len;
                }
            }
        };
        if names.is_empty() {
            return fail(start, "this tag names nothing".into());
        }
        match kind {
            Kind::Section => {
                for name in &names {
                    if open.len() == MAX_DEPTH {
                        return fail(
                            start,
                            format!("sections nest deeper than {MAX_DEPTH} levels"),
                        );
                    }
                    open.push(Open { name, at: start });
                }
            }
            Kind::Closing => {
                for name in &names {
                    match open.pop() {
                        None => {
                            return fail(
                                start,
                                format!("`{{{{/{name}}}}}` closes a section that is not open"),
                            )
                        }
                        Some(o) if o.name != *name => {
                            let (line, column) = line_column(source, o.at);
                            return fail(
                                start,
                                format!(
                                    "`{{{{/{name}}}}}` does not close the open section `{}` \
                                     (opened at line {line}, column {column})",
                                    o.name
                                ),
                            );
                        }
                        Some(_) => {}
                    }
                }
            }
            Kind::Partial => {
                return fail(
                    start,
                    format!("partials (`{{{{>{}}}}}`) are not supported", names[0]),
                )
            }
            Kind::Variable | Kind::Triple | Kind::Comment => {}
        }
        pos = end;
    }
    if let Some(o) = open.pop() {
        return fail(
            o.at,
            format!(
                "section `{}` is never closed (`{{{{/{}}}}}`)",
                o.name, o.name
            ),
        );
    }
    Ok(())
}

fn closing(three: bool) -> &'static str {
    if three {
        "}}}"
    } else {
        "}}"
    }
}

/// 1-based line and column (in characters) of byte `at`.
fn line_column(source: &str, at: usize) -> (usize, usize) {
    let before = &source[..at];
    let line = before.bytes().filter(|&b| b == b'\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |n| n + 1);
    (line, before[line_start..].chars().count() + 1)
}

fn locate(source: &str, at: usize, message: String) -> TemplateError {
    let (line, column) = line_column(source, at);
    TemplateError {
        line,
        column,
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(ramhorns::Content)]
    struct Vars {
        name: String,
        yes: bool,
        no: bool,
        n: Option<u64>,
    }

    fn vars() -> Vars {
        Vars {
            name: "<b>\"Tom\" & 'Jerry'</b>".into(),
            yes: true,
            no: false,
            n: Some(3),
        }
    }

    fn err(source: &str) -> TemplateError {
        Template::compile(source.into()).unwrap_err()
    }

    #[test]
    fn escapes_double_and_not_triple_mustaches() {
        let t = Template::compile("{{name}}|{{{name}}}|{{&name}}".into()).unwrap();
        assert_eq!(
            t.render(&vars()),
            "&lt;b&gt;&quot;Tom&quot; &amp; 'Jerry'&lt;/b&gt;|<b>\"Tom\" & 'Jerry'</b>|<b>\"Tom\" & 'Jerry'</b>"
        );
    }

    #[test]
    fn sections_inverted_sections_and_unknown_names() {
        let t = Template::compile(
            "{{#yes}}Y{{n}}{{/yes}}{{#no}}N{{/no}}{{^no}}!N{{/no}}{{^yes}}!Y{{/yes}}{{#n}}n{{/n}}\
             [{{missing}}]{{#missing}}M{{/missing}}{{^missing}}-{{/missing}}{{! a comment }}"
                .into(),
        )
        .unwrap();
        assert_eq!(t.render(&vars()), "Y3!Nn[]-");
    }

    #[test]
    fn errors_name_line_and_column() {
        let e = err("<p>\n  {{#waitTimeKnown}}\n  {{waitTime}}\n");
        assert_eq!((e.line, e.column), (2, 3), "{e}");
        assert!(e.message.contains("never closed"), "{e}");

        let e = err("a\nb {{#a}}x{{/b}}");
        assert_eq!((e.line, e.column), (2, 10), "{e}");
        assert!(e.message.contains("line 2, column 3"), "{e}");

        let e = err("ok\n\nhello {{name");
        assert_eq!((e.line, e.column), (3, 7), "{e}");

        let e = err("{{/x}}");
        assert_eq!((e.line, e.column), (1, 1), "{e}");
        assert!(e.message.contains("not open"), "{e}");

        let e = err("é à {{{name}}");
        assert_eq!((e.line, e.column), (1, 5), "{e}");
        assert!(e.message.contains("}}}"), "{e}");

        let e = err("x\n  {{> header}}");
        assert_eq!((e.line, e.column), (2, 3), "{e}");
        assert!(e.message.contains("partials"), "{e}");

        let e = err("{{=<% %>=}}");
        assert!(e.message.contains("delimiters"), "{e}");

        let e = err("{{ }}");
        assert!(e.message.contains("names nothing"), "{e}");

        let deep = "{{#a}}".repeat(17) + &"{{/a}}".repeat(17);
        let e = err(&deep);
        assert_eq!((e.line, e.column), (1, 97), "{e}");
        assert_eq!(
            e.to_string(),
            "line 1, column 97: sections nest deeper than 16 levels"
        );
    }

    #[test]
    fn a_triple_mustache_leaves_a_fourth_brace_as_text() {
        let t = Template::compile("{{n}}}".into()).unwrap();
        assert_eq!(t.render(&vars()), "3}");
    }

    proptest! {
        // Whatever the scanner accepts, ramhorns compiles (and renders without panicking).
        #[test]
        fn the_scanner_is_no_more_lenient_than_ramhorns(
            s in proptest::collection::vec(
                prop_oneof![
                    Just("{{"), Just("}}"), Just("{"), Just("}"), Just("#"), Just("/"),
                    Just("^"), Just("!"), Just("&"), Just(">"), Just("a"), Just("b"),
                    Just(" "), Just("\n"), Just("é"),
                ],
                0..40,
            )
        ) {
            let s: String = s.concat();
            if check(&s).is_ok() {
                let t = ramhorns::Template::new(s.clone());
                prop_assert!(t.is_ok(), "ramhorns refused {:?}", s);
                let _ = t.unwrap().render(&vars());
            }
        }
    }
}
