"""Attacks on origin commands in the ASGI middleware and FastAPI's forms, from an adversarial review: each test
failed before its fix."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import Depends, FastAPI, HTTPException

import velvet_rope
from velvet_rope import Engine
from velvet_rope.asgi import WaitingRoom as AsgiRoom
from velvet_rope.fastapi import Admission, install, waiting_room

from .test_fastapi_setup import call


CONFIG = (
    '[[rooms]]\nname = "r"\ntotal_active_users = 10\nnew_users_per_minute = 100000\n'
    'enabled_origin_commands = ["revoke"]\n[rooms.cookie]\nsecure = false\n'
)


def run(app: Any, headers: list[tuple[bytes, bytes]]) -> list[dict[str, Any]]:
    """One GET / through an ASGI app in process: every message it sent."""
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
        "scheme": "http", "path": "/", "raw_path": b"/", "query_string": b"",
        "root_path": "", "headers": headers, "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80), "extensions": {"http.response.trailers": {}},
    }
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    return sent


def names(headers: Any) -> list[bytes]:
    return [n.encode() if isinstance(n, str) else bytes(n) for n, _ in headers]


def test_asgi_str_header_names_are_still_commands() -> None:
    """An app that names the header with a str (h11-based servers such as uvicorn's h11
    implementation encode str names and send them): the middleware compares the name with
    bytes only, so the command goes out and nothing is revoked."""
    e = Engine(CONFIG)
    held = e.admit("r", None, velvet_rope.now_ms()).ticket

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [("Velvet-Rope-Command", "revoke")]})
        await send({"type": "http.response.body", "body": b"origin"})

    sent = run(AsgiRoom(app, e, room="r", tick=False), [(b"cookie", f"__vr_r={held}".encode())])
    start = sent[0]
    assert b"velvet-rope-command" not in [n.lower() for n in names(start["headers"])], \
        f"the command reached the client: {start['headers']}"
    assert e.revoke("r", held) == "already_revoked", "the session was not revoked"


def test_asgi_a_str_header_value_does_not_let_the_command_through() -> None:
    """`(b"velvet-rope-command", "revoke")`: `split_asgi` calls `bytes()` on the str value,
    which raises; `admitted_start` falls back to `_strip_commands`, which raises the same way
    and then returns the message unchanged (fail open): the command goes out."""
    e = Engine(CONFIG)
    held = e.admit("r", None, velvet_rope.now_ms()).ticket

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"velvet-rope-command", "revoke")]})
        await send({"type": "http.response.body", "body": b"origin"})

    sent = run(AsgiRoom(app, e, room="r", tick=False), [(b"cookie", f"__vr_r={held}".encode())])
    assert b"velvet-rope-command" not in names(sent[0]["headers"]), \
        f"the command reached the client: {sent[0]['headers']}"


def test_asgi_bytearray_header_names_are_commands_too() -> None:
    """A bytearray name (unhashable: a set lookup would raise) is compared all the same."""
    e = Engine(CONFIG)
    held = e.admit("r", None, velvet_rope.now_ms()).ticket

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(bytearray(b"Velvet-Rope-Command"), b"revoke")]})
        await send({"type": "http.response.body", "body": b"origin"})

    sent = run(AsgiRoom(app, e, room="r", tick=False), [(b"cookie", f"__vr_r={held}".encode())])
    assert b"velvet-rope-command" not in [n.lower() for n in names(sent[0]["headers"])]
    assert e.revoke("r", held) == "already_revoked"


def test_asgi_a_cookie_header_named_in_capitals_is_revoked_too() -> None:
    """A request whose `Cookie` header's name is not lower case (a server or an inner
    middleware that keeps the case): the ticket is read from it, so the command must revoke
    that ticket too. Before, admission read it but the revocation looked for `b"cookie"`
    only: the command was removed and the session kept."""
    e = Engine(CONFIG)
    for name in (b"Cookie", b"COOKIE", "cookie"):
        held = e.admit("r", None, velvet_rope.now_ms()).ticket

        async def app(scope: Any, receive: Any, send: Any) -> None:
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"velvet-rope-command", b"revoke")]})
            await send({"type": "http.response.body", "body": b"origin"})

        value: Any = f"__vr_r={held}" if isinstance(name, str) else f"__vr_r={held}".encode()
        sent = run(AsgiRoom(app, e, room="r", tick=False), [(name, value)])
        cleared = [v for n, v in sent[0]["headers"] if bytes(n).lower() == b"set-cookie"]
        assert cleared and b"Max-Age=0" in cleared[0], (name, sent[0]["headers"])
        assert e.revoke("r", held) == "already_revoked", f"{name!r}: not revoked"


def test_request_header_names_in_any_case_are_revoked_in_every_front_door() -> None:
    """The engine reads request headers in any case, so the revocation must find the ticket
    as admission did: the `Cookie` header and, in a room taking header tickets,
    `Velvet-Rope-Ticket`, through the ASGI middleware and FastAPI's `waiting_room` alike.
    Before, both looked for lower-case names only: the command was removed and the session
    kept."""
    config = CONFIG.replace("[rooms.cookie]", "ticket_header = true\n[rooms.cookie]")

    async def origin(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"velvet-rope-command", b"revoke")]})
        await send({"type": "http.response.body", "body": b"origin"})

    for name, prefix in ((b"Velvet-Rope-Ticket", ""), (b"Cookie", "__vr_r=")):
        e = Engine(config)
        held = e.admit("r", None, velvet_rope.now_ms()).ticket
        sent = run(AsgiRoom(origin, e, room="r", tick=False), [(name, f"{prefix}{held}".encode())])
        assert sent[0]["status"] == 200
        assert e.revoke("r", held) == "already_revoked", f"ASGI, {name!r}: not revoked"

        e = Engine(config)
        app = FastAPI()

        @app.get("/logout")
        @waiting_room(e, "r", tick=False)
        async def logout() -> None:
            raise HTTPException(status_code=403, detail="banned",
                                headers={"Velvet-Rope-Command": "revoke"})

        held = e.admit("r", None, velvet_rope.now_ms()).ticket
        status, _, _ = call(app, "/logout", [(name, f"{prefix}{held}".encode())])
        assert status == 403
        assert e.revoke("r", held) == "already_revoked", f"FastAPI, {name!r}: not revoked"


def test_a_scope_without_headers_is_decided_in_a_room_with_rules() -> None:
    """A scope with no `headers` (a hand-made one: ASGI servers always give them) is a
    request without headers in every room, not a `KeyError` in rooms with rules."""
    config = CONFIG.replace(
        "[rooms.cookie]",
        '[[rooms.rules]]\nname = "health"\naction = "bypass"\npaths = ["/health"]\n'
        "[rooms.cookie]",
    )
    e = Engine(config)

    async def origin(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"origin"})

    scope = {"type": "http", "method": "GET", "path": "/", "raw_path": b"/",
             "query_string": b"", "client": ("127.0.0.1", 1)}
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    asyncio.run(AsgiRoom(origin, e, room="r", tick=False)(scope, receive, send))
    assert sent[0]["status"] == 200
    assert any(bytes(n).lower() == b"set-cookie" for n, _ in sent[0]["headers"])


def test_headers_given_as_a_one_shot_iterable_are_read_by_every_call() -> None:
    """ASGI allows any iterable of headers: a room with rules reads them after the first
    call (which reads only `Cookie` lines and finds the room reads more) has looked; a
    one-shot iterator must not be used up by then. A bypass rule on a header, in a full
    room: the monitor passes, through the middleware and FastAPI's dependency alike."""
    from velvet_rope.fastapi import _decide

    config = (
        '[[rooms]]\nname = "r"\ntotal_active_users = 1\nnew_users_per_minute = 1000\n'
        '[[rooms.rules]]\nname = "monitor"\naction = "bypass"\n'
        'headers = { "X-Monitor-Token" = "s3cret" }\n[rooms.cookie]\nsecure = false\n'
    )
    e = Engine(config)
    e.admit("r", None)  # the one seat

    def scope(headers: Any) -> dict[str, Any]:
        return {"type": "http", "method": "GET", "path": "/", "raw_path": b"/",
                "query_string": b"", "headers": headers, "client": ("1.2.3.4", 1)}

    monitor = [(b"host", b"x"), (b"x-monitor-token", b"s3cret")]

    class Request:
        def __init__(self, headers: Any) -> None:
            self.scope = scope(headers)

    for headers in (list(monitor), iter(monitor), (h for h in monitor)):
        assert _decide(e, "r", Request(headers))[0].bypassed  # type: ignore[arg-type]
    for headers in (list(monitor), iter(monitor)):
        seen: list[Any] = []

        async def app(scope: Any, receive: Any, send: Any) -> None:
            seen.append(scope)
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"origin"})

        room = AsgiRoom(app, e, room="r", tick=False)
        sent: list[dict[str, Any]] = []

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        asyncio.run(room(scope(headers), receive, send))
        assert sent[0]["status"] == 200 and seen, "the monitor was queued"
        assert list(seen[0]["headers"]) == monitor, "the app reads the headers too"


