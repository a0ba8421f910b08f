"""The waiting room for single FastAPI routes: a dependency, and a decorator.

```python
from fastapi import Depends, FastAPI
from velvet_rope import Engine
from velvet_rope.fastapi import Admission, install, waiting_room

engine = Engine(pathlib.Path("velvet-rope.toml"))
app = FastAPI()
install(app)                                   # needed by `Admission`, before the app starts

@app.get("/checkout", dependencies=[Depends(Admission(engine, "shop"))])
async def checkout(): ...

@app.get("/tickets")
@waiting_room(engine, "shop")                  # no install() needed
async def tickets(): ...
```

`install(app)` adds what `Admission` needs: an exception handler that answers a waiting
visitor with the waiting page, and a small ASGI middleware that adds the ticket's
`Set-Cookie` to the response whatever the endpoint returns (a dict, or a `Response` of its
own: HTML, a template, a redirect, a stream), since FastAPI drops a dependency's headers when
the endpoint returns a `Response`. `Admission` used in an app without `install` raises
`RuntimeError` on its first request rather than losing tickets. Both forms read every
`Cookie` header of the request.

Origin commands: an endpoint ends the visitor's session by answering with the header
`Velvet-Rope-Command: revoke` (in a room with `enabled_origin_commands = ["revoke"]`): the
visitor's ticket is revoked and the response clears the ticket cookie instead of setting it.
The header never reaches the client: `install`'s middleware removes it from every response of
the app (and from its trailers, where it revokes all the same but cannot clear the cookie any
more, see `velvet_rope.asgi`), and the decorator from its endpoint's, whether returned or
raised with an `HTTPException` (whose headers then clear the cookie of a revoked session).
Refusals are logged to the `velvet_rope` logger.

For a whole application, `velvet_rope.asgi.WaitingRoom` is the simpler choice. Both forms
tick the engine from a daemon thread (one per engine).
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from fastapi import FastAPI, Request, Response
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.responses import Response as StarletteResponse

from ._commands import LOG, asks_revoke, is_command_name, record, revoke, split_wsgi
from ._once import decided_before, mark_decided, scope_target
from ._ticker import ThreadTicker
from ._velvet_rope import Decision, Engine
from .asgi import (
    ASGIApp,
    Message,
    Receive,
    Scope,
    Send,
    TRAILERS,
    admitted_start,
    admitted_trailers,
    cookie_of,
    header_of,
    headers_of,
    peer_of,
    stripping,
    target_of,
    ticket_headers,
)
from .errors import UnknownRoomError

__all__ = ["Admission", "Queued", "install", "waiting_room"]

_TICKERS: dict[int, tuple[Engine, ThreadTicker]] = {}


def _ticking(engine: Engine) -> None:
    """One ticker thread per engine, started on first use."""
    entry = _TICKERS.get(id(engine))
    if entry is None or entry[0] is not engine:
        ticker = ThreadTicker(engine)
        _TICKERS[id(engine)] = (engine, ticker)
        ticker.start()


def _known(engine: Engine, room: str) -> None:
    if room not in engine.rooms:
        raise UnknownRoomError(
            f"no room named `{room}` in the configuration (its rooms: "
            f"{', '.join(sorted(engine.rooms)) or 'none'})"
        )


def _decide(engine: Engine, room: str, request: Request) -> tuple[Decision, bool]:
    """The room's decision on the whole request (its rules, its ticket from the cookies or
    the `Velvet-Rope-Ticket` header), and whether the room had decided the request already
    (a router's dependency and a route's, or the ASGI middleware ahead): then its decision
    as made, and nothing of it is to be carried out again."""
    scope = request.scope
    earlier = decided_before(scope, engine, room, scope_target(scope))
    if earlier is not None:
        return earlier, True
    # No rules, no header tickets: the `Cookie` lines are all the room reads (one call).
    headers = headers_of(scope)
    decision = engine.admit_plain_headers(room, headers)
    if decision is None:
        placed = engine.decide_request(
            scope["method"], target_of(scope), headers, peer=peer_of(scope), room=room
        )
        assert placed is not None  # a named room always decides
        decision = placed[1]
    if decision.admitted:
        mark_decided(scope, engine, decision, scope_target(scope), room)
    return decision, False


def _page_response(engine: Engine, room: str, decision: Decision, request: Request) -> Response:
    page = engine.render_page(
        room,
        decision,
        header_of(request.scope, b"accept"),
        header_of(request.scope, b"accept-language"),
        ticket=header_of(request.scope, b"velvet-rope-ticket"),
    )
    if page is None:  # admit decisions have no page
        raise RuntimeError("an admitted request has no waiting page")
    response = StarletteResponse(content=page.body, status_code=page.status)
    for name, value in page.headers:
        response.headers.append(name, value)
    return response


class Queued(Exception):
    """Raised by `Admission` for a request that must wait; `install()` turns it into the
    waiting page."""

    def __init__(self, response: Response) -> None:
        super().__init__("the request waits in the queue")
        self.response = response


async def _queued_handler(request: Request, exc: Exception) -> Response:
    if isinstance(exc, Queued):
        return exc.response
    raise exc


#: The scope key under which `_Tickets` keeps, for each `Admission` that admitted the request,
#: its engine, room, decision and the ticket headers to add to the response.
_TICKETS = "velvet_rope.admitted"


class _Tickets:
    """ASGI middleware (added by `install`): gives each HTTP request a list, in its scope, for
    `Admission` to put the ticket's `Set-Cookie` in, and adds what it holds to the response's
    headers, whatever made the response. It carries out and removes the app's
    `Velvet-Rope-Command` headers and trailers (in the rooms that admitted the request;
    removed from every response)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            # A WebSocket handshake's headers lose the command too (no room decides one).
            strip = scope["type"] == "websocket"
            await self.app(scope, receive, stripping(scope, send) if strip else send)
            return
        admitted: list[tuple[Engine, str, Decision, list[tuple[bytes, bytes]]]] = []
        scope[_TICKETS] = admitted
        strip = stripping(scope, send)

        async def send_with_tickets(message: Message) -> None:
            kind = message["type"]
            if kind != "http.response.start" and kind != TRAILERS:
                await send(message)
            elif not admitted:
                await strip(message)
            elif kind == TRAILERS:
                for engine, room, decision, _ in admitted:
                    message = admitted_trailers(engine, scope, message, room, decision)
                await send(message)
            else:
                # Each admitting room adds its tickets and carries out the commands (the first
                # removes them from the headers and leaves them in the scope for the others).
                for engine, room, decision, extra in admitted:
                    message = admitted_start(engine, scope, message, room, decision, extra)
                await send(message)

        await self.app(scope, receive, send_with_tickets)


