"""Adversarial review of routes and rules: requests from an IPv6 link-local peer.

uvicorn puts `socket.getpeername()[0]` in `scope["client"]`, which for a link-local peer
carries its zone (`fe80::1%eth0`); `Engine.decide_request` refuses such a peer with
`ValueError`, so the middleware raises and every request from that client is a 500.
"""

from __future__ import annotations

import asyncio
import pathlib
from typing import Any

from velvet_rope import Engine
from velvet_rope.asgi import WaitingRoom

CONFIG = pathlib.Path(__file__).parents[2] / "conformance" / "front_doors.toml"
HOST = [(b"host", b"shop.example.com")]


def test_a_peer_with_a_zone_id_is_decided_not_refused() -> None:
    engine = Engine(CONFIG)
    for peer in ("fe80::1%eth0", "fe80::1%1"):
        placed = engine.decide_request("GET", "/cart", HOST, peer=peer)
        assert placed is not None
        room, decision = placed
        assert room == "shop"
        assert decision.outcome == "queue"


def test_the_asgi_middleware_answers_a_link_local_client() -> None:
    engine = Engine(CONFIG)
    reached: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        reached.append(scope["path"])

    sent: list[dict[str, Any]] = []

    async def send(message: Any) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    scope = {
        "type": "http",
        "method": "GET",
        "path": "/cart",
        "raw_path": b"/cart",
        "query_string": b"",
        "headers": HOST,
        "client": ("fe80::1%eth0", 51000),
    }
    asyncio.run(WaitingRoom(app, engine, tick=False)(scope, receive, send))
    assert sent and sent[0]["status"] == 503, "the shop queues everyone: a waiting page"
    assert reached == []
