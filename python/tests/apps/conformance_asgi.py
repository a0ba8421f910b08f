"""The front-door conformance table's ASGI app: a FastAPI application behind
`velvet_rope.asgi.WaitingRoom` with no room named (the configuration's routes place requests).
Every path answers `origin`. Run by uvicorn (`VR_CONFIG`: the table's configuration)."""

import os
import pathlib

from fastapi import FastAPI
from fastapi.responses import PlainTextResponse

from velvet_rope import Engine
from velvet_rope.asgi import WaitingRoom

engine = Engine(pathlib.Path(os.environ["VR_CONFIG"]))
api = FastAPI()


@api.api_route("/{path:path}", methods=["GET", "HEAD", "POST"])
async def origin(path: str) -> PlainTextResponse:
    return PlainTextResponse("origin\n", headers={"X-Worker-Pid": str(os.getpid())})


app = WaitingRoom(api, engine)
