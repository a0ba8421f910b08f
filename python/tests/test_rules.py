"""Rules, header tickets and dry runs through the ASGI middleware under real uvicorn
(tests/apps/rules.toml), and through the FastAPI dependency in process."""

from __future__ import annotations

import json
import pathlib
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from velvet_rope import Engine

from .servers import free_port
from .test_conformance import Served

RULES = pathlib.Path(__file__).parent / "apps" / "rules.toml"


def request(port: int, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], str]:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", path, headers=headers or {})
    r = conn.getresponse()
    body = r.read().decode()
    out = {k.lower(): v for k, v in r.getheaders()}
    conn.close()
    return r.status, out, body


@pytest.fixture(scope="module")
def uvicorn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    port = free_port()
    argv = [sys.executable, "-m", "uvicorn", "tests.apps.conformance_asgi:app",
            "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
    served = Served(argv, port, tmp_path_factory.mktemp("rules"), config=RULES)
    yield served
    served.stop()


def test_a_header_ticket_holds_a_place(uvicorn: Served) -> None:
    status, first, _ = request(uvicorn.port, "/cart")
    assert status == 200
    ticket = first["velvet-rope-ticket"]
    assert first["set-cookie"].startswith(f"__vr_app={ticket};")
    # Without cookies, the header alone keeps the seat, again and again.
    for _ in range(3):
        status, again, body = request(uvicorn.port, "/cart", {"Velvet-Rope-Ticket": ticket})
        assert (status, body) == (200, "origin\n")
        assert "set-cookie" not in again
    # Someone else waits; the JSON page carries the ticket to send back.
    status, waits, body = request(uvicorn.port, "/cart", {"Accept": "application/json"})
    assert status == 200 and json.loads(body)["outcome"] == "queue"
    theirs = json.loads(body)["ticket"]
    assert waits["velvet-rope-ticket"] == theirs
    status, _, body = request(uvicorn.port, "/cart",
                              {"Accept": "application/json", "Velvet-Rope-Ticket": theirs})
    page = json.loads(body)
    assert page["outcome"] == "queue" and page["ticket"], page
    assert page["position"] == 1
    # The seat holder is still in.
    assert request(uvicorn.port, "/cart", {"Velvet-Rope-Ticket": ticket})[0] == 200


def test_a_reject_rule_answers_problem_details(uvicorn: Served) -> None:
    status, headers, body = request(uvicorn.port, "/cart",
                                    {"User-Agent": "a bot", "Accept": "application/json"})
    assert status == 403
    assert headers["content-type"] == "application/problem+json"
    problem = json.loads(body)
    assert problem["status"] == 403 and problem["type"].endswith("refused-by-rule")
    status, _, body = request(uvicorn.port, "/health", {"User-Agent": "a bot"})
    assert status == 403, "rules apply in order: the bot rule comes first"
    status, headers, body = request(uvicorn.port, "/health")
    assert (status, body) == (200, "origin\n") and "set-cookie" not in headers


def test_a_dry_run_lets_everyone_through(uvicorn: Served) -> None:
    for _ in range(4):
        status, headers, body = request(uvicorn.port, "/trial/x")
        assert (status, body) == (200, "origin\n")
        assert headers["set-cookie"].startswith("__vr_trial=")


def call_asgi(app: Any, path: str, headers: list[tuple[bytes, bytes]]) -> tuple[int, list[tuple[bytes, bytes]]]:
    """One GET through an ASGI app in process: the status and headers it answered."""
    import asyncio

    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": path, "raw_path": path.encode(),
             "query_string": b"", "headers": headers, "client": ("198.51.100.1", 5000),
             "asgi": {"version": "3.0"}, "http_version": "1.1", "scheme": "http",
             "server": ("127.0.0.1", 80), "root_path": ""}
    asyncio.run(app(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    return start["status"], list(start.get("headers", []))


def test_fastapi_admission_and_decorator_apply_rules() -> None:
    from fastapi import Depends, FastAPI

    from velvet_rope.fastapi import Admission, install, waiting_room

    engine = Engine(RULES)
    api = FastAPI()
    install(api)

    @api.get("/dep", dependencies=[Depends(Admission(engine, "app", tick=False))])
    async def dep() -> dict[str, bool]:
        return {"origin": True}

    @api.get("/deco")
    @waiting_room(engine, "app", tick=False)
    async def deco() -> dict[str, bool]:
        return {"origin": True}

    bot = [(b"user-agent", b"a bot"), (b"accept", b"application/json")]
    for path in ("/dep", "/deco"):
        status, _ = call_asgi(api, path, bot)
        assert status == 403, path
    status, headers = call_asgi(api, "/dep", [])
    assert status == 200
    ticket = dict(headers)[b"velvet-rope-ticket"]
    status, headers = call_asgi(api, "/deco", [(b"velvet-rope-ticket", ticket)])
    assert status == 200 and b"set-cookie" not in dict(headers)
    # Someone else waits: the waiting page (it refreshes), not the endpoint.
    status, headers = call_asgi(api, "/deco", [])
    assert status == 200 and b"refresh" in dict(headers)
