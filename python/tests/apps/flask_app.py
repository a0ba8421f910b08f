"""A Flask app behind the WSGI middleware; run by gunicorn with 2 workers sharing a state file
(`VR_CONFIG`, `VR_STATE`). The middleware puts `/shop/` in room `shop` and `/vault` in room
`vault`, and lets `/health` and `/static/` pass; the files of `public/` are served at the root
(`send_from_directory`, which resolves `..` in what it is given). `/metrics` serves the
engine's metrics and the app's own through `prometheus_client`'s multiprocess mode."""

import os
import pathlib
import time

from flask import Flask, send_from_directory
from prometheus_client import CollectorRegistry, Counter, multiprocess

from velvet_rope import Engine
from velvet_rope.prometheus import register, wsgi_app
from velvet_rope.wsgi import WaitingRoom

engine = Engine(pathlib.Path(os.environ["VR_CONFIG"]), shared_memory=os.environ["VR_STATE"])
flask_app = Flask(__name__, static_folder=None)
PUBLIC = pathlib.Path(__file__).parent / "public"

# prometheus_client's multiprocess mode (PROMETHEUS_MULTIPROC_DIR): each worker's own metrics
# summed from files; the engine's figures are the host's already, read by whichever answers.
SHOP_PAGES = Counter("app_shop_pages", "Shop pages the origin served")
registry = CollectorRegistry()
multiprocess.MultiProcessCollector(registry)
register(engine, registry)
metrics = wsgi_app(engine, registry)


@flask_app.get("/shop/<page>")
def shop(page: str) -> dict[str, object]:
    # A little work, so that a sync worker is busy while the other accepts.
    time.sleep(0.05)
    SHOP_PAGES.inc()
    return {"origin": True, "page": page}


@flask_app.get("/health")
def health() -> dict[str, object]:
    return {"ok": True}


@flask_app.get("/<path:name>")
def public(name: str):  # type: ignore[no-untyped-def]
    return send_from_directory(PUBLIC, name)


room = WaitingRoom(flask_app.wsgi_app, engine, rooms={"/shop/": "shop", "/vault": "vault"},
                   bypass=["/health", "/static/"])


def app(environ, start_response):  # type: ignore[no-untyped-def]
    """Adds `X-Worker-Pid` to every response, waiting pages included."""

    def start(status, headers, *exc):  # type: ignore[no-untyped-def]
        return start_response(status, [*headers, ("X-Worker-Pid", str(os.getpid()))], *exc)

    if environ.get("PATH_INFO") == "/metrics":
        return metrics(environ, start)
    return room(environ, start)
