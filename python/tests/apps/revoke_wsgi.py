"""A Flask app for test_revoke.py behind the WSGI middleware (rooms of `revoke.toml`), run by
gunicorn with 2 workers sharing a state file (`VR_CONFIG`, `VR_STATE`); the routes of
`revoke_asgi.py` but `/dep/` and `/deco/`."""

import os
import pathlib

from flask import Flask

from velvet_rope import Engine
from velvet_rope.wsgi import WaitingRoom

engine = Engine(pathlib.Path(os.environ["VR_CONFIG"]), shared_memory=os.environ["VR_STATE"])
flask_app = Flask(__name__, static_folder=None)

#: Several commands, `revoke` among them, in another case, under a lower-case name.
COMMAND = {"velvet-rope-command": "x-later, Revoke"}


@flask_app.get("/health")
def health() -> dict[str, object]:
    return {"ok": True}


@flask_app.get("/health/stats")
def stats():  # type: ignore[no-untyped-def]
    return engine.stats_json(), 200, {"Content-Type": "application/json"}


@flask_app.get("/health/cmd")
@flask_app.get("/free/cmd")
def cmd():  # type: ignore[no-untyped-def]
    return {"ok": True}, 200, COMMAND


@flask_app.get("/<room>/page")
def page(room: str) -> dict[str, object]:
    return {"origin": True, "room": room}


@flask_app.get("/<room>/logout")
@flask_app.get("/<room>/public/logout")
def logout(room: str):  # type: ignore[no-untyped-def]
    return {"origin": True, "logout": True}, 200, COMMAND


room = WaitingRoom(flask_app.wsgi_app, engine,
                   rooms={"/rv/": "rv", "/plain/": "plain", "/hdr/": "hdr", "/rvb/": "rvb"},
                   bypass=["/health"])


def app(environ, start_response):  # type: ignore[no-untyped-def]
    """Adds `X-Worker-Pid` to every response, waiting pages included."""

    def start(status, headers, *exc):  # type: ignore[no-untyped-def]
        return start_response(status, [*headers, ("X-Worker-Pid", str(os.getpid()))], *exc)

    return room(environ, start)
