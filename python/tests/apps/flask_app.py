"""A Flask app behind the WSGI middleware; run by gunicorn with 2 workers sharing a state file
(`VR_CONFIG`, `VR_STATE`)."""

import os
import pathlib
import time

from flask import Flask

from velvet_rope import Engine
from velvet_rope.wsgi import WaitingRoom

engine = Engine(pathlib.Path(os.environ["VR_CONFIG"]), shared_memory=os.environ["VR_STATE"])
flask_app = Flask(__name__)


@flask_app.get("/shop/<page>")
def shop(page: str) -> dict[str, object]:
    # A little work, so that a sync worker is busy while the other accepts.
    time.sleep(0.05)
    return {"origin": True, "page": page}


@flask_app.get("/health")
def health() -> dict[str, object]:
    return {"ok": True}


room = WaitingRoom(flask_app.wsgi_app, engine, rooms={"/shop/": "shop"}, bypass=["/health"])


def app(environ, start_response):  # type: ignore[no-untyped-def]
    """Adds `X-Worker-Pid` to every response, waiting pages included."""

    def start(status, headers, *exc):  # type: ignore[no-untyped-def]
        return start_response(status, [*headers, ("X-Worker-Pid", str(os.getpid()))], *exc)

    return room(environ, start)
