"""The WSGI middleware reads `PATH_INFO` as bytes (PEP 3333), in process."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from velvet_rope import Engine
from velvet_rope.wsgi import WaitingRoom

ROOMS = (
    '[[rooms]]\nname = "vault"\ntotal_active_users = 100\nnew_users_per_minute = 1000\n'
    "[rooms.cookie]\nsecure = false\n"
)


def call(room: WaitingRoom, path: str) -> list[tuple[str, str]]:
    got: list[tuple[str, str]] = []

    def start_response(status: str, headers: list[tuple[str, str]], *exc: Any) -> None:
        got.extend(headers)

    body: Iterable[bytes] = room({"PATH_INFO": path, "REQUEST_METHOD": "GET"}, start_response)
    list(body)
    return got


def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"in"]


def test_path_info_is_read_as_bytes_and_never_cut_short() -> None:
    room = WaitingRoom(app, Engine(ROOMS), rooms={"/vault": "vault"}, bypass=["/static/"],
                       tick=False)
    decided = lambda path: any(k == "Set-Cookie" for k, _ in call(room, path))  # noqa: E731
    assert not decided("/static/app.css")
    assert decided("/static/../vault.html")
    # UTF-8 bytes of `/caf\u00e9/..`, one per character, as a PEP 3333 server hands them over.
    assert decided("/static/caf\u00c3\u00a9/../../vault.html")
    # A server that put a character above U+00FF in PATH_INFO: read as UTF-8, not replaced by
    # `?` (which would end the path at `/static/`).
    assert decided("/static/\u017f/../../vault.html")
