"""The FastAPI helpers' set-up, in process: mistakes that must fail loudly."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from fastapi import Depends, FastAPI, Request, Response
from fastapi.responses import HTMLResponse

from velvet_rope import Engine, UnknownRoomError
from velvet_rope.fastapi import Admission, install, waiting_room

ROOM = (
    '[[rooms]]\nname = "shop"\ntotal_active_users = 5\nnew_users_per_minute = 1000\n'
    "[rooms.cookie]\nsecure = false\n"
)


def call(app: Any, path: str, headers: list[tuple[bytes, bytes]] | None = None) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """One GET through an ASGI app, in process: the status, headers and body."""
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
        "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
        "root_path": "", "headers": headers or [], "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], list(start.get("headers", [])), body


def test_unknown_rooms_raise_the_package_error() -> None:
    engine = Engine(ROOM)
    for make in (lambda: Admission(engine, "nope", tick=False),
                 lambda: waiting_room(engine, "nope", tick=False)):
        with pytest.raises(UnknownRoomError, match="no room named `nope`"):
            make()


def test_admission_without_install_fails_loudly() -> None:
    engine = Engine(ROOM)
    app = FastAPI()

    @app.get("/page", dependencies=[Depends(Admission(engine, "shop", tick=False))],
             response_class=HTMLResponse)
    async def page() -> HTMLResponse:
        return HTMLResponse("<p>in</p>")

    with pytest.raises(RuntimeError, match=r"install\(app\)"):
        call(app, "/page")


def test_install_sets_the_ticket_once_whatever_the_endpoint_returns() -> None:
    engine = Engine(ROOM)
    app = FastAPI()
    install(app)
    admission = Admission(engine, "shop", tick=False)

    @app.get("/page", dependencies=[Depends(admission)], response_class=HTMLResponse)
    async def page() -> HTMLResponse:
        return HTMLResponse("<p>in</p>")

    @app.get("/data", dependencies=[Depends(admission)])
    async def data() -> dict[str, bool]:
        return {"in": True}

    for path in ("/page", "/data"):
        status, headers, _ = call(app, path)
        cookies = [v for k, v in headers if k == b"set-cookie"]
        assert status == 200 and len(cookies) == 1, (path, headers)
        ticket = cookies[0].split(b";", 1)[0]
        # Several Cookie headers, the ticket in the second: read, nothing more to set.
        status, headers, _ = call(app, path, [(b"cookie", b"a=1"), (b"cookie", ticket)])
        assert status == 200 and not [v for k, v in headers if k == b"set-cookie"], (path, headers)


def test_a_decorated_endpoint_gets_its_own_request_and_response() -> None:
    """FastAPI gives the request and the response to one parameter each: an endpoint taking
    them itself gets them (not the decorator's own), and the ticket still joins the
    response."""
    engine = Engine(ROOM)
    app = FastAPI()

    @app.get("/mine")
    @waiting_room(engine, "shop", tick=False)
    async def mine(request: Request, response: Response) -> dict[str, str]:
        response.headers["x-mine"] = "1"
        return {"path": request.url.path}

    status, headers, body = call(app, "/mine")
    assert (status, body) == (200, b'{"path":"/mine"}'), body
    assert (b"x-mine", b"1") in headers
    assert len([v for k, v in headers if k == b"set-cookie"]) == 1
