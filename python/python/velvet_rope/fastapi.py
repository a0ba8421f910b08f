"""The waiting room for single FastAPI routes: a dependency, and a decorator.

```python
from fastapi import Depends, FastAPI
from velvet_rope import Engine
from velvet_rope.fastapi import Admission, install, waiting_room

engine = Engine(pathlib.Path("velvet-rope.toml"))
app = FastAPI()
install(app)                                   # renders the waiting page for `Admission`

@app.get("/checkout", dependencies=[Depends(Admission(engine, "shop"))])
async def checkout(): ...

@app.get("/tickets")
@waiting_room(engine, "shop")                  # no install() needed
async def tickets(): ...
```

For a whole application, `velvet_rope.asgi.WaitingRoom` is the simpler choice. Both forms
tick the engine from a daemon thread (one per engine).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from fastapi import FastAPI, Request, Response
from starlette.responses import Response as StarletteResponse

from ._ticker import ThreadTicker
from ._velvet_rope import Decision, Engine

__all__ = ["Admission", "Queued", "install", "waiting_room"]

_TICKERS: dict[int, tuple[Engine, ThreadTicker]] = {}


def _ticking(engine: Engine) -> None:
    """One ticker thread per engine, started on first use."""
    entry = _TICKERS.get(id(engine))
    if entry is None or entry[0] is not engine:
        ticker = ThreadTicker(engine)
        _TICKERS[id(engine)] = (engine, ticker)
        ticker.start()


def _page_response(engine: Engine, room: str, decision: Decision, request: Request) -> Response:
    page = engine.render_page(room, decision, request.headers.get("accept"))
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


def install(app: FastAPI) -> None:
    """Lets `app` answer `Queued` (raised by `Admission`) with the waiting page."""
    app.add_exception_handler(Queued, _queued_handler)


class Admission:
    """A FastAPI dependency deciding the request in `room`: admitted requests go on (the
    ticket's `Set-Cookie` joins the response), the others raise `Queued`, which `install()`
    answers with the waiting page. The dependency's value is the `Decision`."""

    def __init__(self, engine: Engine, room: str, *, tick: bool = True) -> None:
        if room not in engine.rooms:
            raise KeyError(f"no room named `{room}` in the configuration")
        self.engine = engine
        self.room = room
        if tick:
            _ticking(engine)

    async def __call__(self, request: Request, response: Response) -> Decision:
        decision = self.engine.admit(self.room, request.headers.get("cookie"))
        if decision.admitted:
            if decision.set_cookie is not None:
                response.headers.append("set-cookie", decision.set_cookie)
            return decision
        raise Queued(_page_response(self.engine, self.room, decision, request))


F = TypeVar("F", bound=Callable[..., Awaitable[Any]])

_REQUEST = "__velvet_rope_request"
_RESPONSE = "__velvet_rope_response"


def waiting_room(engine: Engine, room: str, *, tick: bool = True) -> Callable[[F], F]:
    """Decorates one async FastAPI endpoint: it runs for admitted requests (the ticket's
    `Set-Cookie` joins its response); the others get the waiting page instead."""
    if room not in engine.rooms:
        raise KeyError(f"no room named `{room}` in the configuration")
    if tick:
        _ticking(engine)

    def decorate(endpoint: F) -> F:
        signature = inspect.signature(endpoint)

        @functools.wraps(endpoint)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            request: Request = kwargs.pop(_REQUEST)
            response: Response = kwargs.pop(_RESPONSE)
            decision = engine.admit(room, request.headers.get("cookie"))
            if not decision.admitted:
                return _page_response(engine, room, decision, request)
            result = await endpoint(*args, **kwargs)
            if decision.set_cookie is not None:
                target = result if isinstance(result, StarletteResponse) else response
                target.headers.append("set-cookie", decision.set_cookie)
            return result

        # FastAPI reads the signature: the endpoint's own parameters, plus the request and a
        # response to carry the ticket (keyword-only, under names no endpoint uses).
        extra = [
            inspect.Parameter(_REQUEST, inspect.Parameter.KEYWORD_ONLY, annotation=Request),
            inspect.Parameter(_RESPONSE, inspect.Parameter.KEYWORD_ONLY, annotation=Response),
        ]
        params = list(signature.parameters.values())
        var_kw = [p for p in params if p.kind is inspect.Parameter.VAR_KEYWORD]
        rest = [p for p in params if p.kind is not inspect.Parameter.VAR_KEYWORD]
        setattr(wrapper, "__signature__", signature.replace(parameters=[*rest, *extra, *var_kw]))
        return wrapper  # type: ignore[return-value]

    return decorate
