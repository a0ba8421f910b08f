"""The waiting room as WSGI middleware (Flask, Django, any WSGI app).

```python
from velvet_rope import Engine
from velvet_rope.wsgi import WaitingRoom

engine = Engine(pathlib.Path("velvet-rope.toml"), shared_memory="/run/velvet-rope.state")
app.wsgi_app = WaitingRoom(app.wsgi_app, engine, room="shop")      # Flask
```

Each request under a room is decided before the app sees it, as in `velvet_rope.asgi`, and the
app's `Velvet-Rope-Command` response headers are carried out and removed as there. The
engine is ticked once a second by a daemon thread, started with the middleware (and again in
each worker a pre-fork server forks from a preloaded app), stopped by `close()` or at exit.
With several worker processes, give the engine `shared_memory=` so that they share exact
counts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import unquote_to_bytes

from ._commands import KEY, LOG, asks_revoke, record, revoke, split_wsgi
from ._once import KEY as DECIDED
from ._once import decided_before, mark_decided, routes_decided_before
from ._routing import ROUTES, RoomRouter, escaped, status_line
from ._ticker import ThreadTicker
from ._velvet_rope import Decision, Engine
from .asgi import ticket_headers

__all__ = ["WaitingRoom"]

StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


def _path_bytes(environ: dict[str, Any]) -> bytes:
    """`PATH_INFO` as the router reads it: the path's bytes, which PEP 3333 hands over one per
    character; a server that put other characters in it (not PEP 3333's) is read as UTF-8,
    never with a character replaced (a replacement `?` would cut the path short)."""
    return _bytes_of(environ.get("PATH_INFO", "") or "/")


#: Header names as WSGI applications usually spell them.
_CASED = {b"set-cookie": "Set-Cookie", b"velvet-rope-ticket": "Velvet-Rope-Ticket"}


def _target(environ: dict[str, Any]) -> bytes | str:
    """The request-target as the core reads it: the path as received when the server says
    (`RAW_URI` or `REQUEST_URI`: gunicorn, uWSGI) and it reads as `SCRIPT_NAME` +
    `PATH_INFO`, else those two and the query string. A middleware ahead that rewrote
    `PATH_INFO` (a locale prefix taken off) is read as the application reads it: the routes
    and the room's rules decide on the path the room was chosen by."""
    path = _bytes_of(environ.get("SCRIPT_NAME", "")) + _path_bytes(environ)
    raw: str | None = environ.get("RAW_URI") or environ.get("REQUEST_URI")
    if raw:
        # PEP 3333's strings carry bytes one per character: the target's own bytes.
        target = _bytes_of(raw)
        as_sent = target.split(b"?", 1)[0]
        if as_sent == path or (b"%" in as_sent and unquote_to_bytes(as_sent) == path):
            return target
    path = escaped(path)
    query: str | None = environ.get("QUERY_STRING")
    if not query:
        return path
    # (A `#` the server left in the query string is part of it to the application.)
    return path + b"?" + _bytes_of(query).replace(b"#", b"%23")


def _bytes_of(text: str) -> bytes:
    """A WSGI string's bytes (PEP 3333: one per character), or its UTF-8 from a server that
    put other characters in it."""
    try:
        return text.encode("latin-1")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape")


def _request_headers(environ: dict[str, Any]) -> list[tuple[str, str]]:
    """The request's headers from a WSGI environ (`HTTP_X_Y` is `x-y`; `CONTENT_TYPE` and
    `CONTENT_LENGTH` too)."""
    headers = [
        (key[5:].replace("_", "-").lower(), value)
        for key, value in environ.items()
        if key.startswith("HTTP_")
    ]
    for key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
        if key in environ:
            headers.append((key.replace("_", "-").lower(), environ[key]))
    return headers


def _strip_commands(
    environ: dict[str, Any], headers: list[tuple[str, str]]
) -> list[tuple[str, str]]:
    """`headers` without their `Velvet-Rope-Command` lines (left in the environ for the front
    doors around this one)."""
    try:
        for name, _ in headers:
            if len(name) == 19 and name.lower() == "velvet-rope-command":
                break
        else:
            return headers
        split = split_wsgi(headers)
        if split is None:
            return headers
        record(environ, split[1])
        return split[0]
    except Exception:
        LOG.exception("velvet-rope: cannot read the response's headers for origin commands")
        return headers


def _stripping(environ: dict[str, Any], start_response: StartResponse) -> StartResponse:
    """`start_response` that removes `Velvet-Rope-Command` headers (for a request no room
    admitted: the command does nothing, but never reaches the client)."""

    def start_stripped(status: str, headers: list[tuple[str, str]], *exc: Any) -> Any:
        return start_response(status, _strip_commands(environ, headers), *exc)

    return start_stripped


def _admitted_headers(
    engine: Engine,
    environ: dict[str, Any],
    headers: list[tuple[str, str]],
    room: str,
    decision: Decision,
    extra: list[tuple[str, str]],
) -> list[tuple[str, str]]:
    """The response headers of a request `room` admitted: `extra` (its ticket headers) added,
    and the origin's commands carried out and removed (a revoked session's response clears the
    ticket cookie instead of setting it). Never raises."""
    try:
        inner = environ.get(KEY)  # removed by a front door inside this one
        if inner is None:
            # What every admitted response pays: a look at each header's name's length.
            for name, _ in headers:
                if len(name) == 19 and name.lower() == "velvet-rope-command":
                    break
            else:
                return [*headers, *extra] if extra else headers
        split = split_wsgi(headers)
        kept, values = split if split is not None else (list(headers), [])
        if values:
            record(environ, values)
        if asks_revoke([*values, *(inner or ())]) and revoke(
            engine,
            room,
            decision,
            environ.get("HTTP_COOKIE"),
            environ.get("HTTP_VELVET_ROPE_TICKET"),
        ):
            return [*kept, ("Set-Cookie", engine.clear_cookie(room))]
        return [*kept, *extra]
    except Exception:
        LOG.exception("velvet-rope: room %r: cannot carry out the origin's commands", room)
        return _strip_commands(environ, headers)


def _decided_on(environ: dict[str, Any]) -> tuple[Any, Any, Any]:
    """What a WSGI request was decided on, for `decided_before`: its script name, path and
    query."""
    return environ.get("SCRIPT_NAME"), environ.get("PATH_INFO"), environ.get("QUERY_STRING")


class WaitingRoom:
    """WSGI middleware putting a velvet-rope room in front of `app` (arguments as in
    `velvet_rope.asgi.WaitingRoom`)."""

    def __init__(
        self,
        app: WSGIApp,
        engine: Engine,
        *,
        room: str | None = None,
        rooms: Mapping[str, str] | None = None,
        bypass: Iterable[str] = (),
        case_sensitive: bool = True,
        tick: bool = True,
    ) -> None:
        self.app = app
        self.engine = engine
        self.router = RoomRouter.for_middleware(engine, room, rooms, bypass, case_sensitive)
        self.ticker = ThreadTicker(engine) if tick else None
        if self.ticker is not None:
            self.ticker.start()
        #: The engine's shared steady decision (see `Engine.steady_admit`).
        self.steady = engine.steady_admit

    def _decided(self, environ: dict[str, Any], room: str) -> bool:
        """Whether `room` (`ROUTES`: the configuration's routes, or the room they put the
        request in) decided this request already (see `_once`)."""
        target = _decided_on(environ)
        if room != ROUTES:
            return decided_before(environ, self.engine, room, target) is not None
        return routes_decided_before(
            environ,
            self.engine,
            target,
            lambda: self.engine.room_for_request(
                environ.get("REQUEST_METHOD", "GET"),
                _target(environ),
                _request_headers(environ),
                peer=environ.get("REMOTE_ADDR") or None,
            ),
        )

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        router = self.router
        room = router.every if router.every is not None else router.room_for(_path_bytes(environ))
        if room is None or (DECIDED in environ and self._decided(environ, room)):
            # Responses are looked at for origin commands only when a room accepts them.
            commands = self.engine.accepts_origin_commands
            return self.app(
                environ, _stripping(environ, start_response) if commands else start_response
            )
        # No rules, no header tickets: the `Cookie` header is all the room reads (one call).
        decision = None if room == ROUTES else self.engine.admit_plain(
            room, environ.get("HTTP_COOKIE")
        )
        # Admitted with nothing to add, and no room looks at responses: on to the app as is.
        if decision is self.steady:
            return self.app(environ, start_response)
        commands = self.engine.accepts_origin_commands
        if decision is None:
            placed = self.engine.decide_request(
                environ.get("REQUEST_METHOD", "GET"),
                _target(environ),
                _request_headers(environ),
                peer=environ.get("REMOTE_ADDR") or None,
                room=None if room == ROUTES else room,
            )
            if placed is not None:
                target = _decided_on(environ)
                if room == ROUTES:
                    mark_decided(environ, self.engine, placed[1], target, None, placed[0])
                else:
                    mark_decided(environ, self.engine, placed[1], target, placed[0])
            if placed is None or placed[1].bypassed:
                return self.app(
                    environ, _stripping(environ, start_response) if commands else start_response
                )
            room, decision = placed
        elif decision.admitted:
            mark_decided(environ, self.engine, decision, _decided_on(environ), room)
        if decision.admitted:
            if not commands and decision.set_cookie is None:
                return self.app(environ, start_response)
            extra = [
                (_CASED[k], v.decode("latin-1")) for k, v in ticket_headers(decision)
            ]
            engine = self.engine

            def start_admitted(status: str, headers: list[tuple[str, str]], *exc: Any) -> Any:
                if commands:
                    headers = _admitted_headers(engine, environ, headers, room, decision, extra)
                else:
                    headers = [*headers, *extra]
                return start_response(status, headers, *exc)

            return self.app(environ, start_admitted)
        page = self.engine.render_page(
            room,
            decision,
            environ.get("HTTP_ACCEPT"),
            environ.get("HTTP_ACCEPT_LANGUAGE"),
            ticket=environ.get("HTTP_VELVET_ROPE_TICKET"),
        )
        if page is None:  # admit decisions have no page; cannot happen here
            return self.app(environ, _stripping(environ, start_response))
        body = page.body.encode()
        start_response(
            status_line(page.status), [*page.headers, ("Content-Length", str(len(body)))]
        )
        return [body]

    def close(self) -> None:
        """Stops the ticker thread."""
        if self.ticker is not None:
            self.ticker.stop()
