//! The ways a server or framework may read a request target's path ("readings"), and the one
//! scan that says which of them can differ for a given target.
//!
//! Each reading is a fixed pipeline of steps that some front door really performs:
//!
//! | step | who does it |
//! |---|---|
//! | absolute-form (`http://host/p`) reduced to its path | every HTTP server (RFC 9112 3.2.2) |
//! | cut at `?` | everyone |
//! | cut at `#` | Node's `url.parse`, find-my-way, httptools, gunicorn; not h11 (uvicorn's default) |
//! | cut at `;` | Fastify with `useSemicolonDelimiter`, Java servlets |
//! | `\` read as `/` | WHATWG URLs (`new URL(req.url, base)`), Node's `url.parse` |
//! | tab, CR, LF dropped; `//host` read as an authority | WHATWG URLs |
//! | percent-decoding, all of it | uvicorn and gunicorn (`scope["path"]`, `PATH_INFO`), `send` |
//! | percent-decoding but `#$&+,/:;=?@%` | find-my-way (Fastify's router), `decodeURI` |
//! | percent-decoding twice | a handler decoding a parameter its router decoded already |
//! | slashes merged, then dot segments removed | `send` (`express.static`), `os.path.normpath` (Starlette's `StaticFiles`, Werkzeug's `safe_join`) |
//! | RFC 3986 dot-segment removal, empty segments kept | WHATWG URLs (which also read `%2e` as `.`) |
//! | slashes merged only | find-my-way's `ignoreDuplicateSlashes` |
//!
//! The first reading ([`READINGS`]`[0]`) is the canonical form: absolute-form reduced, query
//! and fragment dropped, percent-decoded, slashes merged, dot segments removed.

/// What a target contains that makes readings differ (see [`scan`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Features {
    /// A `%`.
    pub(super) percent: bool,
    /// A `\`, or a `%5C` (a `\` once decoded).
    pub(super) backslash: bool,
    /// A `#` before any `?`.
    pub(super) hash: bool,
    /// A `;` before any `?`.
    pub(super) semicolon: bool,
    /// Not origin-form (does not start with `/`): absolute-form, `*`, or malformed.
    pub(super) not_origin: bool,
    /// Something that may be or become a dot segment or an empty one (`/.`, `//`, a leading
    /// `.`), or a byte the readings treat apart (controls, non-ASCII).
    pub(super) other: bool,
    /// A byte no normal form holds: a control (NUL, tab, CR, LF, DEL...), or bytes that are
    /// not UTF-8; or a `%` not followed by two hex digits. Set by [`scan`] for the raw target
    /// and by [`Reading::read`] for decoded bytes.
    pub(super) malformed: bool,
    /// Bytes of the target before its first `?`.
    pub(super) path_len: usize,
}

impl Features {
    /// Whether every reading of the target is its path as written (cut at `?`): the fast path.
    pub(super) fn plain(&self) -> bool {
        !(self.percent
            || self.backslash
            || self.hash
            || self.semicolon
            || self.not_origin
            || self.other
            || self.malformed)
    }
}

/// Byte classes for [`scan`], one bit each.
const PERCENT: u8 = 1;
const BACKSLASH: u8 = 1 << 1;
const HASH: u8 = 1 << 2;
const SEMICOLON: u8 = 1 << 3;
const CONTROL: u8 = 1 << 4;
const HIGH: u8 = 1 << 5;
/// `/` or `.`: after a `/`, the start of an empty or dot segment.
const AFTER_SLASH: u8 = 1 << 6;
/// `/`.
const SLASH: u8 = 1 << 7;
/// `?`: the path ends (a class of its own, no other bit).
const QUERY: u8 = u8::MAX;

/// The class bits of every byte.
static CLASSES: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = match b as u8 {
            b'%' => PERCENT,
            b'\\' => BACKSLASH,
            b'#' => HASH,
            b';' => SEMICOLON,
            b'/' => SLASH | AFTER_SLASH,
            b'.' => AFTER_SLASH,
            b'?' => QUERY,
            0..=0x1f | 0x7f => CONTROL,
            0x80.. => HIGH,
            _ => 0,
        };
        b += 1;
    }
    t
};

