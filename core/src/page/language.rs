//! The languages of the built-in pages: their tags, their writing direction, the tags the
//! configuration accepts, and the choice among them by a visitor's `Accept-Language`.

/// A language the built-in pages are written in (Cloudflare's tags for the same languages).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Language {
    /// English (United States), `en-US`: the default.
    EnUs,
    /// German, `de-DE`.
    DeDe,
    /// French, `fr-FR`.
    FrFr,
    /// Spanish (Spain), `es-ES`.
    EsEs,
    /// Italian, `it-IT`.
    ItIt,
    /// Portuguese (Brazil), `pt-BR`.
    PtBr,
    /// Dutch, `nl-NL`.
    NlNl,
    /// Polish, `pl-PL`.
    PlPl,
    /// Russian, `ru-RU`.
    RuRu,
    /// Turkish, `tr-TR`.
    TrTr,
    /// Japanese, `ja-JP`.
    JaJp,
    /// Chinese (simplified), `zh-CN`.
    ZhCn,
    /// Korean, `ko-KR`.
    KoKr,
    /// Arabic (Egypt), `ar-EG`: right to left.
    ArEg,
    /// Hebrew, `he-IL`: right to left.
    HeIl,
    /// Persian, `fa-IR`: right to left.
    FaIr,
}

impl Language {
    /// Every language, in the order error messages list them.
    pub const ALL: [Language; 16] = [
        Language::EnUs,
        Language::DeDe,
        Language::FrFr,
        Language::EsEs,
        Language::ItIt,
        Language::PtBr,
        Language::NlNl,
        Language::PlPl,
        Language::RuRu,
        Language::TrTr,
        Language::JaJp,
        Language::ZhCn,
        Language::KoKr,
        Language::ArEg,
        Language::HeIl,
        Language::FaIr,
    ];

    /// The BCP 47 tag, as Cloudflare writes it (`de-DE`).
    pub fn tag(self) -> &'static str {
        match self {
            Language::EnUs => "en-US",
            Language::DeDe => "de-DE",
            Language::FrFr => "fr-FR",
            Language::EsEs => "es-ES",
            Language::ItIt => "it-IT",
            Language::PtBr => "pt-BR",
            Language::NlNl => "nl-NL",
            Language::PlPl => "pl-PL",
            Language::RuRu => "ru-RU",
            Language::TrTr => "tr-TR",
            Language::JaJp => "ja-JP",
            Language::ZhCn => "zh-CN",
            Language::KoKr => "ko-KR",
            Language::ArEg => "ar-EG",
            Language::HeIl => "he-IL",
            Language::FaIr => "fa-IR",
        }
    }

    /// The primary language subtag (`de`).
    pub fn primary(self) -> &'static str {
        &self.tag()[..2]
    }

    /// Whether the language is written right to left (the page's `dir="rtl"`).
    pub fn is_rtl(self) -> bool {
        matches!(self, Language::ArEg | Language::HeIl | Language::FaIr)
    }

    /// `rtl` or `ltr`, for the `dir` attribute.
    pub fn dir(self) -> &'static str {
        if self.is_rtl() {
            "rtl"
        } else {
            "ltr"
        }
    }

    /// Its position in [`Language::ALL`].
    pub(crate) fn index(self) -> usize {
        self as usize
    }

    /// The language a configuration names in `default_template_language`: one of the tags
    /// (any case, `-` or `_`), or a bare language (`de`). Anything else is refused with the
    /// list of tags.
    pub fn from_config(tag: &str) -> Result<Language, String> {
        let t = tag.trim().replace('_', "-");
        Language::ALL
            .into_iter()
            .find(|l| l.tag().eq_ignore_ascii_case(&t) || l.primary().eq_ignore_ascii_case(&t))
            .ok_or_else(|| {
                let tags: Vec<&str> = Language::ALL.iter().map(|l| l.tag()).collect();
                format!(
                    "`{tag}` is not a language of the built-in pages; use one of {} (or a bare \
                     language such as `de`)",
                    tags.join(", ")
                )
            })
    }

    /// The language for one language range of an `Accept-Language` header (RFC 4647): the
    /// same tag, or else the same primary language in another region (`de-AT` gets `de-DE`,
    /// `pt-PT` gets `pt-BR`). Traditional Chinese (`zh-TW`, `zh-HK`, `zh-MO`, `zh-Hant`) is
    /// not served the simplified page.
    fn for_range(range: &str) -> Option<Language> {
        let range = range.trim();
        if let Some(l) = Language::ALL
            .into_iter()
            .find(|l| l.tag().eq_ignore_ascii_case(range))
        {
            return Some(l);
        }
        let mut subtags = range.split(['-', '_']);
        let primary = subtags.next()?;
        if primary.eq_ignore_ascii_case("zh")
            && subtags.any(|s| {
                ["hant", "tw", "hk", "mo"]
                    .iter()
                    .any(|t| s.eq_ignore_ascii_case(t))
            })
        {
            return None;
        }
        Language::ALL
            .into_iter()
            .find(|l| l.primary().eq_ignore_ascii_case(primary))
    }

    /// The language a visitor's `Accept-Language` header prefers among the built-in ones:
    /// ranges by decreasing `q` (ties in header order), each matched as in RFC 4647's lookup
    /// with a fallback to the same language in another region; `*` picks `default`; a
    /// language given `q=0` is never picked. `None` when nothing matches.
    pub fn negotiate(header: &str, default: Language) -> Option<Language> {
        // Bounded work per request: browsers send a handful of ranges.
        const MAX_RANGES: usize = 32;
        let mut ranges: Vec<(&str, u16)> = header
            .split(',')
            .take(MAX_RANGES)
            .filter_map(|item| {
                let mut parts = item.split(';');
                let range = parts.next()?.trim();
                if range.is_empty() {
                    return None;
                }
                let mut q = 1000;
                for p in parts {
                    let p = p.trim();
                    if let Some(v) = p.strip_prefix("q=").or_else(|| p.strip_prefix("Q=")) {
                        q = parse_q(v)?;
                    }
                }
                Some((range, q))
            })
            .collect();
        // A language refused (`q=0`) by its bare tag or by exactly one of ours; a region we do
        // not have (`de-AT;q=0`) refuses nothing we could serve for another range.
        let refused: Vec<Language> = ranges
            .iter()
            .filter(|(r, q)| *q == 0 && *r != "*")
            .filter_map(|(r, _)| {
                let exact = Language::ALL
                    .into_iter()
                    .find(|l| l.tag().eq_ignore_ascii_case(r));
                let bare = Language::ALL
                    .into_iter()
                    .find(|l| l.primary().eq_ignore_ascii_case(r));
                exact.or(bare)
            })
            .collect();
        ranges.sort_by_key(|r| std::cmp::Reverse(r.1));
        ranges
            .iter()
            .filter(|(_, q)| *q > 0)
            .find_map(|(range, _)| {
                let l = if *range == "*" {
                    default
                } else {
                    Language::for_range(range)?
                };
                (!refused.contains(&l)).then_some(l)
            })
    }
}

