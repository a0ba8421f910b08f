//! A 64-bit mixer (splitmix64's finalizer): turns ticket ids and epochs into well-spread bits.

/// Mixes `z` so that every output bit depends on every input bit.
#[inline]
pub(crate) fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