/// What the bytes of a target read so far hold (see [`scan`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Classes {
    /// The class bits seen.
    seen: u8,
    /// 1: a `/` followed by a `/` or a `.` seen.
    slash_then: u8,
    /// 1: the last byte read is a `/`.
    prev_slash: u8,
    /// Bytes read.
    read: usize,
    /// Whether a `?` ended the path (at `read`).
    ended: bool,
}

/// [`Classes`] of the bytes from `c.read` on, one at a time (branch-free per byte).
#[inline]
fn classes_bytewise(target: &[u8], mut c: Classes) -> Classes {
    for &b in &target[c.read..] {
        let class = CLASSES[usize::from(b)];
        if class == QUERY {
            c.ended = true;
            return c;
        }
        c.seen |= class;
        c.slash_then |= c.prev_slash & (class >> 6);
        c.prev_slash = class >> 7;
        c.read += 1;
    }
    c
}

/// [`Classes`] of the target's bytes 16 at a time (SSE2, enabled on every x86_64 target), up
/// to a `?`: its whole 16-byte blocks, then the bytes left, as its last 16 (a block that
/// overlaps what was read: see [`block`]). The same answer as [`classes_bytewise`], in about
/// a third of the instructions; a target shorter than 16 bytes is left to it. (No
/// `#[target_feature]`: the intrinsics are called in `unsafe` blocks, which builds alike on
/// the oldest supported compiler and on those where the intrinsics are safe functions.)
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline]
fn classes_by_block(target: &[u8]) -> Classes {
    let mut c = Classes::default();
    while c.read + 16 <= target.len() {
        let start = c.read;
        if block(target, &mut c, start) {
            return c;
        }
    }
    if c.read < target.len() && target.len() >= 16 {
        block(target, &mut c, target.len() - 16);
    }
    c
}

/// Reads into `c` the 16 bytes of `target` from `start` (at most `c.read`, and within 16 of
/// it), of which those from `c.read` on are new; whether a `?` ended the path. (Those read
/// already are read again alike: their classes and the pairs among them are in `c`, and none
/// is a `?`.)
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline(always)]
fn block(target: &[u8], c: &mut Classes, start: usize) -> bool {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_cmplt_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_set1_epi8,
    };
    assert!(start + 16 <= target.len());
    debug_assert!(start <= c.read && c.read - start < 16);
    // The intrinsics need SSE2, which this function is only compiled with
    // (`cfg(target_feature = "sse2")`): "SSE2 as above" in each block below.
    let is = |v: __m128i, b: u8| {
        // SAFETY: SSE2 as above.
        unsafe { _mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(b as i8))) as u32 }
    };
    let flag = |mask: u32, class: u8| if mask != 0 { class } else { 0 };
    let skip = c.read - start;
    // SAFETY: `start + 16 <= target.len()` (asserted): the 16 bytes loaded lie in `target`,
    // and `_mm_loadu_si128` needs no alignment; SSE2 as above.
    let v = unsafe { _mm_loadu_si128(target.as_ptr().add(start).cast()) };
    let is = |b: u8| is(v, b);
    let query = is(b'?');
    // The bytes before the first `?`, if any.
    let path = if query != 0 {
        (1u32 << query.trailing_zeros()) - 1
    } else {
        0xffff
    };
    // Bytes from 0x80 up are negative to the signed compare: kept out of the controls.
    // SAFETY: SSE2 as above.
    let (high, below_space) = unsafe {
        (
            _mm_movemask_epi8(v) as u32,
            _mm_movemask_epi8(_mm_cmplt_epi8(v, _mm_set1_epi8(0x20))) as u32,
        )
    };
    let control = ((below_space & !high) | is(0x7f)) & path;
    let slash = is(b'/') & path;
    let after_slash = (is(b'.') | slash) & path;
    c.seen |= flag(is(b'%') & path, PERCENT)
        | flag(is(b'\\') & path, BACKSLASH)
        | flag(is(b'#') & path, HASH)
        | flag(is(b';') & path, SEMICOLON)
        | flag(control, CONTROL)
        | flag(high & path, HIGH)
        | flag(slash, SLASH)
        | flag(after_slash, AFTER_SLASH);
    // (The byte before the first new one, at `skip - 1` or the last of the block before, was
    // a `/` when `prev_slash` says so.)
    let before = u32::from(c.prev_slash) << skip;
    c.slash_then |= u8::from(((slash << 1) | before) & after_slash != 0);
    if query != 0 {
        let at = query.trailing_zeros() as usize;
        if at > skip {
            c.prev_slash = u8::from(slash & (1 << (at - 1)) != 0);
        }
        c.read = start + at;
        c.ended = true;
        return true;
    }
    c.prev_slash = u8::from(slash & 0x8000 != 0);
    c.read = start + 16;
    false
}