def install(app: FastAPI) -> None:
    """Prepares `app` for `Admission` (call it before the app starts; once is enough): a
    waiting visitor (`Queued`) is answered with the waiting page, and an admitted visitor's
    ticket is set on the response whatever the endpoint returns.

    Its middleware wraps the app's whole middleware stack, whenever it is built: outside the
    middleware added after `install` and outside Starlette's `ServerErrorMiddleware`, so that
    an origin command in any response (a 500 page's included) is removed and followed."""
    if getattr(app, "_velvet_rope_installed", False):
        return
    app.add_exception_handler(Queued, _queued_handler)
    build = app.build_middleware_stack

    def build_with_tickets() -> ASGIApp:
        return _Tickets(build())

    setattr(app, "build_middleware_stack", build_with_tickets)
    setattr(app, "_velvet_rope_installed", True)


class Admission:
    """A FastAPI dependency deciding the request in `room`: admitted requests go on (the
    ticket's `Set-Cookie` joins the response, whatever the endpoint returns), the others
    raise `Queued`, which `install()` answers with the waiting page. The dependency's value
    is the `Decision`. Needs `install(app)`: without it, the first request raises
    `RuntimeError`. Raises `UnknownRoomError` for a room the engine does not have."""

    def __init__(self, engine: Engine, room: str, *, tick: bool = True) -> None:
        _known(engine, room)
        self.engine = engine
        self.room = room
        if tick:
            _ticking(engine)

    async def __call__(self, request: Request) -> Decision:
        admitted = request.scope.get(_TICKETS)
        if admitted is None:
            raise RuntimeError(
                "velvet_rope.fastapi.Admission needs velvet_rope.fastapi.install(app) on the "
                "application, before it starts: without it, the tickets of admitted visitors "
                "would be lost whenever an endpoint returns a Response of its own"
            )
        decision, again = _decide(self.engine, self.room, request)
        if decision.admitted:
            if not decision.bypassed and not again:
                admitted.append((self.engine, self.room, decision, ticket_headers(decision)))
            return decision
        raise Queued(_page_response(self.engine, self.room, decision, request))


def _commands(
    engine: Engine, room: str, decision: Decision, request: Request, headers: MutableHeaders
) -> bool:
    """Carries out and removes the `Velvet-Rope-Command` lines of `headers`, those an
    endpoint of `waiting_room` answered with; whether the visitor's session ended. Never
    raises."""
    try:
        split = split_wsgi(headers.items())
        if split is None:
            return False
        del headers["velvet-rope-command"]  # every line, any case
        record(request.scope, split[1])  # for the front doors around the app
        if decision.bypassed or not asks_revoke(split[1]):
            return False
        return revoke(
            engine,
            room,
            decision,
            cookie_of(request.scope),
            header_of(request.scope, b"velvet-rope-ticket"),
        )
    except Exception:
        LOG.exception("velvet-rope: room %r: cannot carry out the origin's commands", room)
        return False


