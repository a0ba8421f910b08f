"""Which room decides a request: shared by the ASGI, WSGI and FastAPI front doors."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ._velvet_rope import Engine, Router
from .errors import ConfigError, UnknownRoomError

__all__ = ["ROUTES", "RoomRouter", "escaped", "status_line"]

#: What `RoomRouter.room_for` answers when the configuration's routes choose the room.
ROUTES = "\x00routes"


class RoomRouter:
    """Maps a request path to the room that decides it: the room of the longest prefix in
    `rooms` that the path starts with, else `room` (the default; `None`: such paths pass
    untouched). Paths under a `bypass` prefix never decide. Room names are checked against
    the engine at once, so a typo fails at start-up, not on the first request.

    The decision is the core's (`velvet_rope._velvet_rope.Router`): the path is read the ways
    the servers and frameworks in front of the application may read it (percent-escapes,
    `..` and `//`, the absolute form, `case_sensitive`), and a request is decided if any of
    those readings puts it in a room; only a path every reading puts under a bypass prefix
    passes. See the package README, "Which requests a room decides"."""

    def __init__(
        self,
        engine: Engine,
        room: str | None = None,
        rooms: Mapping[str, str] | None = None,
        bypass: Iterable[str] = (),
        case_sensitive: bool = True,
    ) -> None:
        known = set(engine.rooms)
        pairs = list((rooms or {}).items())
        for name in [room, *(r for _, r in pairs)]:
            if name is not None and name not in known:
                raise UnknownRoomError(
                    f"no room named `{name}` in the configuration (its rooms: "
                    f"{', '.join(sorted(known)) or 'none'})"
                )
        self._router = Router(pairs, room, list(bypass), case_sensitive)
        #: The room of every path, when one room decides them all (no prefixes, no bypass):
        #: what `room_for` answers whatever the path, read by the middleware without a call.
        self.every = room if self._router.every_path else None

    @classmethod
    def for_middleware(
        cls,
        engine: Engine,
        room: str | None,
        rooms: Mapping[str, str] | None,
        bypass: Iterable[str],
        case_sensitive: bool,
    ) -> RoomRouter:
        """The middleware's router: its own prefixes when `room` or `rooms` is given, else
        the configuration's `routes` (`room_for` then answers `ROUTES` for a path it does
        not bypass, and the core picks the room). Raises `ConfigError` when neither is
        there: the middleware would decide nothing."""
        if room is not None or rooms is not None:
            return cls(engine, room, rooms, bypass, case_sensitive)
        if not engine.has_routes:
            raise ConfigError(
                "give the middleware `room=` or `rooms=`, or give rooms `routes` in the "
                "configuration: as it is, no request would be decided"
            )
        router = cls.__new__(cls)
        router._router = Router([], ROUTES, list(bypass), case_sensitive)
        router.every = ROUTES if router._router.every_path else None
        return router

    def room_for(self, path: str | bytes) -> str | None:
        """The room deciding the request with `path` (or its whole request-target), or `None`
        when the request passes untouched."""
        if self.every is not None:
            return self.every
        return self._router.route(path)


def status_line(status: int) -> str:
    """`"200 OK"` for 200, as WSGI wants it."""
    from http import HTTPStatus

    try:
        return f"{status} {HTTPStatus(status).phrase}"
    except ValueError:
        return f"{status} Unknown"


def escaped(path: bytes) -> bytes:
    """A decoded path as a request-target's path: `%`, `?` and `#` escaped again, so that
    the core reads it as the application does (a `?` from `%3F` starts no query, a `%25`
    decoded once is not decoded as an escape twice)."""
    if b"%" in path or b"?" in path or b"#" in path:
        return path.replace(b"%", b"%25").replace(b"?", b"%3F").replace(b"#", b"%23")
    return path
