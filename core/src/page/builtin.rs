//! The built-in pages, written as one Mustache template with the same variables a custom
//! page sees: the queue page (position, estimated wait), the pre-queue page (time until the
//! event starts; the random draw at the start when the event shuffles) and the reject page.
//! Each language's text is put into the template once, and each language's template is
//! compiled once per process.
//!
//! The page refreshes itself (`<meta http-equiv="refresh">`) every `refreshIntervalSeconds`:
//! a queued browser is let in by one of those refreshes. Its elements `position`, `wait`,
//! `retry` and `countdown` carry the figures, with `data-secs` in seconds, for scripts.

use std::sync::OnceLock;

use crate::page::language::Language;
use crate::page::template::Template;
use crate::page::translations::{strings, Strings};

/// The template, with `[[key]]` where a language's text goes.
const SKELETON: &str = r#"<!doctype html>
<html lang="{{locale}}" dir="{{dir}}"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
{{#refreshIntervalSeconds}}<meta http-equiv="refresh" content="{{refreshIntervalSeconds}}">
{{/refreshIntervalSeconds}}<title>{{pageTitle}}</title>
<style>body{font-family:system-ui,sans-serif;max-width:36rem;margin:4rem auto;padding:0 1rem;color:#222;line-height:1.5}h1{font-size:1.6rem}.n{font-size:2.4rem;font-weight:700}</style>
</head><body><h1>{{pageTitle}}</h1>
{{#isRejected}}<p>[[reject_intro]]</p>
{{#retrySentence}}<p id="retry" data-secs="{{retryAfterSeconds}}">{{retrySentence}}</p>
{{/retrySentence}}{{/isRejected}}{{#isQueued}}{{#isEventPrequeueing}}<p>[[prequeue_intro]]</p>
<p>[[prequeue_label]] <span class="n" id="countdown" data-secs="{{timeUntilEventStartSeconds}}">{{timeUntilEventStartFormatted}}</span></p>
{{#shuffleAtEventStart}}<p>[[prequeue_shuffle]]</p>
{{/shuffleAtEventStart}}{{/isEventPrequeueing}}{{^isEventPrequeueing}}<p>[[queue_intro]]</p>
{{#queuePosition}}<p>[[position_label]] <span class="n" id="position">{{queuePositionFormatted}}</span></p>
{{/queuePosition}}{{#waitTimeKnown}}<p>[[wait_label]] <span id="wait" data-secs="{{waitTimeSeconds}}">{{waitTimeFormatted}}</span></p>
{{/waitTimeKnown}}{{^waitTimeKnown}}<p>[[wait_unknown]]</p>
{{/waitTimeKnown}}{{/isEventPrequeueing}}{{#refreshSentence}}<p><small>{{refreshSentence}}</small></p>
{{/refreshSentence}}{{/isQueued}}</body></html>
"#;

/// The skeleton's keys and each language's text for them.
fn text(s: &Strings, key: &str) -> &'static str {
    match key {
        "reject_intro" => s.reject_intro,
        "prequeue_intro" => s.prequeue_intro,
        "prequeue_label" => s.prequeue_label,
        "prequeue_shuffle" => s.prequeue_shuffle,
        "queue_intro" => s.queue_intro,
        "position_label" => s.position_label,
        "wait_label" => s.wait_label,
        "wait_unknown" => s.wait_unknown,
        _ => "",
    }
}

/// The template source of `language`'s built-in page.
pub(crate) fn source(language: Language) -> String {
    let s = strings(language);
    let mut out = String::with_capacity(SKELETON.len() + 1024);
    let mut rest = SKELETON;
    while let Some(open) = rest.find("[[") {
        out.push_str(&rest[..open]);
        let after = &rest[open + 2..];
        let close = after.find("]]").unwrap_or(after.len());
        escape_html(text(s, &after[..close]), &mut out);
        rest = after.get(close + 2..).unwrap_or("");
    }
    out.push_str(rest);
    out
}

/// `language`'s built-in page, compiled on first use.
pub(crate) fn template(language: Language) -> &'static Template {
    static COMPILED: OnceLock<Vec<Template>> = OnceLock::new();
    let all = COMPILED.get_or_init(|| {
        Language::ALL
            .iter()
            .map(|&l| {
                // The skeleton and the text are constants, checked for every language by
                // `every_language_compiles`.
                Template::compile(source(l)).expect("the built-in page compiles")
            })
            .collect()
    });
    &all[language.index()]
}

fn escape_html(s: &str, out: &mut String) {
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_language_compiles_and_fills_every_key() {
        for l in Language::ALL {
            let src = source(l);
            assert!(!src.contains("[["), "{}: a key left unfilled", l.tag());
            crate::page::template::check(&src).unwrap_or_else(|e| panic!("{}: {e}", l.tag()));
            let _ = template(l);
        }
        assert!(source(Language::DeDe).contains("Voraussichtliche Wartezeit:"));
    }
}