def _exception_commands(
    engine: Engine, room: str, decision: Decision, request: Request, exc: HTTPException
) -> None:
    """Carries out and removes the `Velvet-Rope-Command` headers of an `HTTPException` an
    endpoint of `waiting_room` raised (FastAPI's way to give an error response headers); a
    revoked session's error response clears the ticket cookie. Never raises."""
    try:
        given = exc.headers
        if not given or not any(is_command_name(name) for name in given):
            return
        # Starlette's headers keep repeated names (`Set-Cookie`) that a dict cannot, and the
        # exception handlers read them with `.items()` as they read a dict.
        headers = MutableHeaders(headers=given)
        if _commands(engine, room, decision, request, headers):
            headers.append("set-cookie", engine.clear_cookie(room))
        exc.headers = headers
    except Exception:
        LOG.exception("velvet-rope: room %r: cannot carry out the origin's commands", room)
        # Fail closed: whatever went wrong, the command does not go out.
        exc.headers = {k: v for k, v in (exc.headers or {}).items() if not is_command_name(k)}


F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


def _parameter_of(
    endpoint: Callable[..., Any], params: list[inspect.Parameter], kind: type
) -> str | None:
    """The name of the endpoint's parameter that FastAPI gives the request (`kind` Request)
    or the response (`kind` Response), if it has one."""
    try:
        hints = typing.get_type_hints(endpoint)
    except Exception:  # annotations that do not resolve: read as written
        hints = {}
    for p in params:
        annotation = hints.get(p.name, p.annotation)
        if isinstance(annotation, type) and issubclass(annotation, kind):
            return p.name
    return None


_REQUEST = "__velvet_rope_request"
_RESPONSE = "__velvet_rope_response"


def waiting_room(engine: Engine, room: str, *, tick: bool = True) -> Callable[[F], F]:
    """Decorates one async FastAPI endpoint: it runs for admitted requests (the ticket's
    `Set-Cookie` joins its response, whatever it returns); the others get the waiting page
    instead. Raises `UnknownRoomError` for a room the engine does not have."""
    _known(engine, room)
    if tick:
        _ticking(engine)

    def decorate(endpoint: F) -> F:
        signature = inspect.signature(endpoint)
        params = list(signature.parameters.values())
        # FastAPI hands the request and its response to one parameter each: the endpoint's
        # own, when it has them (a second would get nothing), else ours.
        own_request = _parameter_of(endpoint, params, Request)
        own_response = _parameter_of(endpoint, params, Response)

        @functools.wraps(endpoint)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            request: Request = kwargs[own_request] if own_request else kwargs.pop(_REQUEST)
            response: Response = kwargs[own_response] if own_response else kwargs.pop(_RESPONSE)
            decision, again = _decide(engine, room, request)
            if not decision.admitted:
                return _page_response(engine, room, decision, request)
            if again:
                # Its ticket and commands are the first front door's to carry out.
                return await endpoint(*args, **kwargs)
            try:
                result = await endpoint(*args, **kwargs)
            except HTTPException as exc:
                _exception_commands(engine, room, decision, request, exc)
                raise
            target = result if isinstance(result, StarletteResponse) else response
            extra = ticket_headers(decision)
            if _commands(engine, room, decision, request, target.headers):
                extra = [(b"set-cookie", engine.clear_cookie(room).encode("latin-1"))]
            for name, value in extra:
                target.headers.append(name.decode(), value.decode("latin-1"))
            return result

        # FastAPI reads the signature: the endpoint's own parameters, plus the request and a
        # response to carry the ticket (keyword-only, under names no endpoint uses) unless
        # the endpoint takes them itself.
        extra = []
        if own_request is None:
            extra.append(
                inspect.Parameter(_REQUEST, inspect.Parameter.KEYWORD_ONLY, annotation=Request)
            )
        if own_response is None:
            extra.append(
                inspect.Parameter(_RESPONSE, inspect.Parameter.KEYWORD_ONLY, annotation=Response)
            )
        var_kw = [p for p in params if p.kind is inspect.Parameter.VAR_KEYWORD]
        rest = [p for p in params if p.kind is not inspect.Parameter.VAR_KEYWORD]
        setattr(wrapper, "__signature__", signature.replace(parameters=[*rest, *extra, *var_kw]))
        return wrapper  # type: ignore[return-value]

    return decorate
