//! Plural categories of whole numbers (CLDR's rules for the built-in languages), and the
//! lookup of a counted phrase by category.

/// A CLDR plural category.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Plural {
    /// Arabic 0.
    Zero,
    /// Singular (and French and Portuguese 0).
    One,
    /// Dual (Arabic, Hebrew).
    Two,
    /// Paucal (Slavic 2-4, Arabic 3-10).
    Few,
    /// Slavic 5-20, Arabic 11-99.
    Many,
    /// Everything else.
    Other,
}

/// Which rule a language counts by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rule {
    /// `one` for 1 (English, German, Dutch, Italian, Spanish, Turkish).
    OneOther,
    /// `one` for 0 and 1 (French, Brazilian Portuguese).
    ZeroOneOther,
    /// Russian: `one` 1, 21, 31...; `few` 2-4, 22-24...; `many` the rest.
    EastSlavic,
    /// Polish: `one` 1 only; `few` 2-4, 22-24...; `many` the rest.
    Polish,
    /// Arabic: `zero`, `one`, `two`, `few` 3-10, `many` 11-99 (modulo 100), `other`.
    Arabic,
    /// Hebrew: `one`, `two`, `other`.
    Hebrew,
    /// No plural forms (Japanese, Chinese, Korean, and Persian, whose nouns stay singular
    /// after a number).
    None,
}

impl Rule {
    /// The category of `n`.
    pub(crate) fn category(self, n: u64) -> Plural {
        let (m10, m100) = (n % 10, n % 100);
        match self {
            Rule::OneOther if n == 1 => Plural::One,
            Rule::ZeroOneOther if n <= 1 => Plural::One,
            Rule::EastSlavic if m10 == 1 && m100 != 11 => Plural::One,
            Rule::Polish if n == 1 => Plural::One,
            Rule::EastSlavic | Rule::Polish
                if (2..=4).contains(&m10) && !(12..=14).contains(&m100) =>
            {
                Plural::Few
            }
            Rule::EastSlavic | Rule::Polish => Plural::Many,
            Rule::Arabic => match (n, m100) {
                (0, _) => Plural::Zero,
                (1, _) => Plural::One,
                (2, _) => Plural::Two,
                (_, 3..=10) => Plural::Few,
                (_, 11..=99) => Plural::Many,
                _ => Plural::Other,
            },
            Rule::Hebrew if n == 1 => Plural::One,
            Rule::Hebrew if n == 2 => Plural::Two,
            _ => Plural::Other,
        }
    }
}

/// A counted phrase: its forms by category (`{n}` stands for the number); a category a
/// language does not list takes the `Other` form, which every list ends with.
pub(crate) type Forms = &'static [(Plural, &'static str)];

/// The form of `forms` for `n` counted by `rule`.
pub(crate) fn pick(forms: Forms, rule: Rule, n: u64) -> &'static str {
    let c = rule.category(n);
    forms
        .iter()
        .find(|(p, _)| *p == c)
        .or_else(|| forms.iter().find(|(p, _)| *p == Plural::Other))
        .map_or("", |(_, s)| s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use Plural::*;

    #[test]
    fn russian_and_polish() {
        let ru: Vec<Plural> = [1, 2, 5, 11, 12, 21, 22, 25, 101, 111, 112, 122]
            .iter()
            .map(|&n| Rule::EastSlavic.category(n))
            .collect();
        assert_eq!(
            ru,
            [One, Few, Many, Many, Many, One, Few, Many, One, Many, Many, Few]
        );
        let pl: Vec<Plural> = [1, 2, 5, 12, 21, 22, 0]
            .iter()
            .map(|&n| Rule::Polish.category(n))
            .collect();
        assert_eq!(pl, [One, Few, Many, Many, Many, Few, Many]);
    }

    #[test]
    fn arabic_hebrew_french() {
        let ar: Vec<Plural> = [0, 1, 2, 3, 10, 11, 99, 100, 102, 103, 111]
            .iter()
            .map(|&n| Rule::Arabic.category(n))
            .collect();
        assert_eq!(
            ar,
            [Zero, One, Two, Few, Few, Many, Many, Other, Other, Few, Many]
        );
        assert_eq!(Rule::Hebrew.category(2), Two);
        assert_eq!(Rule::Hebrew.category(20), Other);
        assert_eq!(Rule::ZeroOneOther.category(0), One);
        assert_eq!(Rule::OneOther.category(0), Other);
        assert_eq!(Rule::None.category(1), Other);
    }

    #[test]
    fn missing_categories_take_other() {
        let forms: Forms = &[(One, "{n} minute"), (Other, "{n} minutes")];
        assert_eq!(pick(forms, Rule::OneOther, 1), "{n} minute");
        assert_eq!(pick(forms, Rule::Arabic, 2), "{n} minutes");
    }
}