def trailing(headers: list[tuple[Any, Any]]) -> Any:
    """An ASGI app answering 200 with `headers` as its HTTP trailers (the
    `http.response.trailers` extension)."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "trailers": True,
                    "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"origin"})
        await send({"type": "http.response.trailers", "more_trailers": False,
                    "headers": headers})

    return app


def trailers_of(sent: list[dict[str, Any]]) -> list[bytes]:
    """The lower-case names of every trailer the client got (there must be some)."""
    trailers = [m for m in sent if m["type"] == "http.response.trailers"]
    assert trailers, f"the trailers were lost: {sent}"
    return [n.lower() for m in trailers for n in names(m["headers"])]


def test_asgi_command_in_trailers_never_reaches_the_client() -> None:
    """ASGI's `http.response.trailers` extension: the trailers were not looked at, so the
    command went out and the session went on. The headers are gone by then (the cookie
    cannot be cleared), but the ticket is revoked all the same."""
    e = Engine(CONFIG)
    held = e.admit("r", None, velvet_rope.now_ms()).ticket
    app = trailing([(b"velvet-rope-command", b"revoke"), (b"x-check", b"1")])
    sent = run(AsgiRoom(app, e, room="r", tick=False), [(b"cookie", f"__vr_r={held}".encode())])
    assert trailers_of(sent) == [b"x-check"], f"the command went out as a trailer: {sent}"
    assert e.revoke("r", held) == "already_revoked", "the session was not revoked"


def test_asgi_str_command_in_trailers_of_an_undecided_path_is_removed() -> None:
    """A bypassed path (no room decides it): a trailer command does nothing, but is removed
    all the same, whatever the case and type of its name."""
    e = Engine(CONFIG)
    app = trailing([("Velvet-Rope-Command", "revoke")])
    sent = run(AsgiRoom(app, e, room="r", bypass=["/"], tick=False), [])
    assert trailers_of(sent) == [], f"the command went out as a trailer: {sent}"


def test_asgi_nested_rooms_both_follow_a_trailer_command() -> None:
    """Two middleware, each admitting the request in its own room: the inner one removes the
    trailer command and leaves it in the scope, and the outer one revokes its room too."""
    config = CONFIG + CONFIG.replace('name = "r"', 'name = "s"')
    e = Engine(config)
    now = velvet_rope.now_ms()
    r, s = e.admit("r", None, now).ticket, e.admit("s", None, now).ticket
    app = trailing([(b"Velvet-Rope-Command", b"revoke")])
    inner = AsgiRoom(app, e, room="r", tick=False)
    outer = AsgiRoom(inner, e, room="s", tick=False)
    sent = run(outer, [(b"cookie", f"__vr_r={r}; __vr_s={s}".encode())])
    assert trailers_of(sent) == []
    assert e.revoke("r", r) == "already_revoked", "the inner room's session goes on"
    assert e.revoke("s", s) == "already_revoked", "the outer room's session goes on"


def test_fastapi_install_follows_a_trailer_command() -> None:
    """`install`'s middleware, for an `Admission` route whose response gets its trailers from
    an ASGI middleware inside the app's: the command is removed and the session revoked."""
    e = Engine(CONFIG)
    app = FastAPI()

    class Trailing:
        """Sends the command as a trailer after the endpoint's response."""

        def __init__(self, inner: Any) -> None:
            self.inner = inner

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] != "http":
                await self.inner(scope, receive, send)
                return

            async def send_trailing(message: Any) -> None:
                if message["type"] == "http.response.start":
                    message = {**message, "trailers": True}
                    await send(message)
                    return
                if message["type"] == "http.response.body" and not message.get("more_body"):
                    await send(message)
                    await send({"type": "http.response.trailers", "more_trailers": False,
                                "headers": [(b"velvet-rope-command", b"revoke")]})
                    return
                await send(message)

            await self.inner(scope, receive, send_trailing)

    app.add_middleware(Trailing)  # inside install's middleware (added after it: outside)
    install(app)

    @app.get("/", dependencies=[Depends(Admission(e, "r", tick=False))])
    async def page() -> dict[str, str]:
        return {"ok": "yes"}

    held = e.admit("r", None, velvet_rope.now_ms()).ticket
    sent = run(app, [(b"cookie", f"__vr_r={held}".encode())])
    assert sent[0]["status"] == 200, sent
    assert trailers_of(sent) == [], f"the command went out as a trailer: {sent}"
    assert e.revoke("r", held) == "already_revoked", "the session was not revoked"


