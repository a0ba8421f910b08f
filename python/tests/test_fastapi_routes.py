"""The FastAPI dependency and decorator, on a real uvicorn server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .http_client import Jar, get
from .servers import Server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = Server("uvicorn", tmp_path_factory.mktemp("routes") / "rooms.state")
    try:
        yield s
    finally:
        s.stop()


@pytest.mark.parametrize("path, room", [("/dep", "dep"), ("/deco", "deco")])
def test_one_route_in_a_room(server: Server, path: str, room: str) -> None:
    jars = [Jar() for _ in range(3)]
    for jar in jars:
        r = get(server.port, path, jar)
        assert r.admitted, f"{path}: a visitor under the limit of 3 waits: {r.status} {r.body[:80]}"
        assert f"__vr_{room}" in jar.cookies, f"{path}: no ticket set"
    r = get(server.port, path, Jar(), {"Accept": "application/json"})
    assert not r.admitted and r.waiting, f"{path}: a fourth visitor got in"
    assert r.header("Cache-Control") == "no-store" and r.header("Refresh") == "20"
    assert r.all("Set-Cookie"), f"{path}: the waiter gets a ticket"
    for jar in jars:
        again = get(server.port, path, jar)
        assert again.admitted, f"{path}: an admitted visitor refused with its ticket"
    assert get(server.port, "/health").status == 200
