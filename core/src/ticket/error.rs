//! Why an incoming ticket was refused.

/// Why an incoming ticket was refused. Every way has its own code (for metrics and logs); a
/// refused ticket is treated as no ticket at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum TicketError {
    /// Not base64url, wrong length, or an unknown format version.
    BadEncoding = 0,
    /// Sealed with a key id the configuration does not have.
    UnknownKey = 1,
    /// Authentication failed: the ticket was altered or forged.
    BadTag = 2,
    /// Issued by another room.
    WrongRoom = 3,
    /// Past its expiry.
    Expired = 4,
    /// Stamped further in the future than the tolerated clock skew.
    FromFuture = 5,
    /// Its session was ended by the origin (`Velvet-Rope-Command: revoke`).
    Revoked = 6,
}

impl TicketError {
    /// Every reason, in code order.
    pub const ALL: [TicketError; 7] = [
        TicketError::BadEncoding,
        TicketError::UnknownKey,
        TicketError::BadTag,
        TicketError::WrongRoom,
        TicketError::Expired,
        TicketError::FromFuture,
        TicketError::Revoked,
    ];

    /// A stable snake_case name, for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            TicketError::BadEncoding => "bad_encoding",
            TicketError::UnknownKey => "unknown_key",
            TicketError::BadTag => "bad_tag",
            TicketError::WrongRoom => "wrong_room",
            TicketError::Expired => "expired",
            TicketError::FromFuture => "from_future",
            TicketError::Revoked => "revoked",
        }
    }
}

impl std::fmt::Display for TicketError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::error::Error for TicketError {}
