//! Numbers and durations written in a page's language.

use crate::page::plural::{pick, Forms};
use crate::page::translations::Strings;

/// The digits a language writes numbers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Digits {
    /// 0123456789.
    Latin,
    /// Arabic-Indic digits, as Egyptian Arabic writes them (٠١٢٣٤٥٦٧٨٩).
    ArabicIndic,
    /// Extended Arabic-Indic digits, as Persian writes them (۰۱۲۳۴۵۶۷۸۹).
    Persian,
}

/// `n` in `digits`, without grouping (positions and durations stay short, and a page's
/// numbers then read the same in every language that writes Latin digits).
pub(crate) fn number(n: u64, digits: Digits) -> String {
    let latin = n.to_string();
    let zero = match digits {
        Digits::Latin => return latin,
        Digits::ArabicIndic => '\u{660}',
        Digits::Persian => '\u{6f0}',
    };
    latin
        .bytes()
        .map(|b| char::from_u32(zero as u32 + u32::from(b - b'0')).unwrap_or('?'))
        .collect()
}

/// The form of `forms` for `n`, its `{n}` replaced by `n` in the language's digits.
pub(crate) fn counted(forms: Forms, s: &Strings, n: u64) -> String {
    pick(forms, s.rule, n).replace("{n}", &number(n, s.digits))
}

/// Whole minutes of `secs`, rounded to the nearest (half up); at least 1 when `secs > 0`:
/// Cloudflare's `waitTime`.
pub(crate) fn minutes_rounded(secs: u64) -> u64 {
    if secs == 0 {
        0
    } else {
        (secs.saturating_add(30) / 60).max(1)
    }
}

/// A duration for people: "less than a minute", "5 minutes", "1 hour and 5 minutes",
/// "2 days and 3 hours" (at most two units, the largest).
pub(crate) fn duration(secs: u64, s: &Strings) -> String {
    if secs < 60 {
        return s.less_than_a_minute.to_owned();
    }
    let minutes = minutes_rounded(secs);
    let (big, small) = if minutes < 60 {
        return counted(s.minutes, s, minutes);
    } else if minutes < 48 * 60 {
        let (h, m) = (minutes / 60, minutes % 60);
        (
            counted(s.hours, s, h),
            (m > 0).then(|| counted(s.minutes, s, m)),
        )
    } else {
        let (d, h) = (minutes / 1440, (minutes % 1440) / 60);
        (
            counted(s.days, s, d),
            (h > 0).then(|| counted(s.hours, s, h)),
        )
    };
    match small {
        None => big,
        Some(small) => {
            let joiner = if small.starts_with(|c: char| c.is_numeric()) {
                s.and_before_digit
            } else {
                s.and
            };
            format!("{big}{joiner}{small}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::page::language::Language;
    use crate::page::translations::strings;

    fn d(l: Language, secs: u64) -> String {
        duration(secs, strings(l))
    }

    #[test]
    fn digits() {
        assert_eq!(number(1209, Digits::Latin), "1209");
        assert_eq!(number(1209, Digits::ArabicIndic), "١٢٠٩");
        assert_eq!(number(1209, Digits::Persian), "۱۲۰۹");
    }

    #[test]
    fn english_durations() {
        assert_eq!(d(Language::EnUs, 0), "less than a minute");
        assert_eq!(d(Language::EnUs, 59), "less than a minute");
        assert_eq!(d(Language::EnUs, 60), "1 minute");
        assert_eq!(d(Language::EnUs, 125), "2 minutes");
        assert_eq!(d(Language::EnUs, 3600), "1 hour");
        assert_eq!(d(Language::EnUs, 3900), "1 hour and 5 minutes");
        assert_eq!(d(Language::EnUs, 7320), "2 hours and 2 minutes");
        assert_eq!(d(Language::EnUs, 3 * 86400 + 3600), "3 days and 1 hour");
        assert_eq!(minutes_rounded(0), 0);
        assert_eq!(minutes_rounded(1), 1);
        assert_eq!(minutes_rounded(89), 1);
        assert_eq!(minutes_rounded(90), 2);
    }

    #[test]
    fn plural_forms_in_durations() {
        assert_eq!(d(Language::RuRu, 60), "1 минута");
        assert_eq!(d(Language::RuRu, 3 * 60), "3 минуты");
        assert_eq!(d(Language::RuRu, 11 * 60), "11 минут");
        assert_eq!(d(Language::RuRu, 21 * 60), "21 минута");
        assert_eq!(d(Language::RuRu, 2 * 3600 + 22 * 60), "2 часа и 22 минуты");
        assert_eq!(d(Language::PlPl, 22 * 60), "22 minuty");
        assert_eq!(d(Language::PlPl, 21 * 60), "21 minut");
        assert_eq!(d(Language::PlPl, 3 * 86400), "3 dni");
        assert_eq!(d(Language::ArEg, 60), "دقيقة واحدة");
        assert_eq!(d(Language::ArEg, 120), "دقيقتان");
        assert_eq!(d(Language::ArEg, 5 * 60), "٥ دقائق");
        assert_eq!(d(Language::ArEg, 15 * 60), "١٥ دقيقة");
        assert_eq!(d(Language::ArEg, 2 * 3600 + 300), "ساعتان و٥ دقائق");
        assert_eq!(d(Language::HeIl, 2 * 3600), "שעתיים");
        assert_eq!(d(Language::HeIl, 3600 + 300), "שעה אחת ו־5 דקות");
        assert_eq!(d(Language::HeIl, 3600 + 120), "שעה אחת ושתי דקות");
        assert_eq!(d(Language::FaIr, 300), "۵ دقیقه");
        assert_eq!(d(Language::JaJp, 3600 + 300), "1時間5分");
        assert_eq!(d(Language::ZhCn, 3600 + 300), "1小时5分钟");
        assert_eq!(d(Language::DeDe, 3600 + 60), "1 Stunde und 1 Minute");
        assert_eq!(d(Language::FrFr, 120), "2\u{a0}minutes");
        assert_eq!(d(Language::NlNl, 3 * 3600), "3 uur");
    }
}