def test_fastapi_waiting_room_strips_the_command_from_an_http_exception() -> None:
    """An endpoint under `waiting_room` that ends the session and answers with an error
    (`HTTPException(headers=...)`, FastAPI's documented way to set headers on an error):
    the decorator carried out commands only on a returned response, so the header reached
    the client and the session went on. Now it is removed, the session revoked and its
    cookie cleared, the exception's other headers kept."""
    e = Engine(CONFIG)
    app = FastAPI()

    @app.get("/logout")
    @waiting_room(e, "r", tick=False)
    async def logout() -> dict[str, str]:
        raise HTTPException(status_code=403, detail="banned",
                            headers={"Velvet-Rope-Command": "revoke", "X-Why": "banned"})

    held = e.admit("r", None, velvet_rope.now_ms()).ticket
    status, headers, body = call(app, "/logout", [(b"cookie", f"__vr_r={held}".encode())])
    assert status == 403 and b"banned" in body
    low = [(n.lower(), v) for n, v in headers]
    assert b"velvet-rope-command" not in [n for n, _ in low], \
        f"the command reached the client: {headers}"
    assert (b"x-why", b"banned") in low
    assert e.revoke("r", held) == "already_revoked", "the session was not revoked"
    cookies = [v.decode() for n, v in low if n == b"set-cookie"]
    assert len(cookies) == 1 and cookies[0].startswith("__vr_r=;") \
        and "max-age=0" in cookies[0].lower(), f"the cookie is not cleared: {cookies}"


