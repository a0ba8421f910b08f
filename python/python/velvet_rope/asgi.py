"""The waiting room as ASGI middleware (Starlette, FastAPI, any ASGI app).

```python
from velvet_rope import Engine
from velvet_rope.asgi import WaitingRoom

engine = Engine(pathlib.Path("velvet-rope.toml"), shared_memory="/run/velvet-rope.state")
app = WaitingRoom(app, engine, room="shop", bypass=["/health", "/static/"])
```

Without `room` or `rooms`, the configuration's `routes` say which room decides a request
(by host and path, see the package README); with them, the middleware's own path prefixes do.
Either way the room's `[[rooms.rules]]` are applied (bypass, queue, reject, count only) and
its ticket is read from the `Cookie` headers (or, in a room with `ticket_header = true`, the
`Velvet-Rope-Ticket` header). The client's address is the connection's peer, or behind one of
`settings.trusted_proxies` the address `X-Forwarded-For` gives.

Each HTTP request under a room is decided before the app sees it: admitted requests reach the
app (with the ticket's `Set-Cookie` added to its response when the ticket changed); the others
get the room's waiting page (HTML, or JSON when the client asks for it) with its status code,
`Refresh` or `Retry-After`, `Cache-Control: no-store` and the ticket. The engine is ticked once
a second from a task on the event loop, started with the application (lifespan startup, or the
first request) and stopped at lifespan shutdown.

Origin commands: the app ends a visitor's session by answering with the header
`Velvet-Rope-Command: revoke` (in a room with `enabled_origin_commands = ["revoke"]`). The
header never reaches the client (it is removed from every response, decided or not); for an
admitted request, the visitor's ticket is revoked (its seat freed at once, the ticket refused
from then on) and the response clears the ticket cookie instead of setting it. The command may
come among the response's trailers too (the `http.response.trailers` extension): it is removed
from them and the ticket revoked all the same, but the headers are gone by then, so the cookie
is not cleared (the client keeps a ticket that is refused: its next request arrives anew).
Refusals are logged to the `velvet_rope` logger.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from typing import Any
from urllib.parse import unquote_to_bytes

from ._commands import (
    KEY,
    LOG,
    TRAILERS_KEY,
    asks_revoke,
    has_command,
    is_command_name,
    record,
    revoke,
    split_asgi,
)
from ._once import KEY as DECIDED
from ._once import decided_before, mark_decided, routes_decided_before, scope_target
from ._routing import ROUTES, RoomRouter, escaped
from ._ticker import LoopTicker
from ._velvet_rope import Decision, Engine

__all__ = [
    "TRAILERS",
    "WaitingRoom",
    "admitted_start",
    "admitted_trailers",
    "cookie_of",
    "header_of",
    "headers_of",
    "peer_of",
    "stripping",
    "target_of",
    "ticket_headers",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

#: The type of the messages carrying a response's trailers (ASGI's `http.response.trailers`
#: extension): their headers are looked at for commands as a response start's are.
TRAILERS = "http.response.trailers"

#: The messages whose headers reach the client, besides an HTTP response's start and trailers:
#: a WebSocket handshake's acceptance and its denial response (the `websocket.http.response`
#: extension). No room decides a WebSocket, so a command there is only removed.
_WEBSOCKET_HEADERS = ("websocket.accept", "websocket.http.response.start")


def _as_bytes(value: Any) -> bytes:
    """A header's name or value as bytes (ASGI's are; `str` is taken as UTF-8, as the engine's
    calls take it)."""
    return value.encode() if isinstance(value, str) else bytes(value)


def cookie_of(scope: Scope) -> bytes | None:
    """The request's `Cookie` header (several joined with `; `, as HTTP/2 may split them),
    its lines found as `Engine.admit_plain_headers` finds them (the name in any case)."""
    cookies = [
        _as_bytes(value)
        for name, value in scope.get("headers", ())
        if _as_bytes(name).lower() == b"cookie"
    ]
    if len(cookies) == 1:
        return cookies[0]
    return b"; ".join(cookies) if cookies else None


def headers_of(scope: Scope) -> list[Any] | tuple[Any, ...]:
    """The request's headers as a list or tuple (ASGI's are a list): any other iterable is
    made a list, kept in the scope, so that a room's first call and the whole-request call
    after it read the same headers."""
    headers = scope.get("headers", ())
    if isinstance(headers, (list, tuple)):
        return headers
    listed = list(headers)
    scope["headers"] = listed
    return listed


def header_of(scope: Scope, name: bytes) -> bytes | None:
    """The request's first `name` header (`name` in lower case; the request's in any case,
    as the engine reads headers), if any: for the waiting page and revocations only, so the
    scan stays off the admitted path."""
    for key, value in scope.get("headers", ()):
        if _as_bytes(key).lower() == name:
            return _as_bytes(value)
    return None


def target_of(scope: Scope) -> bytes:
    """The request-target as the core reads it: the path the application routes (`path`,
    which chose the room), as received (`raw_path`) when that reads as it, and the query
    string. A middleware ahead that rewrote `path` (a locale prefix taken off) and left
    `raw_path` as the client sent it is read as the application reads it: the routes and
    the room's rules decide on the path the room was chosen by."""
    path: bytes = scope.get("path", "/").encode("utf-8", "surrogateescape")
    raw = scope.get("raw_path")
    if raw:
        if raw == path:
            return _with_query(raw, scope)
        # A server behind a proxy that strips a prefix (`root_path`) may put the prefix in
        # `path` and not in `raw_path`.
        root: bytes = scope.get("root_path", "").encode("utf-8", "surrogateescape")
        routed = path[len(root) :] if root and path.startswith(root) else path
        sent = unquote_to_bytes(raw) if b"%" in raw else raw
        if sent == path or sent == routed:
            return _with_query(raw, scope)
    return _with_query(escaped(path), scope)


