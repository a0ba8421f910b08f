"""A path rewritten by a middleware ahead of velvet-rope (a locale prefix taken off): the room is
chosen by the path the application routes (ASGI's `scope["path"]`, WSGI's `PATH_INFO`), and
so must the configuration's routes and the room's rules be; they read the target as the client
sent it (`raw_path`, `RAW_URI`), and a request the application routes into a full room was
served. Found by the review of the Node middleware's rewrite handling; each test failed before
the fix."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from velvet_rope import Engine
from velvet_rope.asgi import WaitingRoom
from velvet_rope.wsgi import WaitingRoom as WsgiWaitingRoom

TWO = """
[[rooms]]
name = "shop"
total_active_users = 1
new_users_per_minute = 1000
routes = [{ path = "/shop/" }]
rules = [{ name = "checkout", action = "queue", paths = ["/shop/checkout"] }]
[rooms.cookie]
secure = false

[[rooms]]
name = "site"
total_active_users = 1000
new_users_per_minute = 1000
routes = [{ path = "/" }]
[rooms.cookie]
secure = false
"""

LOCALE = re.compile(r"^/(en|de)(/.*)$")


def asgi_get(middleware: Any, path: str) -> int:
    """One GET through `middleware` behind a locale rewrite of `scope["path"]` (not of
    `raw_path`, as Starlette's and most rewriting middleware leave it): the status."""
    sent: list[dict[str, Any]] = []

    async def send(message: Any) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    async def rewrite(scope: Any, receive: Any, send: Any) -> None:
        m = LOCALE.match(scope["path"])
        if m:
            scope = dict(scope, path=m.group(2))
        await middleware(scope, receive, send)

    scope = {
        "type": "http",
        "method": "GET",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [(b"host", b"example.com")],
        "client": ("127.0.0.1", 50000),
    }
    asyncio.run(rewrite(scope, receive, send))
    status: int = sent[0]["status"]
    return status


def test_asgi_reads_the_rewritten_path_for_routes_and_rules() -> None:
    for rooms in (None, {"/shop/": "shop"}):
        engine = Engine(TWO)
        reached: list[str] = []

        async def app(scope: Any, receive: Any, send: Any) -> None:
            reached.append(scope["path"])
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"origin"})

        middleware = WaitingRoom(app, engine, tick=False, rooms=rooms)
        asgi_get(middleware, "/shop/first")
        assert reached == ["/shop/first"], "the first visitor takes the seat"
        asgi_get(middleware, "/en/shop/other")
        assert reached == ["/shop/first"], (
            f"{rooms}: the rewritten /shop/other was served past the full shop"
        )
        # The rule reads the path the application routes: the checkout queues.
        asgi_get(middleware, "/de/shop/checkout")
        assert reached == ["/shop/first"], rooms
        # What the application routes elsewhere is the other room's.
        asgi_get(middleware, "/en/about")
        assert reached == ["/shop/first", "/about"], rooms


def wsgi_get(middleware: Any, uri: str) -> str:
    """One GET through `middleware` behind a locale rewrite of `PATH_INFO` (gunicorn's
    `RAW_URI` keeps what the client sent): the status line."""
    status: list[str] = []

    def start_response(line: str, headers: Any, exc_info: Any = None) -> Any:
        status.append(line)
        return lambda data: None

    def rewrite(environ: dict[str, Any], start: Any) -> Any:
        m = LOCALE.match(environ["PATH_INFO"])
        if m:
            environ = dict(environ, PATH_INFO=m.group(2))
        return middleware(environ, start)

    environ = {
        "REQUEST_METHOD": "GET",
        "SCRIPT_NAME": "",
        "PATH_INFO": uri,
        "RAW_URI": uri,
        "QUERY_STRING": "",
        "HTTP_HOST": "example.com",
        "REMOTE_ADDR": "127.0.0.1",
        "wsgi.url_scheme": "http",
    }
    b"".join(rewrite(environ, start_response))
    return status[0]


def test_wsgi_reads_the_rewritten_path_for_routes_and_rules() -> None:
    for rooms in (None, {"/shop/": "shop"}):
        engine = Engine(TWO)
        reached: list[str] = []

        def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
            reached.append(environ["PATH_INFO"])
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"origin"]

        middleware = WsgiWaitingRoom(app, engine, tick=False, rooms=rooms)
        wsgi_get(middleware, "/shop/first")
        assert reached == ["/shop/first"], "the first visitor takes the seat"
        wsgi_get(middleware, "/en/shop/other")
        assert reached == ["/shop/first"], (
            f"{rooms}: the rewritten /shop/other was served past the full shop"
        )
        wsgi_get(middleware, "/de/shop/checkout")
        assert reached == ["/shop/first"], rooms
        wsgi_get(middleware, "/en/about")
        assert reached == ["/shop/first", "/about"], rooms


