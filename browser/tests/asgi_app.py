"""The Python front door of the browser tests: a bare ASGI app behind velvet-rope's ASGI
middleware (`velvet_rope.asgi.WaitingRoom`), run by uvicorn (see harness.Uvicorn).

Environment: `VR_CONFIG` the engine's TOML, `VR_STATE` its state file (shared by uvicorn's
workers), `VR_ROOMS` a JSON object of path prefix -> room. Every path under a room answers the
same origin page (harness.ORIGIN_HTML, never cached); `/health`, `/favicon.ico` (an empty 204,
so that a browser's icon requests do not count as visits) and `/vr-status` (the engine's
stats_json(), as nginx's `velvet_rope_status`) are never decided."""

import json
import os
import pathlib

from velvet_rope import Engine
from velvet_rope.asgi import WaitingRoom

from harness import ORIGIN_HTML

engine = Engine(pathlib.Path(os.environ["VR_CONFIG"]), shared_memory=os.environ["VR_STATE"])


async def origin(scope, receive, send):  # type: ignore[no-untyped-def]
    if scope["type"] != "http":
        return
    if scope["path"] == "/vr-status":
        body, kind = engine.stats_json().encode(), b"application/json"
    elif scope["path"] == "/favicon.ico":
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        return
    elif scope["path"] == "/health":
        body, kind = b"ok\n", b"text/plain"
    else:
        body, kind = ORIGIN_HTML.encode(), b"text/html; charset=utf-8"
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", kind), (b"cache-control", b"no-store")]})
    await send({"type": "http.response.body", "body": body})


app = WaitingRoom(origin, engine, rooms=json.loads(os.environ["VR_ROOMS"]),
                  bypass=["/health", "/vr-status", "/favicon.ico"])
