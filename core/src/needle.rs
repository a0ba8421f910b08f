//! A substring search compiled once and run on every request, inlined into its caller.
//!
//! On x86-64 the search is memchr's SSE2 "packed pair" searcher (SSE2 is part of the
//! baseline, so there is no runtime CPU dispatch), which inlines: measured in nginx, what a
//! request pays for the module is mostly instruction fetches, and memchr's general `memmem`
//! (runtime dispatch to out-of-line AVX2 routines) took 19 of the admit path's 90 code
//! lines. Other targets, needles of one byte, and haystacks too short for a vector use
//! memchr's general searcher.

use memchr::memmem;

/// A compiled search for one needle.
#[derive(Clone)]
pub(crate) struct Needle {
    bytes: Box<[u8]>,
    /// Any target, any haystack length.
    general: memmem::Finder<'static>,
    /// x86-64, needles of two bytes or more, haystacks of at least its minimum length.
    #[cfg(target_arch = "x86_64")]
    sse2: Option<memchr::arch::x86_64::sse2::packedpair::Finder>,
}

impl std::fmt::Debug for Needle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Needle({:?})", String::from_utf8_lossy(&self.bytes))
    }
}

impl Needle {
    /// A search for `bytes`.
    pub(crate) fn new(bytes: &[u8]) -> Self {
        Self {
            general: memmem::Finder::new(bytes).into_owned(),
            #[cfg(target_arch = "x86_64")]
            sse2: memchr::arch::x86_64::sse2::packedpair::Finder::new(bytes),
            bytes: bytes.into(),
        }
    }

    /// What it searches for.
    #[inline]
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Where it first occurs in `haystack`.
    #[inline]
    pub(crate) fn find(&self, haystack: &[u8]) -> Option<usize> {
        #[cfg(target_arch = "x86_64")]
        if let Some(sse2) = &self.sse2 {
            if haystack.len() >= sse2.min_haystack_len() {
                return sse2.find(haystack, &self.bytes);
            }
        }
        self.find_general(haystack)
    }

    /// Out of line: on x86-64 only short haystacks and one-byte needles take it.
    #[inline(never)]
    fn find_general(&self, haystack: &[u8]) -> Option<usize> {
        self.general.find(haystack)
    }
}

#[cfg(all(test, not(velvet_rope_loom)))]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Finds what a plain scan finds, at every haystack length around the vector width.
        #[test]
        fn finds_the_first_occurrence(needle in "[ab]{1,4}", haystack in "[abc]{0,70}") {
            let n = Needle::new(needle.as_bytes());
            let want = haystack
                .as_bytes()
                .windows(needle.len())
                .position(|w| w == needle.as_bytes());
            proptest::prop_assert_eq!(n.find(haystack.as_bytes()), want);
        }
    }
}
