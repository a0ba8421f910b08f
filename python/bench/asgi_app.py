"""A minimal ASGI app, bare (`plain`) or behind the waiting room (`roomed`), for asgi_bench.py,
and the in-process drivers of asgi_overhead.py and asgi_instructions.py (`visitors`)."""

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


def scope(cookie: bytes | None) -> dict[str, object]:
    """A GET / with a browser's few headers, and `cookie` among its cookies."""
    headers = [(b"host", b"example.com"), (b"user-agent", b"bench"), (b"accept", b"*/*")]
    if cookie is not None:
        headers.append((b"cookie", b"_ga=GA1.2.3; " + cookie + b"; theme=dark"))
    return {"type": "http", "path": "/", "method": "GET", "headers": headers}


async def visitors(n: int):  # type: ignore[no-untyped-def]
    """`n` visitors admitted through `roomed`: each one's scope (its ticket among its
    cookies), and the `receive` and `send` that drive an app in process (`send` keeps the
    last request's messages in `send.sent`)."""
    sent: list[object] = []

    async def send(message: object) -> None:
        sent.append(message)

    async def receive() -> dict[str, object]:
        return {"type": "http.request", "body": b"", "more_body": False}

    send.sent = sent  # type: ignore[attr-defined]
    cookies = []
    for _ in range(n):
        sent.clear()
        await roomed(scope(None), receive, send)
        value = dict(sent[0]["headers"])[b"set-cookie"]  # type: ignore[index]
        cookies.append(value.split(b";", 1)[0])
    return [scope(c) for c in cookies], receive, send
