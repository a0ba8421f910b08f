"""The engine's metrics from Python: the OpenMetrics text, the `prometheus_client` collector,
and the ASGI and WSGI metrics routes, in process (the servers are in test_servers.py)."""

from __future__ import annotations

import asyncio
import wsgiref.util
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as parse_openmetrics,
)
from prometheus_client.parser import text_string_to_metric_families as parse_text

from velvet_rope import Engine
from velvet_rope.prometheus import CONTENT_TYPE, EngineCollector, asgi_app, register, wsgi_app

T0 = 1_800_000_000_000

CONFIG = """
[[rooms]]
name = "shop"
total_active_users = 2
new_users_per_minute = 1000
session_duration = 1
[rooms.cookie]
secure = false

[[rooms]]
name = "vip"
total_active_users = 5
new_users_per_minute = 5
[rooms.cookie]
secure = false
[[rooms.rules]]
name = "say \\"hi\\""
action = "bypass"
paths = ["/x"]
"""


def samples(families: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in families for s in f.samples}


def key(name: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return name, tuple(sorted(labels.items()))


def crowd(engine: Engine) -> tuple[int, int]:
    """Six visitors to a room of two, then the four waiters come back every 30 s for four
    minutes (sessions last one minute): how many were let in from the queue, and how many
    queue decisions there were."""
    cookies = []
    queued = 0
    for _ in range(6):
        d = engine.admit("shop", None, now_ms=T0)
        if d.outcome == "queue":
            queued += 1
            assert d.set_cookie is not None
            cookies.append(d.set_cookie.split(";", 1)[0])
    let_in = 0
    now = T0
    for _ in range(8):
        now += 30_000
        engine.tick(now)
        still = []
        for c in cookies:
            d = engine.admit("shop", c, now_ms=now)
            if d.outcome == "admit":
                let_in += 1
                continue
            queued += 1
            still.append(d.set_cookie.split(";", 1)[0] if d.set_cookie else c)
        cookies = still
    return let_in, queued


def test_the_text_parses_and_agrees_with_the_crowd() -> None:
    engine = Engine(CONFIG)
    let_in, queued = crowd(engine)
    assert let_in >= 2
    text = engine.metrics_text()
    assert text.endswith("# EOF\n")
    m = samples(parse_openmetrics(text))
    # The text parses as Prometheus' older text format too, every sample kept (that format
    # knows no `_total` suffix on a counter's family: it sees those samples as untyped).
    assert samples(parse_text(text.removesuffix("# EOF\n"))) == m
    shop = {"room": "shop"}
    assert m[key("velvet_rope_room_admissions_total", **shop, kind="new")] == 2
    assert m[key("velvet_rope_room_admissions_total", **shop, kind="queue")] == let_in
    assert m[key("velvet_rope_room_decisions_total", **shop, outcome="queue")] == queued
    # One wait sample per waiter let in; each had been promised a wait.
    assert m[key("velvet_rope_room_wait_seconds_count", **shop)] == let_in
    assert m[key("velvet_rope_room_wait_seconds_bucket", **shop, le="+Inf")] == let_in
    assert m[key("velvet_rope_room_wait_seconds_sum", **shop)] >= 30 * let_in
    assert m[key("velvet_rope_room_wait_error_seconds_bucket", **shop, le="+Inf")] == let_in
    # A quote in a rule's name is escaped in the text and comes back whole.
    assert m[key("velvet_rope_rule_matches_total", room="vip", rule='say "hi"', action="bypass")] == 0


def test_the_structured_metrics_are_the_text() -> None:
    engine = Engine(CONFIG)
    crowd(engine)
    from_text = samples(parse_openmetrics(engine.metrics_text()))
    structured = {}
    for name, kind, help_text, family in engine.metrics():
        assert name.startswith("velvet_rope_") and kind in ("gauge", "counter", "histogram")
        assert help_text
        for sample_name, labels, value in family:
            assert labels[0][0] == "room"
            structured[(sample_name, tuple(sorted(labels)))] = value
    # The OpenMetrics parser names a counter's samples `_total` and keeps the rest.
    assert structured == from_text


def test_the_collector_in_a_registry_beside_the_process_metrics() -> None:
    engine = Engine(CONFIG)
    let_in, _ = crowd(engine)
    registry = CollectorRegistry()
    collector = register(engine, registry)
    assert isinstance(collector, EngineCollector)
    for text in (generate_latest(registry).decode(),):
        m = samples(parse_text(text))
        assert m[key("velvet_rope_room_admissions_total", room="shop", kind="queue")] == let_in
        assert m[key("velvet_rope_room_wait_seconds_count", room="shop")] == let_in
    m = samples(parse_openmetrics(generate_openmetrics(registry).decode()))
    assert m[key("velvet_rope_room_active_users_limit", room="shop")] == 2
    # Read afresh at each scrape.
    engine.admit("shop", None, now_ms=T0 + 400_000)
    m2 = samples(parse_text(generate_latest(registry).decode()))
    assert m2[key("velvet_rope_room_admissions_total", room="shop", kind="new")] == 3
    registry.unregister(collector)
    assert b"velvet_rope" not in generate_latest(registry)


def call_asgi(app: Any, method: str = "GET",
              headers: list[tuple[bytes, bytes]] | None = None) -> tuple[int, dict[str, str],
                                                                        bytes]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": method, "path": "/metrics", "headers": headers or []}
    asyncio.run(app(scope, receive, send))
    start, body = sent[0], sent[1]
    return (start["status"], {k.decode(): v.decode() for k, v in start["headers"]},
            body["body"])


def test_the_asgi_route() -> None:
    engine = Engine(CONFIG)
    crowd(engine)
    status, headers, body = call_asgi(asgi_app(engine))
    assert status == 200 and headers["content-type"] == CONTENT_TYPE
    assert headers["cache-control"] == "no-store" and int(headers["content-length"]) == len(body)
    assert samples(parse_openmetrics(body.decode())) == \
        samples(parse_openmetrics(engine.metrics_text()))
    status, _, body = call_asgi(asgi_app(engine), "HEAD")
    assert status == 200 and body == b""
    status, headers, _ = call_asgi(asgi_app(engine), "POST")
    assert status == 405 and headers["allow"] == "GET, HEAD"
    # With a registry: its format follows the scraper's Accept.
    registry = CollectorRegistry()
    register(engine, registry)
    status, headers, body = call_asgi(
        asgi_app(engine, registry),
        headers=[(b"accept", b"application/openmetrics-text; version=1.0.0")])
    assert headers["content-type"].startswith("application/openmetrics-text")
    assert key("velvet_rope_room_active_users", room="shop") in \
        samples(parse_openmetrics(body.decode()))
    status, headers, body = call_asgi(asgi_app(engine, registry))
    assert headers["content-type"].startswith("text/plain")
    assert key("velvet_rope_room_active_users", room="shop") in samples(parse_text(body.decode()))


def test_the_wsgi_route() -> None:
    engine = Engine(CONFIG)
    crowd(engine)
    got: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]]) -> None:
        got["status"], got["headers"] = status, dict(headers)

    environ: dict[str, Any] = {}
    wsgiref.util.setup_testing_defaults(environ)
    body = b"".join(wsgi_app(engine)(environ, start_response))
    assert got["status"] == "200 OK" and got["headers"]["Content-Type"] == CONTENT_TYPE
    assert samples(parse_openmetrics(body.decode())) == \
        samples(parse_openmetrics(engine.metrics_text()))
    environ["REQUEST_METHOD"] = "DELETE"
    assert b"".join(wsgi_app(engine)(environ, start_response)) == b""
    assert got["status"].startswith("405")