/// The target's [`Classes`] up to its first `?`.
#[inline]
fn classes(target: &[u8]) -> Classes {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    let c = classes_by_block(target);
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
    let c = Classes::default();
    if c.ended {
        return c;
    }
    classes_bytewise(target, c)
}

/// One pass over the target up to its first `?`: what it contains (see [`Features`]).
pub(super) fn scan(target: &[u8]) -> Features {
    let Classes {
        seen,
        slash_then,
        read,
        ..
    } = classes(target);
    let path = &target[..read];
    let mut f = Features {
        percent: seen & PERCENT != 0,
        backslash: seen & BACKSLASH != 0,
        hash: seen & HASH != 0,
        semicolon: seen & SEMICOLON != 0,
        not_origin: path.first() != Some(&b'/'),
        other: (slash_then & 1) != 0 || seen & (CONTROL | HIGH) != 0,
        malformed: seen & CONTROL != 0,
        path_len: path.len(),
    };
    if seen & HIGH != 0 && std::str::from_utf8(path).is_err() {
        f.malformed = true;
    }
    if f.percent {
        if !escapes_well_formed(path) {
            f.malformed = true;
        }
        if memchr::memmem::find(path, b"%5c").is_some()
            || memchr::memmem::find(path, b"%5C").is_some()
        {
            f.backslash = true;
        }
    }
    f
}

/// Whether every `%` in `path` starts a `%XX` escape.
fn escapes_well_formed(path: &[u8]) -> bool {
    let mut i = 0;
    while let Some(p) = memchr::memchr(b'%', &path[i..]) {
        let at = i + p;
        match (path.get(at + 1), path.get(at + 2)) {
            (Some(h), Some(l)) if h.is_ascii_hexdigit() && l.is_ascii_hexdigit() => i = at + 3,
            _ => return false,
        }
    }
    true
}

/// How much of a path is percent-decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Decode {
    /// Nothing.
    None,
    /// Everything but escapes of `#$&+,/:;=?@` and `%` (find-my-way's `safeDecodeURI`).
    Uri,
    /// Everything.
    All,
    /// Everything, twice (`%252e` becomes `.`): a handler decoding what its router decoded
    /// already (a wildcard parameter passed to a file server that decodes again).
    Twice,
}

/// What happens to dot segments and empty segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Dots {
    /// Nothing.
    Keep,
    /// Runs of `/` become one; dot segments stay.
    Merge,
    /// RFC 3986 5.2.4: `.` and `..` segments removed, empty segments kept.
    Rfc,
    /// Slashes merged, then dot segments removed (`path.normalize`, `os.path.normpath`).
    Normpath,
}

/// One way of reading a target's path: a fixed pipeline.
#[derive(Debug, Clone, Copy)]
pub(super) struct Reading {
    /// Cut at `#` (else only at `?`).
    cut_fragment: bool,
    /// Cut at `;` too.
    cut_semicolon: bool,
    /// The WHATWG URL parser's steps: tab, CR and LF dropped, `\` read as `/`, a leading
    /// `//` read as an authority, `%2e` read as `.` in dot segments.
    whatwg: bool,
    /// `\` read as `/` (implied by `whatwg`), as written and once decoded (`%5C`: a Windows
    /// file server's reading).
    backslash: bool,
    /// A leading `/` added when missing (every reading but the raw one).
    rooted: bool,
    decode: Decode,
    dots: Dots,
}

impl Reading {
    const fn new(decode: Decode, dots: Dots) -> Self {
        Self {
            cut_fragment: true,
            cut_semicolon: false,
            whatwg: false,
            backslash: false,
            rooted: true,
            decode,
            dots,
        }
    }

