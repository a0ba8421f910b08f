"""The waiting room as ASGI middleware (Starlette, FastAPI, any ASGI app).

```python
from velvet_rope import Engine
from velvet_rope.asgi import WaitingRoom

engine = Engine(pathlib.Path("velvet-rope.toml"), shared_memory="/run/velvet-rope.state")
app = WaitingRoom(app, engine, room="shop", bypass=["/health", "/static/"])
```

Each HTTP request under a room is decided before the app sees it: admitted requests reach the
app (with the ticket's `Set-Cookie` added to its response when the ticket changed); the others
get the room's waiting page (HTML, or JSON when the client asks for it) with its status code,
`Refresh` or `Retry-After`, `Cache-Control: no-store` and the ticket. The engine is ticked once
a second from a task on the event loop, started with the application (lifespan startup, or the
first request) and stopped at lifespan shutdown.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from typing import Any

from ._routing import RoomRouter
from ._ticker import LoopTicker
from ._velvet_rope import Engine

__all__ = ["WaitingRoom"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def _headers(scope: Scope) -> tuple[bytes | None, bytes | None]:
    """The request's `Cookie` (several joined with `; `, as HTTP/2 may split them) and
    `Accept` headers."""
    cookies: list[bytes] = []
    accept = None
    for name, value in scope.get("headers", ()):
        if name == b"cookie":
            cookies.append(value)
        elif name == b"accept":
            accept = value
    cookie = cookies[0] if len(cookies) == 1 else (b"; ".join(cookies) if cookies else None)
    return cookie, accept


def _header(scope: Scope, name: bytes) -> bytes | None:
    """The request's first `name` header (lower case), if any: for the waiting page only, so
    the scan stays off the admitted path."""
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value)
    return None


class WaitingRoom:
    """ASGI middleware putting a velvet-rope room in front of `app`.

    `room`: the room deciding every path; `rooms`: path prefix -> room (longest prefix wins);
    `bypass`: path prefixes that are never decided (health checks, static files);
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
        self.router = RoomRouter(engine, room, rooms, bypass, case_sensitive)
        self.ticker = LoopTicker(engine) if tick else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await self._lifespan(scope, receive, send)
            return
        if self.ticker is not None:
            self.ticker.ensure_started()
        room = self.router.room_for(scope["path"]) if kind == "http" else None
        if room is None:
            await self.app(scope, receive, send)
            return
        cookie, accept = _headers(scope)
        decision = self.engine.admit(room, cookie)
        if decision.admitted:
            set_cookie = decision.set_cookie
            if set_cookie is None:
                await self.app(scope, receive, send)
                return
            extra = (b"set-cookie", set_cookie.encode("latin-1"))

            async def send_with_ticket(message: Message) -> None:
                if message["type"] == "http.response.start":
                    message = dict(message)
                    message["headers"] = [*message.get("headers", ()), extra]
                await send(message)

            await self.app(scope, receive, send_with_ticket)
            return
        page = self.engine.render_page(
            room, decision, accept, _header(scope, b"accept-language")
        )
        if page is None:  # admit decisions have no page; cannot happen here
            await self.app(scope, receive, send)
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