def test_asgi_target_is_as_sent_unless_rewritten() -> None:
    from velvet_rope.asgi import target_of

    def scope(path: str, raw: bytes, root: str = "", query: bytes = b"") -> dict[str, Any]:
        return {"path": path, "raw_path": raw, "root_path": root, "query_string": query}

    # As sent: the percent-escapes the core reads every way, and the query.
    assert target_of(scope("/shop/x", b"/%73hop/x", query=b"a=1")) == b"/%73hop/x?a=1"
    # Behind a proxy that strips a prefix, the server puts it in `path` only.
    assert target_of(scope("/api/shop/x", b"/shop/x", root="/api")) == b"/shop/x"
    # Rewritten ahead of the middleware: the path the application routes.
    assert target_of(scope("/shop/x", b"/en/shop/x")) == b"/shop/x"
    assert target_of(scope("/shop/x", b"/en/%73hop/x", query=b"q")) == b"/shop/x?q"
    # No `raw_path`: the path.
    assert target_of({"path": "/caf\u00e9"}) == "/caf\u00e9".encode()


# Found by the review of the fix above: the decoded path was handed over unescaped, so a `?`
# from `%3F` started a query only velvet-rope saw (a rule on `preview=1` bypassed), reachable
# without a rewrite: uvicorn decodes `%ff` to U+FFFD (the path no longer reads as the raw
# one), gunicorn gives an absolute-form target in `RAW_URI`.
PREVIEW = TWO.replace(
    'rules = [{ name = "checkout", action = "queue", paths = ["/shop/checkout"] }]',
    'rules = [{ name = "preview", action = "bypass", query = ["preview=1"] }]',
)


def test_a_decoded_question_mark_starts_no_query() -> None:
    from velvet_rope.asgi import target_of

    scope = {"path": "/shop/x\ufffd?preview=1", "raw_path": b"/shop/x%ff%3Fpreview=1"}
    assert target_of(scope) == b"/shop/x\xef\xbf\xbd%3Fpreview=1"
    assert target_of({"path": "/a%b#c", "raw_path": b"/x"}) == b"/a%25b%23c"
    engine = Engine(PREVIEW)
    reached: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        reached.append(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"origin"})

    async def run(path: str, raw: bytes, query: bytes = b"") -> None:
        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b""}

        async def send(message: Any) -> None:
            pass

        await WaitingRoom(app, engine, tick=False)(
            {
                "type": "http",
                "method": "GET",
                "path": path,
                "raw_path": raw,
                "query_string": query,
                "headers": [(b"host", b"example.com")],
                "client": ("127.0.0.1", 50000),
            },
            receive,
            send,
        )

    asyncio.run(run("/shop/first", b"/shop/first"))
    asyncio.run(run("/shop/x\ufffd?preview=1", b"/shop/x%ff%3Fpreview=1"))
    assert reached == ["/shop/first"], "a decoded ? bypassed the full shop"
    # h11 keeps a `#` and what follows it in the query string: the application reads
    # `preview=0` there too, so the rule (every `preview` must be 1) does not bypass.
    asyncio.run(run("/shop/x", b"/shop/x", b"preview=1#&preview=0"))
    asyncio.run(run("/shop/x\ufffd", b"/shop/x%ff", b"preview=1#&preview=0"))
    assert reached == ["/shop/first"], "a # in the query string bypassed the full shop"
    # The real query still bypasses.
    asyncio.run(run("/shop/x", b"/shop/x", b"preview=1"))
    assert reached == ["/shop/first", "/shop/x"]


def test_wsgi_absolute_form_and_a_decoded_question_mark() -> None:
    from velvet_rope.wsgi import _target

    environ = {
        "SCRIPT_NAME": "",
        "PATH_INFO": "/shop/x?preview=1",
        "RAW_URI": "http://x/shop/x%3Fpreview=1",
        "QUERY_STRING": "",
    }
    assert _target(environ) == b"/shop/x%3Fpreview=1"
    # PEP 3333's strings are bytes one per character: handed over as those bytes.
    environ = {"PATH_INFO": "/caf\u00c3\u00a9/x", "RAW_URI": "/caf\u00c3\u00a9/x?a=1"}
    assert _target(environ) == b"/caf\xc3\xa9/x?a=1"