    /// Whether this reading can differ from the reading it varies for a target with `f`: a
    /// reading that reads `\`, `#` or `;` apart is the same as the one that does not when the
    /// target holds none, one that decodes twice when it holds no `%` (skipped: it would
    /// repeat an answer). A `\` a second decoding makes (`%255c`, `%25%35%63`) is not one the
    /// scan sees: a reading that decodes twice reads `\` apart whenever it decodes.
    pub(super) fn relevant(&self, f: &Features) -> bool {
        (self.decode != Decode::Twice || f.percent)
            && (!self.backslash || f.backslash || self.whatwg || self.decode == Decode::Twice)
            && (self.cut_fragment || f.hash)
            && (!self.cut_semicolon || f.semicolon)
    }

    /// Writes this reading of `target` into `out` (cleared first), using `scratch`; records in
    /// `f.malformed` decoded bytes no normal form holds.
    pub(super) fn read(
        &self,
        target: &[u8],
        scratch: &mut Vec<u8>,
        out: &mut Vec<u8>,
        f: &mut Features,
    ) {
        // 1. The target as this reading sees its characters (a copy only when they change).
        let source: &[u8] = if self.whatwg || self.backslash {
            scratch.clear();
            scratch.extend(target.iter().filter_map(|&b| match b {
                b'\t' | b'\r' | b'\n' if self.whatwg => None,
                b'\\' => Some(b'/'),
                b => Some(b),
            }));
            scratch
        } else {
            target
        };
        // 2. The path: past any scheme and authority, up to `?` (and `#`, `;`).
        let mut path = path_of(source, self.whatwg);
        let cut = match (self.cut_fragment, self.cut_semicolon) {
            (false, false) => memchr::memchr(b'?', path),
            (true, false) => memchr::memchr2(b'?', b'#', path),
            (false, true) => memchr::memchr2(b'?', b';', path),
            (true, true) => memchr::memchr3(b'?', b'#', b';', path),
        };
        path = &path[..cut.unwrap_or(path.len())];
        // 3. Percent-decoding.
        out.clear();
        if self.rooted && path.first() != Some(&b'/') {
            out.push(b'/');
        }
        match self.decode {
            Decode::None => out.extend_from_slice(path),
            Decode::Twice => {
                decode_into(path, Decode::All, out);
                scratch.clear();
                decode_into(out, Decode::All, scratch);
                std::mem::swap(out, scratch);
            }
            Decode::Uri | Decode::All => {
                let start = out.len();
                decode_into(path, self.decode, out);
                if self.decode == Decode::All {
                    let decoded = &out[start..];
                    if decoded.iter().any(|&b| b < 0x20 || b == 0x7f)
                        || std::str::from_utf8(decoded).is_err()
                    {
                        f.malformed = true;
                    }
                }
            }
        }
        if self.backslash {
            for b in out.iter_mut() {
                if *b == b'\\' {
                    *b = b'/';
                }
            }
        }
        // 4. Dot segments and empty segments.
        let (merge, escaped_dots) = match self.dots {
            Dots::Keep => return,
            Dots::Merge => return merge_slashes(out),
            Dots::Rfc => (false, self.whatwg),
            Dots::Normpath => (true, false),
        };
        remove_dot_segments(out, scratch, merge, escaped_dots);
        std::mem::swap(out, scratch);
    }
}

/// The readings, the canonical one first (it names the room when it puts the request in
/// one). See the module's table for who reads a target each way.
pub(super) const READINGS: [Reading; 17] = {
    use Decode::{All, None as Raw, Twice, Uri};
    use Dots::{Keep, Merge, Normpath, Rfc};
    let canonical = Reading::new(All, Normpath);
    let whatwg = Reading {
        whatwg: true,
        backslash: true,
        ..Reading::new(Raw, Rfc)
    };
    let backslash = Reading {
        backslash: true,
        ..canonical
    };
    let fragment_kept = Reading {
        cut_fragment: false,
        ..canonical
    };
    let semicolon = Reading {
        cut_semicolon: true,
        ..canonical
    };
    [
        canonical,
        // As written (Express's router), with no `/` added.
        Reading {
            rooted: false,
            ..Reading::new(Raw, Keep)
        },
        Reading::new(All, Keep), // uvicorn's and gunicorn's paths: Starlette's, Flask's routers
        Reading::new(Uri, Keep), // find-my-way (Fastify)
        Reading::new(Uri, Merge), // find-my-way with ignoreDuplicateSlashes
        Reading::new(Raw, Normpath),
        Reading::new(All, Rfc),
        whatwg,
        Reading {
            decode: All,
            ..whatwg
        },
        backslash,
        Reading {
            dots: Keep,
            ..backslash
        },
        fragment_kept, // h11 (uvicorn's default) keeps `#`; StaticFiles resolves `..` after it
        Reading {
            dots: Keep,
            ..fragment_kept
        },
        semicolon,
        Reading {
            decode: Uri,
            dots: Keep,
            ..semicolon
        },
        // A handler decoding again what its router decoded (`/static/%252e%252e/x`).
        Reading::new(Twice, Normpath),
        Reading {
            backslash: true,
            ..Reading::new(Twice, Normpath)
        },
    ]
};

