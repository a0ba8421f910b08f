"""Origin commands, shared by the ASGI, WSGI and FastAPI front doors.

An application ends a visitor's session by answering with the response header
`Velvet-Rope-Command: revoke` (in a room whose `enabled_origin_commands` include `"revoke"`).
The middleware always removes that header from the response the client gets; for a request a
room decided and admitted, a `revoke` among its commands revokes the visitor's ticket
(`Engine.revoke_request`: the ticket the request's decision issued, else the one it brought)
and, when the session ended, the response clears the ticket cookie instead of setting it.
A command among an ASGI response's trailers is removed and followed the same way, but comes
after the headers: the ticket is revoked, and the cookie stays with the client (refused).
Refusals are logged (logger `velvet_rope`, WARNING); nothing here raises into the server.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, MutableMapping
from typing import Any

from ._velvet_rope import Decision, Engine, is_revoke_command

__all__ = [
    "KEY",
    "LOG",
    "TRAILERS_KEY",
    "asks_revoke",
    "has_command",
    "is_command_name",
    "record",
    "revoke",
    "split_asgi",
    "split_wsgi",
]

#: The package's logger.
LOG = logging.getLogger("velvet_rope")

#: The header's name as ASGI servers and applications spell it (lower case).
_NAME = b"velvet-rope-command"
_NAME_STR = "velvet-rope-command"
_LEN = len(_NAME)


def is_command_name(name: Any) -> bool:
    """Whether a header name is `Velvet-Rope-Command` (any case): bytes as ASGI says, and
    str or bytearray as apps give them too (h11 sends str names)."""
    if len(name) != _LEN:
        return False
    low = name.lower()
    return bool(low == _NAME or low == _NAME_STR)

#: The scope (ASGI) or environ (WSGI) key under which a front door that removed commands from
#: a response leaves them for the front doors around it (a room deciding the same request).
KEY = "velvet_rope.commands"

#: The same for commands removed from a response's trailers (ASGI's `http.response.trailers`),
#: apart: the front doors around act on them when the trailers pass, not with the headers.
TRAILERS_KEY = "velvet_rope.trailer_commands"

#: Outcomes that ended the session.
_ENDED = frozenset({"revoked", "already_revoked"})


def has_command(headers: Iterable[Any]) -> bool:
    """Whether ASGI `headers` (pairs of bytes, re-iterable) have a `Velvet-Rope-Command`
    line (any case). Allocates nothing: what every response pays."""
    for name, _ in headers:
        if len(name) == _LEN and is_command_name(name):
            return True
    return False


def _as_bytes(value: Any) -> bytes:
    """A header value as bytes (an app may give a str)."""
    return value.encode("latin-1", "replace") if isinstance(value, str) else bytes(value)


def split_asgi(headers: Iterable[Any]) -> tuple[list[Any], list[bytes]] | None:
    """`headers` (ASGI pairs of bytes) without their `Velvet-Rope-Command` lines (any case),
    and those lines' values; `None` (nothing to change) when there are none."""
    found: list[bytes] | None = None
    kept: list[Any] = []
    for pair in headers:
        name = pair[0]
        if is_command_name(name):
            if found is None:
                found = []
            found.append(_as_bytes(pair[1]))
        else:
            kept.append(pair)
    return None if found is None else (kept, found)


def split_wsgi(headers: Iterable[tuple[str, str]]) -> tuple[list[tuple[str, str]], list[str]] | None:
    """The same for WSGI's `(str, str)` pairs."""
    found: list[str] | None = None
    kept: list[tuple[str, str]] = []
    for name, value in headers:
        if len(name) == _LEN and name.lower() == _NAME_STR:
            if found is None:
                found = []
            found.append(value)
        else:
            kept.append((name, value))
    return None if found is None else (kept, found)


def record(
    holder: MutableMapping[str, Any], values: Iterable[str | bytes], key: str = KEY
) -> None:
    """Leaves removed commands in the scope (or environ) for the front doors around this one
    (under `TRAILERS_KEY` for a response's trailers)."""
    try:
        holder.setdefault(key, []).extend(values)
    except Exception:  # a read-only mapping: the outer front doors will not see them
        pass


def asks_revoke(values: Iterable[str | bytes]) -> bool:
    """Whether any of the commands' values asks for a revocation."""
    return any(is_revoke_command(v) for v in values)


def revoke(
    engine: Engine,
    room: str,
    decision: Decision,
    cookie: str | bytes | None,
    ticket_header: str | bytes | None,
) -> bool:
    """Revokes the session of an admitted request's visitor (the origin asked); whether it
    ended (now or before). Logs what it could not do; never raises."""
    try:
        outcome = engine.revoke_request(room, cookie, ticket_header, decision.ticket)
    except Exception:
        LOG.exception("velvet-rope: room %r: the origin's revoke command failed", room)
        return False
    if outcome in _ENDED:
        LOG.debug("velvet-rope: room %r: session %s by the origin", room, outcome)
        return True
    if outcome.startswith("refused"):
        LOG.warning(
            "velvet-rope: room %r: the origin's revoke command was refused (%s): the session "
            "goes on until it ends by itself",
            room,
            outcome,
        )
    elif outcome == "not_enabled":
        LOG.info(
            "velvet-rope: room %r: the origin sent `Velvet-Rope-Command: revoke`, which the "
            "room does not accept (enabled_origin_commands): removed, nothing revoked",
            room,
        )
    else:
        LOG.debug("velvet-rope: room %r: revoke command: %s", room, outcome)
    return False
