"""A FastAPI app for test_revoke.py behind the ASGI middleware (rooms of `revoke.toml`), run by
uvicorn with 2 workers sharing a state file (`VR_CONFIG`, `VR_STATE`).

`/<room>/page` is an ordinary page; `/<room>/logout` answers with `Velvet-Rope-Command`
(the origin ends the visitor's session). `/health` (and under it) bypasses the middleware,
`/free/` is in no room; `/dep/` and `/deco/` decide their own rooms (`velvet_rope.fastapi`)."""

import os
import pathlib

from fastapi import Depends, FastAPI, Response
from fastapi.responses import JSONResponse, PlainTextResponse

from velvet_rope import Engine
from velvet_rope.asgi import WaitingRoom
from velvet_rope.fastapi import Admission, install, waiting_room

engine = Engine(pathlib.Path(os.environ["VR_CONFIG"]), shared_memory=os.environ["VR_STATE"])
api = FastAPI()
install(api)

#: Several commands, `revoke` among them, in another case: as an origin may send it.
COMMAND = "x-later, Revoke"


@api.get("/health")
async def health() -> dict[str, object]:
    return {"ok": True}


@api.get("/health/stats")
async def stats() -> PlainTextResponse:
    return PlainTextResponse(engine.stats_json())


@api.get("/health/cmd")
async def health_cmd() -> JSONResponse:
    return JSONResponse({"ok": True}, headers={"Velvet-Rope-Command": COMMAND})


@api.get("/free/cmd")
async def free_cmd() -> JSONResponse:
    return JSONResponse({"ok": True}, headers={"Velvet-Rope-Command": COMMAND})


@api.get("/dep/page", dependencies=[Depends(Admission(engine, "dep_rv"))])
async def dep_page() -> dict[str, object]:
    return {"origin": True}


@api.get("/dep/logout", dependencies=[Depends(Admission(engine, "dep_rv"))])
async def dep_logout() -> JSONResponse:
    return JSONResponse({"origin": True, "logout": True}, headers={"Velvet-Rope-Command": COMMAND})


@api.get("/deco/page")
@waiting_room(engine, "deco_rv")
async def deco_page() -> dict[str, object]:
    return {"origin": True}


@api.get("/deco/logout")
@waiting_room(engine, "deco_rv")
async def deco_logout(response: Response) -> dict[str, object]:
    # On FastAPI's response for the endpoint (the one it returns a dict through).
    response.headers["Velvet-Rope-Command"] = COMMAND
    return {"origin": True, "logout": True}


@api.get("/{room}/page")
async def page(room: str) -> dict[str, object]:
    return {"origin": True, "room": room}


@api.get("/{room}/logout")
async def logout(room: str) -> JSONResponse:
    return JSONResponse({"origin": True, "logout": True}, headers={"Velvet-Rope-Command": COMMAND})


@api.get("/{room}/public/logout")
async def public_logout(room: str) -> JSONResponse:
    return JSONResponse({"origin": True, "logout": True}, headers={"Velvet-Rope-Command": COMMAND})


def _with_worker_pid(inner):  # type: ignore[no-untyped-def]
    """Adds `X-Worker-Pid` to every response, waiting pages included."""

    async def app(scope, receive, send):  # type: ignore[no-untyped-def]
        async def send_pid(message):  # type: ignore[no-untyped-def]
            if message["type"] == "http.response.start":
                message = dict(message)
                message["headers"] = [*message.get("headers", ()),
                                      (b"x-worker-pid", str(os.getpid()).encode())]
            await send(message)

        await inner(scope, receive, send_pid if scope["type"] == "http" else send)

    return app


app = _with_worker_pid(
    WaitingRoom(api, engine, rooms={"/rv/": "rv", "/plain/": "plain", "/hdr/": "hdr",
                                    "/rvb/": "rvb"}, bypass=["/health"])
)
