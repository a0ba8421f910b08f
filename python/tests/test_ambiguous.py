"""A request two deciding rooms might govern is refused (400), not decided in one of them:
there a visitor could pick the emptier room by how it writes the request. Through the
engine, the ASGI middleware and the WSGI middleware (the Python front doors that ask the core
for a room)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from velvet_rope import Engine
from velvet_rope.asgi import WaitingRoom
from velvet_rope.wsgi import WaitingRoom as WsgiWaitingRoom

# `shop` queues everyone under `/shop/` and on its host; `blog` and `api` admit everyone.
CONFIG = """
[[rooms]]
name = "shop"
total_active_users = 10
new_users_per_minute = 10
queue_all = true
queueing_status_code = 503
routes = [{ path = "/shop/" }, { host = "shop.example.com" }]

[[rooms]]
name = "blog"
total_active_users = 1000
new_users_per_minute = 1000
routes = [{ path = "/blog/" }]

[[rooms]]
name = "api"
total_active_users = 1000
new_users_per_minute = 1000
routes = [{ host = "api.example.com" }]
"""

WWW = [(b"host", b"www.example.com")]


def test_the_engine_refuses_and_says_why() -> None:
    engine = Engine(CONFIG)
    placed = engine.decide_request("GET", "http://api.example.com/shop/item", WWW)
    assert placed is not None
    room, decision = placed
    assert (room, decision.outcome, decision.ambiguous) == ("api", "reject", True)
    assert decision.set_cookie is None and decision.rule is None
    page = engine.render_page(room, decision, accept="application/json")
    assert page is not None and page.status == 400
    assert json.loads(page.body)["type"] == "urn:velvet-rope:problem:ambiguous-request"
    # The hosts agreeing: the api's, admitted.
    placed = engine.decide_request("GET", "http://api.example.com/shop/item",
                                   [(b"host", b"api.example.com")])
    assert placed is not None and placed[0] == "api"
    assert placed[1].outcome == "admit" and not placed[1].ambiguous
    assert engine.stats("shop").admitted_total == 0


def call_asgi(app: Any, path: str, raw_path: bytes,
              headers: list[tuple[bytes, bytes]]) -> tuple[int, bytes, list[str]]:
    sent: list[dict[str, Any]] = []
    reached: list[str] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        reached.append(scope["path"])
        await app(scope, receive, send)

    scope = {"type": "http", "method": "GET", "path": path, "raw_path": raw_path,
             "query_string": b"", "headers": headers, "client": ("198.51.100.1", 5000),
             "asgi": {"version": "3.0"}, "http_version": "1.1", "scheme": "http",
             "server": ("127.0.0.1", 80), "root_path": ""}
    asyncio.run(WaitingRoom(wrapped, Engine(CONFIG), tick=False)(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], body, reached


async def origin(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"origin"})


def test_the_asgi_middleware_answers_400() -> None:
    # Starlette routes `/shop/../blog/x` under `/shop/` (a parameter); resolved, it is the
    # blog's. Both rooms decide: refused, the application never reached.
    for raw in (b"/shop/..%2fblog/x", b"/shop/%2e%2e/blog/x"):
        status, body, reached = call_asgi(origin, "/shop/../blog/x", raw,
                                          WWW + [(b"accept", b"application/json")])
        assert status == 400, raw
        assert json.loads(body)["type"] == "urn:velvet-rope:problem:ambiguous-request"
        assert reached == [], raw
    # No host where two hosts have rooms: any host's request.
    status, _, reached = call_asgi(origin, "/x", b"/x", [])
    assert (status, reached) == (400, [])
    # One room: decided there.
    assert call_asgi(origin, "/blog/x", b"/blog/x", WWW)[:2] == (200, b"origin")
    assert call_asgi(origin, "/shop/x", b"/shop/x", WWW)[0] == 503


def test_the_wsgi_middleware_answers_400() -> None:
    reached: list[str] = []

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        reached.append(environ["PATH_INFO"])
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"origin"]

    room = WsgiWaitingRoom(app, Engine(CONFIG), tick=False)

    def call(raw: str, path: str) -> str:
        got: list[str] = []

        def start_response(status: str, headers: list[tuple[str, str]], *exc: Any) -> Any:
            got.append(status)

        environ = {"REQUEST_METHOD": "GET", "PATH_INFO": path, "RAW_URI": raw,
                   "QUERY_STRING": "", "HTTP_HOST": "www.example.com",
                   "SERVER_NAME": "www.example.com", "SERVER_PORT": "80",
                   "REMOTE_ADDR": "198.51.100.1", "wsgi.url_scheme": "http"}
        b"".join(room(environ, start_response))
        return got[0]

    assert call("/shop/..%2fblog/x", "/shop/../blog/x").startswith("400")
    assert reached == []
    assert call("/blog/x", "/blog/x").startswith("200")
    assert reached == ["/blog/x"]
