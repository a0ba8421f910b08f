"""Origin commands through real servers: FastAPI under uvicorn and Flask under gunicorn, two
worker processes each sharing one state file (tests/apps/revoke.toml, revoke_asgi.py,
revoke_wsgi.py). An app route answering `Velvet-Rope-Command: revoke` ends the visitor's
session: the header never reaches the client, the response clears the ticket cookie, the seat
is freed (exactly one), and the old ticket is refused by every worker."""

from __future__ import annotations

import concurrent.futures
import json
import pathlib
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from .http_client import Jar, Response, get
from .servers import Server

CONFIG = pathlib.Path(__file__).parent / "apps" / "revoke.toml"
SEATS = 3  # total_active_users of every room in revoke.toml
#: A revocation frees the seat at once, by a tick the revoking call runs, unless another
#: process is ticking the room at that moment: then its tick (once a second) does. Counting
#: waits past that.
SETTLE = 1.5


@pytest.fixture(scope="module", params=["uvicorn", "gunicorn"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    kind = request.param
    app = "revoke_asgi" if kind == "uvicorn" else "revoke_wsgi"
    s = Server(kind, tmp_path_factory.mktemp(f"revoke-{kind}") / "rooms.state", CONFIG, app)
    try:
        yield s
    finally:
        s.stop()


def no_command(r: Response) -> bool:
    return not [k for k, _ in r.headers if k.lower() == "velvet-rope-command"]


def cookies_of(r: Response, room: str) -> list[str]:
    return [c for c in r.all("Set-Cookie") if c.startswith(f"__vr_{room}=")]


def clears(r: Response, room: str) -> bool:
    """The response's only Set-Cookie of the room's ticket clears it."""
    mine = cookies_of(r, room)
    return (
        len(mine) == 1
        and mine[0].startswith(f"__vr_{room}=;")
        and re.search(r";\s*Max-Age=0\s*(;|$)", mine[0], re.IGNORECASE) is not None
    )


def stats(port: int) -> dict[str, Any]:
    rooms: dict[str, Any] = json.loads(get(port, "/health/stats").body)["rooms"]
    return rooms


def fill(port: int, path: str, n: int) -> list[Jar]:
    """`n` new visitors, each admitted."""
    jars = []
    for i in range(n):
        jar = Jar()
        r = get(port, path, jar)
        assert r.admitted, f"visitor {i + 1} of {n} not admitted: {r.status}"
        jars.append(jar)
    return jars


def new_until_queued(port: int, path: str, headers: dict[str, str] | None = None) -> int:
    """New visitors (no ticket) admitted before the first one that waits."""
    n = 0
    while True:
        r = get(port, path, Jar(), headers)
        if not r.admitted:
            assert r.waiting, f"neither admitted nor waiting: {r.status} {r.body[:200]}"
            return n
        n += 1
        assert n < 20, "never queued"


def refused_by_both_workers(port: int, path: str, jar_or_headers: Jar | dict[str, str],
                            ticket: str, room: str) -> int:
    """Presents a revoked ticket until both workers have answered it (a few at once, so that
    both take some); each must be a new arrival that waits (the room is full) with a new
    ticket. How many requests were made."""
    def once(_: int) -> Response:
        if isinstance(jar_or_headers, Jar):
            return get(port, path, Jar(dict(jar_or_headers.cookies)))
        return get(port, path, None, jar_or_headers)

    pids: set[str | None] = set()
    made = 0
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        for _ in range(8):
            for r in pool.map(once, range(6)):
                made += 1
                pids.add(r.header("X-Worker-Pid"))
                assert not r.admitted and r.waiting, f"a revoked ticket got in: {r.status}"
                fresh = r.header("Velvet-Rope-Ticket") or next(
                    (c.split(";", 1)[0].split("=", 1)[1] for c in cookies_of(r, room)), None)
                assert fresh and fresh != ticket, "no new ticket for a revoked one"
            if len(pids) >= 2:
                return made
    raise AssertionError(f"one worker answered every request: {pids}")


def revoke_scenario(port: int, prefix: str, room: str) -> None:
    """The room (3 seats) full; one visitor logs out; exactly one seat frees."""
    visitors = fill(port, f"{prefix}/page", SEATS)
    leaving = visitors[0]
    old = leaving.cookies[f"__vr_{room}"]
    r = get(port, f"{prefix}/logout", leaving)
    assert r.admitted and json.loads(r.body)["logout"], "the logout page is served"
    assert no_command(r), "the command reached the client"
    assert clears(r, room), f"the ticket cookie is not cleared: {r.all('Set-Cookie')}"
    assert f"__vr_{room}" not in leaving.cookies
    time.sleep(SETTLE)
    assert new_until_queued(port, f"{prefix}/page") == 1, "not exactly the one seat freed"
    # The old ticket: refused by both workers (reason `revoked`), its holder arrives anew.
    made = refused_by_both_workers(port, f"{prefix}/page", Jar({f"__vr_{room}": old}), old, room)
    # The others' sessions go on.
    for jar in visitors[1:]:
        assert get(port, f"{prefix}/page", jar).admitted
    st = stats(port)[room]
    assert st["revocations"]["made"] == 1
    assert st["ticket_rejections"]["revoked"] == made


def test_a_revoke_command_ends_the_session_and_frees_exactly_its_seat(server: Server) -> None:
    revoke_scenario(server.port, "/rv", "rv")


# FastAPI's own forms run under uvicorn only (the gunicorn app is Flask's).
@pytest.mark.parametrize("server", ["uvicorn"], indirect=True)
def test_the_fastapi_dependency_and_decorator_revoke_too(server: Server) -> None:
    revoke_scenario(server.port, "/dep", "dep_rv")
    revoke_scenario(server.port, "/deco", "deco_rv")


def test_a_room_without_origin_commands_only_loses_the_header(server: Server) -> None:
    port = server.port
    visitors = fill(port, "/plain/page", SEATS)
    ticket = visitors[0].cookies["__vr_plain"]
    r = get(port, "/plain/logout", visitors[0])
    assert r.admitted and no_command(r)
    assert cookies_of(r, "plain") == [], "a cookie was cleared or set"
    assert visitors[0].cookies["__vr_plain"] == ticket
    time.sleep(SETTLE)
    assert new_until_queued(port, "/plain/page") == 0, "a seat was freed"
    # The session goes on.
    for _ in range(6):
        assert get(port, "/plain/page", Jar(dict(visitors[0].cookies))).admitted
    st = stats(port)["plain"]
    assert st["revocations"] is None and st["ticket_rejections"]["revoked"] == 0


def test_a_header_ticket_client_is_revoked_the_same_way(server: Server) -> None:
    port = server.port

    def hget(path: str, ticket: str | None = None) -> Response:
        return get(port, path, None, {"Velvet-Rope-Ticket": ticket} if ticket else None)

    # A first request that is a logout: the ticket its own decision issued is revoked, and
    # neither header hands it out.
    r = hget("/hdr/logout")
    assert r.admitted and no_command(r)
    assert r.header("Velvet-Rope-Ticket") is None, "the revoked ticket was handed out"
    assert clears(r, "hdr"), r.all("Set-Cookie")
    time.sleep(SETTLE)
    # Its seat is free again: three new clients fill the room.
    tickets = []
    for _ in range(SEATS):
        r = hget("/hdr/page")
        assert r.admitted, "the revoked first visitor still holds a seat"
        t = r.header("Velvet-Rope-Ticket")
        assert t
        tickets.append(t)
    for t in tickets:
        assert hget("/hdr/page", t).admitted
    r = hget("/hdr/logout", tickets[0])
    assert r.admitted and no_command(r) and r.header("Velvet-Rope-Ticket") is None
    assert clears(r, "hdr")
    time.sleep(SETTLE)
    assert new_until_queued(port, "/hdr/page") == 1, "not exactly the one seat freed"
    made = refused_by_both_workers(port, "/hdr/page", {"Velvet-Rope-Ticket": tickets[0]},
                                   tickets[0], "hdr")
    for t in tickets[1:]:
        assert hget("/hdr/page", t).admitted
    st = stats(port)["hdr"]
    assert st["revocations"]["made"] == 2
    assert st["ticket_rejections"]["revoked"] == made


def test_a_bypassed_request_revokes_nothing(server: Server) -> None:
    """A request a `bypass` rule lets pass is not the room's: its command is removed and the
    session goes on."""
    port = server.port
    visitors = fill(port, "/rvb/page", SEATS - 1)
    r = get(port, "/rvb/public/logout", visitors[0])
    assert r.status == 200 and json.loads(r.body)["logout"] and no_command(r)
    assert cookies_of(r, "rvb") == []
    time.sleep(SETTLE)
    assert get(port, "/rvb/page", visitors[0]).admitted
    assert new_until_queued(port, "/rvb/page") == 1, "the last seat, and no other"
    st = stats(port)["rvb"]
    assert st["revocations"]["made"] == 0 and st["ticket_rejections"]["revoked"] == 0


@pytest.mark.parametrize("path", ["/health/cmd", "/free/cmd"])
def test_commands_are_removed_from_undecided_responses(server: Server, path: str) -> None:
    """Under a bypass prefix of the middleware, or in no room: the header is removed all the
    same."""
    for _ in range(4):  # both workers, most likely
        r = get(server.port, path)
        assert r.status == 200 and json.loads(r.body) == {"ok": True}
        assert no_command(r) and r.all("Set-Cookie") == []