/// A `q` value in thousandths (`0`, `0.5`, `1.000`); `None` when malformed.
fn parse_q(v: &str) -> Option<u16> {
    let v = v.trim();
    let (int, frac) = v.split_once('.').unwrap_or((v, ""));
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut thousandths: u16 = match int {
        "0" => 0,
        "1" => 1000,
        _ => return None,
    };
    for (i, b) in frac.bytes().enumerate() {
        thousandths += u16::from(b - b'0') * [100, 10, 1][i];
    }
    (thousandths <= 1000).then_some(thousandths)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configuration_tags() {
        assert_eq!(Language::from_config("de-DE"), Ok(Language::DeDe));
        assert_eq!(Language::from_config("de"), Ok(Language::DeDe));
        assert_eq!(Language::from_config("PT_br"), Ok(Language::PtBr));
        assert_eq!(Language::from_config("he-IL"), Ok(Language::HeIl));
        let err = Language::from_config("xx-YY").unwrap_err();
        assert!(err.contains("en-US") && err.contains("fa-IR"), "{err}");
        assert!(Language::from_config("de-AT").is_err());
    }

    #[test]
    fn negotiation_follows_q_values_and_falls_back_to_the_region() {
        let d = Language::EnUs;
        assert_eq!(Language::negotiate("de", d), Some(Language::DeDe));
        assert_eq!(
            Language::negotiate("de-AT,en;q=0.5", d),
            Some(Language::DeDe)
        );
        assert_eq!(
            Language::negotiate("fr;q=0.4, ja;q=0.8, en;q=0.6", d),
            Some(Language::JaJp)
        );
        assert_eq!(Language::negotiate("sv, nl;q=0.3", d), Some(Language::NlNl));
        assert_eq!(Language::negotiate("sv, *;q=0.1", d), Some(Language::EnUs));
        assert_eq!(
            Language::negotiate("*", Language::PlPl),
            Some(Language::PlPl)
        );
        assert_eq!(Language::negotiate("sv-SE", d), None);
        assert_eq!(Language::negotiate("", d), None);
        assert_eq!(
            Language::negotiate("zh-TW, ko;q=0.2", d),
            Some(Language::KoKr)
        );
        assert_eq!(Language::negotiate("zh-Hans-CN", d), Some(Language::ZhCn));
        assert_eq!(Language::negotiate("pt-PT", d), Some(Language::PtBr));
        assert_eq!(Language::negotiate("ar", d), Some(Language::ArEg));
        // q=0 refuses a language, even when `*` would pick it.
        assert_eq!(Language::negotiate("en;q=0, *", d), None);
        assert_eq!(
            Language::negotiate("de;q=0, fr;q=0.5", d),
            Some(Language::FrFr)
        );
        // Malformed q values drop the range, not the header.
        assert_eq!(Language::negotiate("de;q=2, it", d), Some(Language::ItIt));
        assert_eq!(
            Language::negotiate("de;q=0.1234, it;q=0.5", d),
            Some(Language::ItIt)
        );
        assert_eq!(
            Language::negotiate("de;q=0.75, it;q=0.5", d),
            Some(Language::DeDe)
        );
    }

    #[test]
    fn directions_and_index() {
        for (i, l) in Language::ALL.into_iter().enumerate() {
            assert_eq!(l.index(), i);
            assert_eq!(l.is_rtl(), ["ar", "he", "fa"].contains(&l.primary()));
        }
        assert_eq!(Language::HeIl.dir(), "rtl");
        assert_eq!(Language::EnUs.dir(), "ltr");
    }
}
