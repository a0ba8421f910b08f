"""Attacks on origin commands in the ASGI middleware, from an adversarial review: each test
failed before its fix."""

from __future__ import annotations

import asyncio
from typing import Any

import velvet_rope
from velvet_rope import Engine
from velvet_rope.asgi import WaitingRoom as AsgiRoom


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
