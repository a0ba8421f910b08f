"""The front-door conformance table's WSGI app: a Flask application behind
`velvet_rope.wsgi.WaitingRoom` with no room named (the configuration's routes place requests).
Every path answers `origin`. Run by gunicorn (`VR_CONFIG`: the table's configuration)."""

import os
import pathlib

from flask import Flask

from velvet_rope import Engine
from velvet_rope.wsgi import WaitingRoom

engine = Engine(pathlib.Path(os.environ["VR_CONFIG"]))
flask_app = Flask(__name__, static_folder=None)  # every path is the origin's


@flask_app.route("/", defaults={"path": ""}, methods=["GET", "HEAD", "POST"])
@flask_app.route("/<path:path>", methods=["GET", "HEAD", "POST"])
def origin(path: str) -> tuple[str, int, dict[str, str]]:
    return "origin\n", 200, {"X-Worker-Pid": str(os.getpid())}


flask_app.wsgi_app = WaitingRoom(flask_app.wsgi_app, engine)  # type: ignore[method-assign]
app = flask_app
