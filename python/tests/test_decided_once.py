"""A room decides a request once, however many of its front doors the request meets: the ASGI
middleware twice (an application's and a mounted app's), the WSGI middleware twice, a FastAPI
router's dependency and a route's. Decided again, a new visitor (whose request carries no
ticket yet) took a second slot: in a room of one, the visitor the first admitted was sent
the waiting page by the second."""

from __future__ import annotations

import io
from typing import Any

from velvet_rope import Engine
from velvet_rope.asgi import WaitingRoom
from velvet_rope.wsgi import WaitingRoom as WsgiWaitingRoom

from .test_rules import call_asgi

ROOM = """
[[rooms]]
name = "shop"
total_active_users = 1
new_users_per_minute = 1000
queueing_status_code = 202
{routes}
[rooms.cookie]
secure = false

[[rooms]]
name = "checkout"
total_active_users = 1
new_users_per_minute = 1000
queueing_status_code = 202
[rooms.cookie]
secure = false
"""


def cookies(headers: list[tuple[bytes, bytes]]) -> list[str]:
    return [v.decode().split(";")[0] for k, v in headers if k.lower() == b"set-cookie"]


async def origin(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"in"})


def test_asgi_middleware_twice_decides_once() -> None:
    for routes, outer in (("", {"room": "shop"}), ('routes = [{ path = "/" }]', {})):
        engine = Engine(ROOM.format(routes=routes))
        inner = WaitingRoom(origin, engine, room="shop", tick=False)
        app = WaitingRoom(inner, engine, tick=False, **outer)
        status, headers = call_asgi(app, "/item", [])
        assert status == 200, routes
        assert [c.split("=")[0] for c in cookies(headers)] == ["__vr_shop"]
        ticket = cookies(headers)[0].encode()
        status, _ = call_asgi(app, "/item", [])
        assert status == 202, "the room holds one"
        engine.tick()
        assert engine.stats("shop").active_users == 1
        # Another room on the way still decides: its own slot and ticket.
        paying = WaitingRoom(inner, engine, room="checkout", tick=False)
        status, headers = call_asgi(paying, "/pay", [(b"cookie", ticket)])
        assert status == 200
        assert [c.split("=")[0] for c in cookies(headers)] == ["__vr_checkout"]


def test_wsgi_middleware_twice_decides_once() -> None:
    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"in"]

    engine = Engine(ROOM.format(routes=""))
    twice = WsgiWaitingRoom(WsgiWaitingRoom(app, engine, room="shop", tick=False), engine,
                            room="shop", tick=False)

    def get() -> tuple[str, list[tuple[str, str]]]:
        got: dict[str, Any] = {}

        def start_response(status: str, headers: list[tuple[str, str]], *exc: Any) -> Any:
            got["status"], got["headers"] = status, headers

        environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/item", "QUERY_STRING": "",
                   "SERVER_NAME": "127.0.0.1", "SERVER_PORT": "80", "REMOTE_ADDR": "198.51.100.1",
                   "wsgi.input": io.BytesIO(b""), "wsgi.url_scheme": "http"}
        b"".join(twice(environ, start_response))
        return got["status"], got["headers"]

    status, headers = get()
    assert status.startswith("200")
    assert [v.split("=")[0] for k, v in headers if k.lower() == "set-cookie"] == ["__vr_shop"]
    assert get()[0].startswith("202"), "the room holds one"


def test_fastapi_router_and_route_dependencies_decide_once() -> None:
    from fastapi import APIRouter, Depends, FastAPI

    from velvet_rope.fastapi import Admission, install

    engine = Engine(ROOM.format(routes=""))
    api = FastAPI()
    install(api)
    router = APIRouter(dependencies=[Depends(Admission(engine, "shop", tick=False))])

    @router.get("/item", dependencies=[Depends(Admission(engine, "shop", tick=False))])
    async def item() -> dict[str, bool]:
        return {"origin": True}

    api.include_router(router)
    status, headers = call_asgi(api, "/item", [])
    assert status == 200
    assert [c.split("=")[0] for c in cookies(headers)] == ["__vr_shop"]
    status, _ = call_asgi(api, "/item", [])
    assert status == 202, "the room holds one"