/// The path part of a target: past `scheme://authority` for the absolute form (and, for
/// WHATWG, past a leading `//authority`), else the target itself. The authority ends at the
/// first `/`, `?` or `#`. A `scheme:` without `//` is left alone (no server here takes
/// `http:/p` for `/p`), so the readings that add a leading `/` see `/http:/p`.
fn path_of(target: &[u8], whatwg: bool) -> &[u8] {
    let authority = match scheme_end(target) {
        Some(colon) => match target[colon + 1..].strip_prefix(b"//") {
            Some(authority) => authority,
            None => return target,
        },
        None if whatwg => match target.strip_prefix(b"//") {
            Some(authority) => authority,
            None => return target,
        },
        None => return target,
    };
    let end = authority
        .iter()
        .position(|&b| matches!(b, b'/' | b'?' | b'#'))
        .unwrap_or(authority.len());
    &authority[end..]
}

/// The index of the `:` ending a URI scheme (`ALPHA *( ALPHA / DIGIT / "+" / "-" / "." )`)
/// that starts `target`, if one does.
fn scheme_end(target: &[u8]) -> Option<usize> {
    if !target.first()?.is_ascii_alphabetic() {
        return None;
    }
    let end = target
        .iter()
        .position(|&b| !(b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.')))?;
    (target[end] == b':').then_some(end)
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// The path of `target` decoded, when escapes of bytes 128-255 are all that keep it from
/// being plain (a UTF-8 slug as browsers send one: `/shoes/%E9%9D%B4`): then every reading
/// of it is its path as written or this (no escape makes a `/`, `.`, `%`, `\` or an ASCII
/// letter, and it has no dot or empty segment, `#`, `;` or byte the readings treat apart).
/// `None` for any other target.
pub(super) fn high_escapes_decoded(target: &[u8], f: &Features) -> Option<Vec<u8>> {
    let others = f.backslash || f.hash || f.semicolon || f.not_origin || f.other || f.malformed;
    if !f.percent || others {
        return None;
    }
    let path = target.get(..f.path_len)?;
    let mut i = 0;
    while let Some(p) = memchr::memchr(b'%', &path[i..]) {
        let at = i + p;
        match (
            path.get(at + 1).copied().and_then(hex),
            path.get(at + 2).copied().and_then(hex),
        ) {
            (Some(high), Some(_)) if high >= 8 => i = at + 3,
            _ => return None,
        }
    }
    let mut out = Vec::with_capacity(path.len());
    decode_into(path, Decode::All, &mut out);
    Some(out)
}

/// Appends `path` percent-decoded (as `how` says) to `out`; a `%` that does not start an
/// escape is kept as it is.
fn decode_into(path: &[u8], how: Decode, out: &mut Vec<u8>) {
    out.reserve(path.len());
    let mut i = 0;
    // The bytes between escapes are copied whole.
    while let Some(p) = memchr::memchr(b'%', &path[i..]) {
        let at = i + p;
        out.extend_from_slice(&path[i..at]);
        match (
            path.get(at + 1).copied().and_then(hex),
            path.get(at + 2).copied().and_then(hex),
        ) {
            (Some(h), Some(l)) => {
                let decoded = h << 4 | l;
                if how == Decode::Uri && b"#$&+,/:;=?@%".contains(&decoded) {
                    out.extend_from_slice(&path[at..at + 3]);
                } else {
                    out.push(decoded);
                }
                i = at + 3;
            }
            // Not an escape: the `%` as it is.
            _ => {
                out.push(b'%');
                i = at + 1;
            }
        }
    }
    out.extend_from_slice(&path[i..]);
}

/// Runs of `/` in `path` become one.
fn merge_slashes(path: &mut Vec<u8>) {
    let mut prev_slash = false;
    path.retain(|&b| {
        let keep = !(b == b'/' && prev_slash);
        prev_slash = b == b'/';
        keep
    });
}

/// Whether `seg` is `.` (`dots == 1`) or `..` (`dots == 2`), `%2e` counting as `.` when
/// `escaped_dots`.
fn is_dots(seg: &[u8], dots: usize, escaped_dots: bool) -> bool {
    let mut n = 0;
    let mut i = 0;
    while i < seg.len() {
        if seg[i] == b'.' {
            i += 1;
        } else if escaped_dots && seg.len() >= i + 3 && seg[i..i + 3].eq_ignore_ascii_case(b"%2e") {
            i += 3;
        } else {
            return false;
        }
        n += 1;
    }
    n == dots
}

/// Writes `path` (which starts with `/`) into `out` with its dot segments removed: RFC 3986
/// 5.2.4 (empty segments kept), or with `merge` first merging runs of `/` as
/// `path.normalize` does. A `..` never climbs above the root; a path ending in `/`, `.` or
/// `..` keeps a trailing `/`. One pass, segments written as they come and taken back for
/// `..`.
fn remove_dot_segments(path: &[u8], out: &mut Vec<u8>, merge: bool, escaped_dots: bool) {
    out.clear();
    let body = path.strip_prefix(b"/").unwrap_or(path);
    let mut kept = 0usize;
    let mut trailing = false;
    let mut segments = body.split(|&b| b == b'/').peekable();
    while let Some(seg) = segments.next() {
        let last = segments.peek().is_none();
        if is_dots(seg, 1, escaped_dots) {
            trailing = last;
        } else if is_dots(seg, 2, escaped_dots) {
            if kept > 0 {
                let cut = out.iter().rposition(|&b| b == b'/').unwrap_or(0);
                out.truncate(cut);
                kept -= 1;
            }
            trailing = last;
        } else if seg.is_empty() && merge {
            trailing = last;
        } else {
            out.push(b'/');
            out.extend_from_slice(seg);
            kept += 1;
            trailing = false;
        }
    }
    if out.is_empty() || trailing {
        out.push(b'/');
    }
}

#[cfg(all(test, not(velvet_rope_loom)))]
mod tests {
    use super::*;

    fn read(r: &Reading, target: &str) -> String {
        let (mut scratch, mut out) = (Vec::new(), Vec::new());
        r.read(
            target.as_bytes(),
            &mut scratch,
            &mut out,
            &mut Features::default(),
        );
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn the_canonical_reading() {
        let c = &READINGS[0];
        for (target, want) in [
            ("/", "/"),
            ("", "/"),
            ("/a/b?x=1#y", "/a/b"),
            ("/a/./b/../c", "/a/c"),
            ("/a//b///c", "/a/b/c"),
            ("/static/../vault.html", "/vault.html"),
            ("/static/%2e%2e/vault.html", "/vault.html"),
            ("/static/..%2Fvault.html", "/vault.html"),
            ("/../../x", "/x"),
            ("/a/b/..", "/a/"),
            ("/a/b/.", "/a/b/"),
            ("/a/", "/a/"),
            ("/a/..", "/"),
            ("/%73hop/item", "/shop/item"),
            ("http://x/shop/item?q", "/shop/item"),
            ("http://user@x:8080/shop/item", "/shop/item"),
            ("HTTPS://x", "/"),
            ("http:/shop", "/http:/shop"),
            ("*", "/*"),
            ("shop/item", "/shop/item"),
            ("/a/b#/../../c", "/a/b"),
            ("/a%zz/b", "/a%zz/b"),
        ] {
            assert_eq!(read(c, target), want, "{target:?}");
        }
    }

    #[test]
    fn rfc_keeps_empty_segments_normpath_merges_them() {
        let rfc = Reading::new(Decode::All, Dots::Rfc);
        assert_eq!(read(&rfc, "/a//../b"), "/a/b");
        assert_eq!(read(&READINGS[0], "/a//../b"), "/b");
        assert_eq!(read(&rfc, "/a//b"), "/a//b");
    }

    #[test]
    fn whatwg_reads_backslashes_escaped_dots_and_authorities() {
        let w = &READINGS[7];
        assert_eq!(read(w, "/static/%2e%2E/vault"), "/vault");
        assert_eq!(read(w, "/static\\..\\vault"), "/vault");
        assert_eq!(read(w, "//evil/shop/x"), "/shop/x");
        assert_eq!(read(w, "/\\evil/shop/x"), "/shop/x");
        assert_eq!(read(w, "/sh\top/x"), "/shop/x");
        assert_eq!(read(w, "http://x\\shop/y"), "/shop/y");
    }

    #[test]
    fn uri_decoding_keeps_reserved_escapes() {
        let u = Reading::new(Decode::Uri, Dots::Keep);
        assert_eq!(read(&u, "/%73hop/a%2Fb%3F%25%41"), "/shop/a%2Fb%3F%25A");
    }

    #[test]
    fn classes_by_block_agree_with_bytewise() {
        // Every byte value, at each place of a block and after a `/`, and a `?` ending
        // the path inside a block or at its edge.
        for b in 0..=255u8 {
            for at in 0..40 {
                let mut t = vec![b'a'; 40];
                t[at] = b;
                if at > 0 {
                    t[at - 1] = b'/';
                }
                assert_eq!(
                    classes(&t),
                    classes_bytewise(&t, Classes::default()),
                    "{b} at {at}"
                );
            }
        }
    }

    #[test]
    fn classes_of_any_two_bytes_agree_with_bytewise() {
        // Two bytes of `/ . ? %` at any two places of targets up to three blocks long: the
        // pairs across a block's edge, and those across the edge of a last block that
        // overlaps the one before it (a `/` read before it, a `.` first in it).
        for len in 1..=48 {
            for i in 0..len {
                for j in i..len {
                    for x in *b"/.?%" {
                        for y in *b"/.?%" {
                            let mut t = vec![b'a'; len];
                            t[i] = x;
                            t[j] = y;
                            assert_eq!(
                                classes(&t),
                                classes_bytewise(&t, Classes::default()),
                                "{:?}",
                                String::from_utf8_lossy(&t)
                            );
                        }
                    }
                }
            }
        }
    }

    proptest::proptest! {
        /// Whole targets made of the bytes that matter read alike either way.
        #[test]
        fn classes_agree(target in proptest::collection::vec(
            proptest::sample::select(b"/./?%\\#;a\x00\x7f\x80\xff\t".to_vec()), 0..70)) {
            proptest::prop_assert_eq!(
                classes(&target),
                classes_bytewise(&target, Classes::default())
            );
        }
    }

    /// At the edge of the first 16-byte block: a `/` read in one block and a `.` in the
    /// next, a `?` right after it, bytes past ASCII.
    #[test]
    fn scan_across_a_block_edge() {
        let f = scan(b"/aaaaaaaaaaaaaa/./x");
        assert!(f.other && !f.plain());
        for t in [&b"/aaaaaaaaaaaaaaa?/../"[..], b"/aaaaaaaaaaaaaa/?x"] {
            let f = scan(t);
            assert!(f.plain(), "{t:?}");
            assert_eq!(f.path_len, 16, "{t:?}");
        }
        let f = scan(b"/aaaaaaaaaaaaaa\x80");
        assert!(f.other && f.malformed);
        assert!(scan(b"/%2e%2e/aaaaaaaa/").percent);
    }

    #[test]
    fn scan_finds_what_makes_readings_differ() {
        assert!(scan(b"/shop/item?x=/../%zz#y").plain());
        assert!(scan(b"/.well-known").other);
        assert!(scan(b"/a//b").other);
        assert!(scan(b"/a/..").other);
        assert!(!scan(b"/a.b/c.d").other);
        assert!(scan(b"http://x/").not_origin);
        assert!(scan(b"/a%2").malformed);
        assert!(scan(b"/a%zz").malformed);
        assert!(!scan(b"/a%20").malformed);
        assert!(scan(b"/a\0").malformed);
        assert!(scan(b"/a\xff").malformed);
        assert!(!scan("/caf\u{e9}".as_bytes()).malformed);
    }
}