def test_fastapi_waiting_room_strips_other_commands_from_an_http_exception() -> None:
    """A command that is not `revoke` (or any command of a bypassed request) is removed from
    the exception's headers and the session goes on."""
    e = Engine(CONFIG)
    app = FastAPI()

    @app.get("/oops")
    @waiting_room(e, "r", tick=False)
    async def oops() -> dict[str, str]:
        raise HTTPException(status_code=409, headers={"velvet-rope-command": "later"})

    held = e.admit("r", None, velvet_rope.now_ms()).ticket
    status, headers, _ = call(app, "/oops", [(b"cookie", f"__vr_r={held}".encode())])
    assert status == 409
    assert b"velvet-rope-command" not in [n.lower() for n, _ in headers], headers
    assert e.revoke("r", held) == "revoked", "the session was revoked"


def test_fastapi_install_is_outermost_whatever_the_order() -> None:
    """`install` before an `@app.middleware("http")` that answers with the command: the
    command is still removed and followed (`install`'s middleware wraps the whole stack, not
    only what was added before it)."""
    e = Engine(CONFIG)
    app = FastAPI()
    install(app)

    @app.middleware("http")
    async def logout(request: Any, call_next: Any) -> Any:
        response = await call_next(request)
        response.headers["Velvet-Rope-Command"] = "revoke"
        return response

    @app.get("/", dependencies=[Depends(Admission(e, "r", tick=False))])
    async def page() -> dict[str, str]:
        return {"ok": "yes"}

    held = e.admit("r", None, velvet_rope.now_ms()).ticket
    sent = run(app, [(b"cookie", f"__vr_r={held}".encode())])
    assert b"velvet-rope-command" not in [n.lower() for n in names(sent[0]["headers"])], sent[0]
    assert e.revoke("r", held) == "already_revoked", "the session was not revoked"


