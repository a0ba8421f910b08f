"""A minimal ASGI app, bare (`plain`) or behind the waiting room (`roomed`), for asgi_bench.py."""

import os

from velvet_rope import Engine
from velvet_rope.asgi import WaitingRoom

BODY = b"<p>origin</p>\n" * 8


async def plain(scope, receive, send):  # type: ignore[no-untyped-def]
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/html"), (b"content-length", str(len(BODY)).encode())]})
    await send({"type": "http.response.body", "body": BODY})


engine = Engine(os.environ.get("VR_BENCH_CONFIG", "[[rooms]]\nname = \"shop\"\ntotal_active_users = 1000000\n"
                "new_users_per_minute = 1000000\n[rooms.cookie]\nsecure = false\n"))
roomed = WaitingRoom(plain, engine, room="shop")