def _with_query(path: bytes, scope: Scope) -> bytes:
    """`path` and the scope's query string, as a request-target. A `#` in the query string
    (h11 keeps what follows one) is escaped: the application reads it as part of the query,
    and so must the rules (a `#` there would end the query the core reads)."""
    query: bytes = scope.get("query_string", b"")
    if not query:
        return path
    return path + b"?" + (query.replace(b"#", b"%23") if b"#" in query else query)


def peer_of(scope: Scope) -> str | None:
    """The address the connection came from, if the server says."""
    client = scope.get("client")
    return client[0] if client else None


def ticket_headers(decision: Any) -> list[tuple[bytes, bytes]]:
    """The response headers that carry a new ticket: `Set-Cookie`, and in a room taking
    header tickets `Velvet-Rope-Ticket`."""
    set_cookie = decision.set_cookie
    if set_cookie is None:
        return []
    out = [(b"set-cookie", set_cookie.encode("latin-1"))]
    if decision.ticket_header:
        out.append((b"velvet-rope-ticket", decision.ticket.encode("latin-1")))
    return out


def _headers_of(message: Message) -> list[Any] | tuple[Any, ...]:
    """A response start's (or trailers') headers, as a list or tuple (read more than once here); one given
    as another iterable is replaced by a list of it in `message`."""
    headers = message.get("headers") or ()
    if not isinstance(headers, (list, tuple)):
        headers = list(headers)
        message["headers"] = headers
    return headers


def _strip_commands(scope: Scope, message: Message) -> Message:
    """A response start (or trailers) without its `Velvet-Rope-Command` headers (left in the
    scope for the front doors around this one). Never raises."""
    try:
        headers = _headers_of(message)
        if not has_command(headers):
            return message
        split = split_asgi(headers)
        assert split is not None
        record(scope, split[1], TRAILERS_KEY if message["type"] == TRAILERS else KEY)
        message = dict(message)
        message["headers"] = split[0]
    except Exception:
        LOG.exception("velvet-rope: cannot read the response's headers for origin commands")
        # Fail closed: whatever else went wrong, the command does not go out.
        try:
            message = dict(message)
            message["headers"] = [
                pair for pair in message.get("headers") or ()
                if not is_command_name(pair[0])
            ]
        except Exception:
            LOG.exception("velvet-rope: cannot remove the origin's commands from the response")
    return message


