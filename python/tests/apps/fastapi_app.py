"""A FastAPI app behind the ASGI middleware, with dependency routes and decorated routes;
run by uvicorn with 2 workers sharing a state file (`VR_CONFIG`, `VR_STATE`).

The middleware puts `/shop/` in room `shop` and `/vault` in room `vault`, and lets `/health`
and `/static/` pass; the files of `public/` are served at the root by Starlette's
`StaticFiles` (which resolves `..` in what it is given). Routes under `/dep`, `/deco`,
`/pages` and `/split` decide their own rooms (`velvet_rope.fastapi`)."""

import asyncio
import os
import pathlib

from fastapi import Depends, FastAPI
from fastapi.responses import HTMLResponse, RedirectResponse
from starlette.routing import Route
from starlette.staticfiles import StaticFiles

from velvet_rope import Engine
from velvet_rope.asgi import WaitingRoom
from velvet_rope.fastapi import Admission, install, waiting_room
from velvet_rope.prometheus import asgi_app

engine = Engine(pathlib.Path(os.environ["VR_CONFIG"]), shared_memory=os.environ["VR_STATE"])
api = FastAPI()
install(api)
api.router.routes.append(Route("/metrics", asgi_app(engine)))


@api.get("/shop/{page}")
async def shop(page: str) -> dict[str, object]:
    await asyncio.sleep(0.05)  # a little work, as an origin does
    return {"origin": True, "page": page}


@api.get("/health")
async def health() -> dict[str, object]:
    return {"ok": True}


@api.get("/dep", dependencies=[Depends(Admission(engine, "dep"))])
async def dep() -> dict[str, object]:
    return {"origin": True, "route": "dep"}


@api.get("/deco")
@waiting_room(engine, "deco")
async def deco() -> dict[str, object]:
    return {"origin": True, "route": "deco"}


pages = Admission(engine, "pages")


@api.get("/pages/html", dependencies=[Depends(pages)], response_class=HTMLResponse)
async def pages_html() -> HTMLResponse:
    return HTMLResponse('<p id="origin">a page</p>')


@api.get("/pages/redirect", dependencies=[Depends(pages)])
async def pages_redirect() -> RedirectResponse:
    return RedirectResponse("/health", status_code=303)


@api.get("/split/dep", dependencies=[Depends(Admission(engine, "split_dep"))])
async def split_dep() -> dict[str, object]:
    return {"origin": True, "route": "split_dep"}


@api.get("/split/deco")
@waiting_room(engine, "split_deco")
async def split_deco() -> dict[str, object]:
    return {"origin": True, "route": "split_deco"}


api.mount("/", StaticFiles(directory=pathlib.Path(__file__).parent / "public"))


def _with_worker_pid(inner):  # type: ignore[no-untyped-def]
    """Adds `X-Worker-Pid` to every response, waiting pages included."""

    async def app(scope, receive, send):  # type: ignore[no-untyped-def]
        async def send_pid(message):  # type: ignore[no-untyped-def]
            if message["type"] == "http.response.start":
                message = dict(message)
                message["headers"] = [*message.get("headers", ()), (b"x-worker-pid", str(os.getpid()).encode())]
            await send(message)

        await inner(scope, receive, send_pid if scope["type"] == "http" else send)

    return app


app = _with_worker_pid(
    WaitingRoom(api, engine, rooms={"/shop/": "shop", "/vault": "vault"},
                bypass=["/health", "/static/"])
)
