"""The FastAPI dependency and decorator, on a real uvicorn server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .http_client import Jar, get, raw_get
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


def test_a_route_answering_with_a_response_keeps_the_ticket(server: Server) -> None:
    """Endpoints that return a `Response` (HTML, a redirect): the ticket's `Set-Cookie` still
    reaches the visitor, so a room of 3 admits exactly 3 distinct visitors however many
    requests each makes, and nobody else."""
    visitors = [Jar() for _ in range(3)]
    for round_ in range(3):
        for i, jar in enumerate(visitors):
            for path in ("/pages/html", "/pages/redirect"):
                r = get(server.port, path, jar)
                ok = r.status == 200 and 'id="origin"' in r.body if path == "/pages/html" \
                    else r.status == 303
                assert ok, f"visitor {i}, round {round_}, {path}: {r.status} {r.body[:80]}"
                assert "__vr_pages" in jar.cookies, f"{path}: no ticket set"
    r = get(server.port, "/pages/html", Jar())
    assert r.status == 200 and r.waiting, "a fourth visitor got in"
    assert len(r.all("Set-Cookie")) == 1, "one ticket, not two"
    first = get(server.port, "/dep", Jar())
    assert len(first.all("Set-Cookie")) <= 1, "a dict endpoint's ticket is set once"


@pytest.mark.parametrize("path, room", [("/split/dep", "split_dep"), ("/split/deco", "split_deco")])
def test_every_cookie_line_is_read(server: Server, path: str, room: str) -> None:
    jar = Jar()
    assert get(server.port, path, jar).admitted
    ticket = jar.cookies[f"__vr_{room}"]
    for lines in ([("Cookie", "a=1"), ("Cookie", f"__vr_{room}={ticket}")],
                  [("Cookie", f"__vr_{room}={ticket}"), ("Cookie", "b=2")]):
        r = raw_get(server.port, path, lines)
        assert r.admitted, f"{path} {lines}: the ticket in a second line was not read ({r.status})"
    assert not get(server.port, path, Jar()).admitted, "the room holds one"
