"""Which room decides a request: shared by the ASGI, WSGI and FastAPI front doors."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ._velvet_rope import Engine
from .errors import UnknownRoomError

__all__ = ["RoomRouter", "status_line"]


class RoomRouter:
    """Maps a request path to the room that decides it: the room of the longest prefix in
    `rooms` that the path starts with, else `room` (the default; `None`: such paths pass
    untouched). Paths starting with a `bypass` prefix never decide. Room names are checked
    against the engine at once, so a typo fails at start-up, not on the first request."""

    def __init__(
        self,
        engine: Engine,
        room: str | None = None,
        rooms: Mapping[str, str] | None = None,
        bypass: Iterable[str] = (),
    ) -> None:
        known = set(engine.rooms)
        self._prefixes = sorted((rooms or {}).items(), key=lambda kv: len(kv[0]), reverse=True)
        self._default = room
        self._bypass = tuple(bypass)
        for name in [room, *(r for _, r in self._prefixes)]:
            if name is not None and name not in known:
                raise UnknownRoomError(
                    f"no room named `{name}` in the configuration (its rooms: "
                    f"{', '.join(sorted(known)) or 'none'})"
                )
        if room is None and not self._prefixes:
            raise ValueError("give `room` (every path) or `rooms` (path prefix -> room)")

    def room_for(self, path: str) -> str | None:
        """The room deciding `path`, or `None` when the request passes untouched."""
        if self._bypass and path.startswith(self._bypass):
            return None
        for prefix, name in self._prefixes:
            if path.startswith(prefix):
                return name
        return self._default


def status_line(status: int) -> str:
    """`"200 OK"` for 200, as WSGI wants it."""
    from http import HTTPStatus

    try:
        return f"{status} {HTTPStatus(status).phrase}"
    except ValueError:
        return f"{status} Unknown"