def stripping(scope: Scope, send: Send) -> Send:
    """`send` that removes `Velvet-Rope-Command` headers from the response, and from its
    trailers (for a request no room admitted: the command does nothing, but never reaches the
    client)."""

    # A plain function returning `send`'s awaitable: no coroutine of its own per message.
    def send_stripped(message: Message) -> Awaitable[None]:
        kind = message["type"]
        if kind == "http.response.start" or kind == TRAILERS or kind in _WEBSOCKET_HEADERS:
            message = _strip_commands(scope, message)
        return send(message)

    return send_stripped


def _adding(send: Send, extra: list[tuple[bytes, bytes]]) -> Send:
    """`send` that adds `extra` to the response's headers (an admitted request's ticket, in
    an engine none of whose rooms accepts origin commands)."""

    def send_with_ticket(message: Message) -> Awaitable[None]:
        if message["type"] == "http.response.start":
            message = dict(message)
            message["headers"] = [*message.get("headers", ()), *extra]
        return send(message)

    return send_with_ticket


def admitted_start(
    engine: Engine,
    scope: Scope,
    message: Message,
    room: str,
    decision: Decision,
    extra: list[tuple[bytes, bytes]],
) -> Message:
    """The response start of a request `room` admitted: `extra` (its ticket headers) added,
    and the origin's commands carried out and removed. A revoked session's response clears
    the ticket cookie instead of setting it. Never raises."""
    try:
        headers = message.get("headers", ())
        # What every admitted response pays: a look at each header's name's length.
        if headers.__class__ is list and KEY not in scope:
            for name, _ in headers:
                if len(name) == 19 and is_command_name(name):
                    break
            else:
                if not extra:
                    return message
                message = dict(message)
                message["headers"] = headers + extra
                return message
        return _carry_out(engine, scope, message, room, decision, extra)
    except Exception:
        LOG.exception("velvet-rope: room %r: cannot carry out the origin's commands", room)
        return _strip_commands(scope, message)


def _carry_out(
    engine: Engine,
    scope: Scope,
    message: Message,
    room: str,
    decision: Decision,
    extra: list[tuple[bytes, bytes]],
) -> Message:
    """`admitted_start` for a response with commands (its own, or an inner front door's)."""
    headers = _headers_of(message)
    inner = scope.get(KEY)  # removed by a front door inside this one
    split = split_asgi(headers)
    kept, values = split if split is not None else (list(headers), [])
    if values:
        record(scope, values)
    if asks_revoke([*values, *(inner or ())]) and revoke(
        engine, room, decision, cookie_of(scope), header_of(scope, b"velvet-rope-ticket")
    ):
        out = [*kept, (b"set-cookie", engine.clear_cookie(room).encode("latin-1"))]
    else:
        out = [*kept, *extra]
    message = dict(message)
    message["headers"] = out
    return message


def admitted_trailers(
    engine: Engine, scope: Scope, message: Message, room: str, decision: Decision
) -> Message:
    """The trailers (`http.response.trailers`) of a response `room` admitted, its origin's
    commands carried out and removed. They come after the response's headers: a revoked
    session's ticket is refused from then on, but its cookie can no longer be cleared.
    Never raises."""
    try:
        headers = _headers_of(message)
        if TRAILERS_KEY not in scope and not has_command(headers):
            return message
        split = split_asgi(headers)
        if split is not None:
            record(scope, split[1], TRAILERS_KEY)
            message = dict(message)
            message["headers"] = split[0]
        # This front door's commands and those an inner one removed (recorded alike).
        if asks_revoke(scope.get(TRAILERS_KEY) or ()):
            ticket = header_of(scope, b"velvet-rope-ticket")
            revoke(engine, room, decision, cookie_of(scope), ticket)
        return message
    except Exception:
        LOG.exception("velvet-rope: room %r: cannot carry out the origin's trailer commands", room)
        return _strip_commands(scope, message)


