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


def test_a_named_room_then_the_routes_decide_once() -> None:
    """The routes choose a room only by deciding: a named room's middleware ahead of one of
    the routes left the routes to decide the request again (a second slot for a new
    visitor). Now the routes' room is asked first (`Engine.room_for_request`)."""
    engine = Engine(ROOM.format(routes='routes = [{ path = "/" }]'))
    inner = WaitingRoom(origin, engine, tick=False)
    app = WaitingRoom(inner, engine, room="shop", tick=False)
    status, headers = call_asgi(app, "/item", [])
    assert status == 200
    assert [c.split("=")[0] for c in cookies(headers)] == ["__vr_shop"]
    status, _ = call_asgi(app, "/item", [])
    assert status == 202, "the room holds one"
    engine.tick()
    assert engine.stats("shop").active_users == 1

    def wsgi_app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"in"]

    engine = Engine(ROOM.format(routes='routes = [{ path = "/" }]'))
    stacked = WsgiWaitingRoom(WsgiWaitingRoom(wsgi_app, engine, tick=False), engine,
                              room="shop", tick=False)
    statuses = []
    for _ in range(2):
        def start_response(status: str, headers: list[tuple[str, str]], *exc: Any) -> Any:
            statuses.append(status.split()[0])
        environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/item", "QUERY_STRING": "",
                   "SERVER_NAME": "localhost", "SERVER_PORT": "80", "wsgi.url_scheme": "http",
                   "wsgi.input": io.BytesIO(b"")}
        b"".join(stacked(environ, start_response))
    assert statuses == ["200", "202"]


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


# Found by the review of the record: a bypass decided twice must not become a revocable
# admission; a dry run's verdict is counted once; a rewrite out of a bypassed path, or the
# routes on another path, are decided again.

REVOCABLE = """
[[rooms]]
name = "shop"
total_active_users = 5
new_users_per_minute = 1000
queueing_status_code = 202
enabled_origin_commands = ["revoke"]
[rooms.cookie]
secure = false
[[rooms.rules]]
action = "bypass"
headers = { "X-Staff" = "yes" }
"""


def test_fastapi_a_bypass_decided_twice_is_not_revoked() -> None:
    from fastapi import APIRouter, Depends, FastAPI
    from fastapi.responses import PlainTextResponse

    from velvet_rope.fastapi import Admission, install

    for stacked in ("router", "asgi"):
        engine = Engine(REVOCABLE)
        api = FastAPI()
        install(api)
        deps = [Depends(Admission(engine, "shop", tick=False))]
        if stacked == "asgi":
            api.add_middleware(WaitingRoom, engine=engine, room="shop", tick=False)
        router = APIRouter(dependencies=deps if stacked == "router" else [])

        @router.get("/item", dependencies=deps)
        async def item() -> dict[str, bool]:
            return {"ok": True}

        @router.get("/logout", dependencies=deps)
        async def logout() -> PlainTextResponse:
            return PlainTextResponse("bye", headers={"Velvet-Rope-Command": "revoke"})

        api.include_router(router)
        _, headers = call_asgi(api, "/item", [])
        ticket = cookies(headers)[0].encode()
        status, headers = call_asgi(api, "/logout", [(b"cookie", ticket), (b"x-staff", b"yes")])
        assert status == 200
        assert cookies(headers) == [], stacked
        status, headers = call_asgi(api, "/item", [(b"cookie", ticket)])
        assert (status, cookies(headers)) == (200, []), f"{stacked}: the ticket still holds"


def test_a_dry_run_is_counted_once_and_a_rewrite_decided_again() -> None:
    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"in"]

    def get(wsgi: Any, path: str, cookie: str | None = None) -> tuple[str, list[tuple[str, str]]]:
        got: dict[str, Any] = {}

        def start_response(status: str, headers: list[tuple[str, str]], *exc: Any) -> Any:
            got["status"], got["headers"] = status, headers

        environ = {"REQUEST_METHOD": "GET", "PATH_INFO": path, "QUERY_STRING": "",
                   "SERVER_NAME": "127.0.0.1", "SERVER_PORT": "80", "REMOTE_ADDR": "198.51.100.1",
                   "wsgi.input": io.BytesIO(b""), "wsgi.url_scheme": "http"}
        if cookie:
            environ["HTTP_COOKIE"] = cookie
        b"".join(wsgi(environ, start_response))
        return got["status"], got["headers"]

    dry = Engine(ROOM.format(routes='mode = "dry_run"\nqueue_all = true'))
    twice = WsgiWaitingRoom(WsgiWaitingRoom(app, dry, room="shop", tick=False), dry,
                            room="shop", tick=False)
    status, headers = get(twice, "/item")
    assert status.startswith("200")
    ticket = next(v.split(";")[0] for k, v in headers if k.lower() == "set-cookie")
    assert get(twice, "/item", ticket)[0].startswith("200")
    dry.tick()
    import json
    assert json.loads(dry.stats_json())["rooms"]["shop"]["would_have_queued"] == 2

    # A middleware between the two rewrites a bypassed path to a guarded one.
    rules = Engine(
        '[[rooms]]\nname = "shop"\ntotal_active_users = 1\nnew_users_per_minute = 1000\n'
        'queueing_status_code = 202\n[rooms.cookie]\nsecure = false\n'
        '[[rooms.rules]]\naction = "bypass"\npaths = ["/static/"]\n'
    )

    def rewrite(inner: Any) -> Any:
        def call(environ: dict[str, Any], start_response: Any) -> Any:
            if environ["PATH_INFO"].startswith("/static/"):
                environ["PATH_INFO"] = "/item"
            return inner(environ, start_response)
        return call

    stack = WsgiWaitingRoom(rewrite(WsgiWaitingRoom(app, rules, room="shop", tick=False)), rules,
                            room="shop", tick=False)
    assert get(stack, "/item")[0].startswith("200")
    assert get(stack, "/static/x")[0].startswith("202"), "rewritten out of the bypass"