def test_a_coordinators_resources() -> None:
    from velvet_rope import Coordinator, now_ms

    # The system clock's time: the collector reads the coordinator at the time of a scrape.
    t = now_ms()
    coordinator = Coordinator(
        '[[resources]]\nidentifier_glob = "api"\ncapacity = 100\n'
        'algorithm = { kind = "fair_share", lease_length = 60, refresh_interval = 1 }\n',
        now_ms=t)
    coordinator.request("a", "api", 30.0, now_ms=t)
    coordinator.request("b", "api", 90.0, now_ms=t)
    m = samples(parse_openmetrics(coordinator.metrics_text(now_ms=t)))
    api = {"resource": "api"}
    assert m[key("velvet_rope_lease_capacity", **api)] == 100
    assert m[key("velvet_rope_lease_clients", **api)] == 2
    assert m[key("velvet_rope_lease_wanted", **api)] == 120
    assert m[key("velvet_rope_lease_refusals_total", **api)] == 0
    registry = CollectorRegistry()
    register(coordinator, registry)
    m = samples(parse_text(generate_latest(registry).decode()))
    assert m[key("velvet_rope_lease_clients", **api)] == 2


def test_events_go_to_the_logger(caplog: Any) -> None:
    import logging

    from velvet_rope._ticker import log_events

    engine = Engine(CONFIG, now_ms=T0)
    for _ in range(4):
        engine.admit("shop", None, now_ms=T0)
    engine.tick(T0 + 1_000)
    with caplog.at_level(logging.INFO, logger="velvet_rope.events"):
        log_events(engine)
    records = [r for r in caplog.records if r.name == "velvet_rope.events"]
    assert [r.velvet_rope_event["event"] for r in records] == ["queueing_started"]
    assert records[0].levelno == logging.INFO
    assert records[0].getMessage().startswith('{"event":"queueing_started"')
    assert records[0].velvet_rope_event["fields"] == {"queue_length": "2"}
    # A refused reload (longer sessions than the counters hold) is a warning.
    try:
        engine.reload(CONFIG.replace("session_duration = 1", "session_duration = 100"))
    except ValueError:
        pass
    else:
        raise AssertionError("the reload should have been refused")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="velvet_rope.events"):
        log_events(engine)
    assert [(r.velvet_rope_event["event"], r.levelno) for r in caplog.records] == \
        [("config_refused", logging.WARNING)]
    assert engine.events_dropped() == 0


def test_a_raising_log_filter_does_not_stop_the_ticker() -> None:
    import logging
    import time

    from velvet_rope._ticker import EVENTS, ThreadTicker

    class Boom(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            raise RuntimeError("a broken filter")

    engine = Engine(CONFIG)
    for _ in range(4):
        engine.admit("shop", None)
    boom = Boom()
    EVENTS.addFilter(boom)
    ticker = ThreadTicker(engine, interval=0.02)
    try:
        ticker.start()
        time.sleep(0.3)
        assert ticker.running, "the ticker thread died"
    finally:
        ticker.stop()
        EVENTS.removeFilter(boom)
