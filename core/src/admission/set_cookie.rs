//! The `Set-Cookie` value of a ticket: built without `format!`, never longer than
//! [`crate::MAX_SET_COOKIE_LEN`] (the configuration bounds every part of it).

use crate::admission::room::Room;
use crate::ticket::{Keyring, Ticket};

/// `name=ticket; Max-Age=n; Path=...` for `t`, sealed for `room`.
pub(crate) fn set_cookie(keyring: &Keyring, room: &Room, t: &Ticket, now_secs: u32) -> String {
    let sealed = keyring.seal(&room.id, t);
    let ticket = sealed.as_str();
    let max_age = t.expires.saturating_sub(now_secs);
    let mut out =
        String::with_capacity(room.cookie_name.len() + ticket.len() + room.cookie_attrs.len() + 24);
    out.push_str(&room.cookie_name);
    out.push('=');
    out.push_str(ticket);
    out.push_str("; Max-Age=");
    out.push_str(itoa(max_age).as_str());
    out.push_str(&room.cookie_attrs);
    debug_assert!(out.len() <= crate::MAX_SET_COOKIE_LEN);
    out
}

/// Small integer formatting without `format!`.
fn itoa(mut n: u32) -> ItoaBuf {
    let mut buf = ItoaBuf {
        bytes: [0; 10],
        start: 10,
    };
    loop {
        buf.start -= 1;
        buf.bytes[buf.start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return buf;
        }
    }
}

struct ItoaBuf {
    bytes: [u8; 10],
    start: usize,
}

impl ItoaBuf {
    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[self.start..]).unwrap_or("0")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn itoa_formats() {
        assert_eq!(itoa(0).as_str(), "0");
        assert_eq!(itoa(300).as_str(), "300");
        assert_eq!(itoa(u32::MAX).as_str(), "4294967295");
    }
}