def test_fastapi_install_strips_the_command_from_a_server_error_page() -> None:
    """A 500 handler (Starlette's ServerErrorMiddleware, outside every added middleware)
    answering with the command: removed, and the admitted session revoked."""
    from starlette.responses import PlainTextResponse

    e = Engine(CONFIG)

    async def on_error(request: Any, exc: Exception) -> Any:
        return PlainTextResponse("gone", 500, headers={"Velvet-Rope-Command": "revoke"})

    app = FastAPI(exception_handlers={Exception: on_error})
    install(app)

    @app.get("/", dependencies=[Depends(Admission(e, "r", tick=False))])
    async def page() -> dict[str, str]:
        raise RuntimeError("boom")

    held = e.admit("r", None, velvet_rope.now_ms()).ticket
    sent: list[dict[str, Any]] = []
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
        "scheme": "http", "path": "/", "raw_path": b"/", "query_string": b"",
        "root_path": "", "headers": [(b"cookie", f"__vr_r={held}".encode())],
        "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80),
    }

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    try:
        asyncio.run(app(scope, receive, send))
    except RuntimeError:
        pass  # ServerErrorMiddleware re-raises after answering, for the server to log
    assert sent and sent[0]["status"] == 500, sent
    assert b"velvet-rope-command" not in [n.lower() for n in names(sent[0]["headers"])], sent[0]
    assert e.revoke("r", held) == "already_revoked", "the session was not revoked"


def websocket(app: Any, reply: dict[str, Any]) -> list[dict[str, Any]]:
    """A WebSocket handshake through `app`, whose inner application answers with `reply`
    (`websocket.accept`, or a denial's `websocket.http.response.start`): what went out."""
    scope = {
        "type": "websocket", "asgi": {"version": "3.0"}, "http_version": "1.1",
        "scheme": "ws", "path": "/", "raw_path": b"/", "query_string": b"", "root_path": "",
        "headers": [], "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80),
        "subprotocols": [], "extensions": {"websocket.http.response": {}},
    }
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "websocket.connect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    return sent


def ws_app(reply: dict[str, Any]) -> Any:
    async def inner(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send(reply)

    return inner


def test_a_websocket_handshake_never_carries_the_command() -> None:
    """The command in a WebSocket handshake's headers (an accept, or a denial response) is
    removed by the ASGI middleware and by `install`'s, as from any response."""
    e = Engine(CONFIG)
    replies = [
        {"type": "websocket.accept", "headers": [(b"velvet-rope-command", b"revoke")]},
        {"type": "websocket.http.response.start", "status": 403,
         "headers": [(b"Velvet-Rope-Command", b"revoke"), (b"content-length", b"0")]},
    ]
    for reply in replies:
        sent = websocket(AsgiRoom(ws_app(reply), e, room="r", tick=False), reply)
        assert b"velvet-rope-command" not in [n.lower() for n in names(sent[0]["headers"])], \
            f"the ASGI middleware let it through: {sent}"
        app = FastAPI()
        install(app)
        app.mount("/", ws_app(reply))
        sent = websocket(app, reply)
        assert b"velvet-rope-command" not in [n.lower() for n in names(sent[0]["headers"])], \
            f"install's middleware let it through: {sent}"