class WaitingRoom:
    """ASGI middleware putting a velvet-rope room in front of `app`.

    Without `room` and `rooms`, the configuration's `routes` choose the room of each request
    (the configuration must have some). `room`: the room deciding every path; `rooms`: path
    prefix -> room (longest prefix wins); `bypass`: path prefixes that are never decided
    (health checks, static files; the rooms' `rules` can say the same in the configuration);
    `case_sensitive`: whether the application routes `/Shop` apart from `/shop` (Starlette
    and FastAPI do); `tick`: drive `engine.tick()` from the event loop (turn it off if
    something else ticks the engine). The room is chosen on the normalised path (see
    `velvet_rope._routing.RoomRouter`).
    """

    def __init__(
        self,
        app: ASGIApp,
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
        self.ticker = LoopTicker(engine) if tick else None
        #: The engine's shared steady decision (see `Engine.steady_admit`).
        self.steady = engine.steady_admit

    def _decided(self, scope: Scope, room: str) -> bool:
        """Whether `room` (`ROUTES`: the configuration's routes, or the room they put the
        request in) decided this request already (see `_once`)."""
        target = scope_target(scope)
        if room != ROUTES:
            return decided_before(scope, self.engine, room, target) is not None
        return routes_decided_before(
            scope,
            self.engine,
            target,
            lambda: self.engine.room_for_request(
                scope["method"], target_of(scope), headers_of(scope), peer=peer_of(scope)
            ),
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await self._lifespan(scope, receive, send)
            return
        ticker = self.ticker
        if ticker is not None and not ticker.live:
            ticker.ensure_started()
        if kind != "http":
            strip = kind == "websocket" and self.engine.accepts_origin_commands
            await self.app(scope, receive, stripping(scope, send) if strip else send)
            return
        router = self.router
        room = router.every if router.every is not None else router.room_for(scope["path"])
        if room is None or (DECIDED in scope and self._decided(scope, room)):
            # Responses are looked at for origin commands only when a room accepts them.
            commands = self.engine.accepts_origin_commands
            await self.app(scope, receive, stripping(scope, send) if commands else send)
            return
        # No rules, no header tickets: the `Cookie` lines are all the room reads (one call,
        # which finds them among the headers).
        headers = scope.get("headers", ())
        if type(headers) is not list:  # (ASGI servers give a list: no call for it)
            headers = headers_of(scope)
        decision = None if room == ROUTES else self.engine.admit_plain_headers(room, headers)
        # Admitted with nothing to add, and no room looks at responses: on to the app as is.
        if decision is self.steady:
            await self.app(scope, receive, send)
            return
        commands = self.engine.accepts_origin_commands
        if decision is None:
            placed = self.engine.decide_request(
                scope["method"],
                target_of(scope),
                headers,
                peer=peer_of(scope),
                room=None if room == ROUTES else room,
            )
            if placed is not None:
                target = scope_target(scope)
                if room == ROUTES:
                    mark_decided(scope, self.engine, placed[1], target, None, placed[0])
                else:
                    mark_decided(scope, self.engine, placed[1], target, placed[0])
            if placed is None or placed[1].bypassed:
                await self.app(scope, receive, stripping(scope, send) if commands else send)
                return
            room, decision = placed
        elif decision.admitted:
            mark_decided(scope, self.engine, decision, scope_target(scope), room)
        if decision.admitted:
            extra = [] if decision.set_cookie is None else ticket_headers(decision)
            if not commands:
                await self.app(scope, receive, _adding(send, extra) if extra else send)
                return
            engine = self.engine

            def send_admitted(message: Message) -> Awaitable[None]:
                kind = message["type"]
                if kind == "http.response.start":
                    message = admitted_start(engine, scope, message, room, decision, extra)
                elif kind == TRAILERS:
                    message = admitted_trailers(engine, scope, message, room, decision)
                return send(message)

            await self.app(scope, receive, send_admitted)
            return
        page = self.engine.render_page(
            room,
            decision,
            header_of(scope, b"accept"),
            header_of(scope, b"accept-language"),
            ticket=header_of(scope, b"velvet-rope-ticket"),
        )
        if page is None:  # admit decisions have no page; cannot happen here
            await self.app(scope, receive, stripping(scope, send))
            return
        body = page.body.encode()
        headers = [(k.lower().encode(), v.encode("latin-1")) for k, v in page.headers]
        headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": page.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def receive_and_tick() -> Message:
            message = await receive()
            if self.ticker is not None:
                if message["type"] == "lifespan.startup":
                    self.ticker.ensure_started()
                elif message["type"] == "lifespan.shutdown":
                    await self.ticker.stop()
            return message

        await self.app(scope, receive_and_tick, send)
