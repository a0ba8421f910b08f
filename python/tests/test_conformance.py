"""The front-door conformance table (conformance/front_doors.{toml,json} at the repository's
root): every request must get the decision the table states, in process through
`Engine.decide_request`, and over HTTP through the ASGI middleware on FastAPI under real
uvicorn and the WSGI middleware on Flask under real gunicorn (raw requests: targets as
written, absolute form included; the client's address sent as `X-Forwarded-For` from
127.0.0.1, a trusted proxy)."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from velvet_rope import Engine

from .servers import free_port

ROOT = pathlib.Path(__file__).resolve().parents[2]
CONFIG = ROOT / "conformance" / "front_doors.toml"
CASES: list[dict[str, Any]] = json.loads((ROOT / "conformance" / "front_doors.json").read_text())[
    "cases"
]
NOW = 1_800_000_000_000


def verdict(placed: Any) -> tuple[str, str | None]:
    """A decision as the table names it."""
    if placed is None:
        return "unrouted", None
    room, d = placed
    if d.bypassed:
        return "bypass", room
    if d.would_have is not None:
        return "pass", room
    return d.outcome, room


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_in_process(case: dict[str, Any]) -> None:
    engine = Engine(CONFIG, now_ms=NOW)
    headers = [("host", case["host"]), *case["headers"], ("x-forwarded-for", case["client"])]
    placed = engine.decide_request(
        case["method"], case["target"], headers, peer="127.0.0.1", now_ms=NOW
    )
    assert verdict(placed) == (case["expect"], case["room"])


def raw_request(port: int, case: dict[str, Any]) -> tuple[int, dict[str, list[str]], bytes]:
    """Sends the row as written; the status, headers (lower-case names) and body."""
    lines = [f"{case['method']} {case['target']} HTTP/1.1", f"Host: {case['host']}"]
    lines += [f"{n}: {v}" for n, v in case["headers"]]
    lines += [f"X-Forwarded-For: {case['client']}", "Connection: close", "", ""]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall("\r\n".join(lines).encode("latin-1"))
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers: dict[str, list[str]] = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers.setdefault(name.strip().lower(), []).append(value.strip())
    return int(status_line.split()[1]), headers, body


def classify(case: dict[str, Any], status: int, headers: dict[str, list[str]], body: bytes) -> str:
    """A response as the table names it (see front_doors.toml's header)."""
    ours = any(c.startswith("__vr_") for c in headers.get("set-cookie", []))
    if status == 503:
        return "queue"
    if status == 403:
        return "reject"
    assert status == 200, (status, body[:200])
    if case["method"] != "HEAD":
        assert body == b"origin\n", body[:200]
    if not ours:
        return "bypass-or-unrouted"
    return "admit" if case["expect"] != "pass" else "pass"


def expected_over_http(case: dict[str, Any]) -> str:
    """What HTTP shows of the expected decision: a bypass and an unrouted request both pass
    untouched; an admission and a dry run's pass both reach the origin with a new ticket."""
    return "bypass-or-unrouted" if case["expect"] in ("bypass", "unrouted") else case["expect"]


class Served:
    """A real server command serving one of the conformance apps."""

    def __init__(
        self, argv: list[str], port: int, tmp: pathlib.Path, config: pathlib.Path = CONFIG
    ) -> None:
        self.port = port
        env = dict(os.environ, VR_CONFIG=str(config),
                   PYTHONPATH=str(pathlib.Path(__file__).parents[1]))
        self.log = tmp / f"server-{port}.log"
        self._out = open(self.log, "w")
        self.proc = subprocess.Popen(
            argv, cwd=pathlib.Path(__file__).parents[1], env=env, stdout=self._out,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(self.log.read_text())
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"no answer on {port}: {self.log.read_text()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._out.close()


@pytest.fixture(scope="module", params=["uvicorn-fastapi-asgi", "gunicorn-flask-wsgi"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    port = free_port()
    if request.param.startswith("uvicorn"):
        argv = [sys.executable, "-m", "uvicorn", "tests.apps.conformance_asgi:app",
                "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
    else:
        argv = [sys.executable, "-m", "gunicorn", "--workers", "1", "--bind",
                f"127.0.0.1:{port}", "--log-level", "warning", "tests.apps.conformance_wsgi:app"]
    served = Served(argv, port, tmp_path_factory.mktemp("conformance"))
    yield served
    served.stop()


def test_over_http(server: Served) -> None:
    failures = []
    for case in CASES:
        status, headers, body = raw_request(server.port, case)
        got = classify(case, status, headers, body)
        if got != expected_over_http(case):
            failures.append(f"{case['name']}: {case['method']} {case['target']} (host "
                            f"{case['host']}): expected {case['expect']}, got {got} ({status})")
    assert not failures, "\n".join(failures)
