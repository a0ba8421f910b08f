"""Two engines as two hosts sharing one room through a real redis-server (Debian's, started
here on a free 127.0.0.1 port with persistence off): a `[cluster]` table starts the sync loop."""

from __future__ import annotations

import gc
import json
import logging
import threading
import time
from collections.abc import Iterator

import pytest

from velvet_rope import ClusterStatus, ConfigError, Coordinator, Engine

from .redis_server import RedisServer

LIMIT = 5


@pytest.fixture
def redis_port() -> Iterator[int]:
    server = RedisServer()
    try:
        yield server.port
    finally:
        server.kill()


def cluster_table(port: int, name: str) -> str:
    """The `[cluster]` table of host `name` syncing through the redis-server on `port`."""
    return f"""[cluster]
redis_url = "redis://127.0.0.1:{port}"
host_id = "{name}"
sync_interval_ms = 100
lease_ms = 600
timeout_ms = 200
"""


def host(port: int, name: str) -> Engine:
    return Engine(
        f"""
[settings]
bucket_width_secs = 1
[[tickets.keys]]
id = 1
secret = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY"
{cluster_table(port, name)}[[rooms]]
name = "shop"
total_active_users = {LIMIT}
new_users_per_minute = 1000
session_duration = 600
refresh_interval = 1
[rooms.cookie]
secure = false
"""
    )


def test_two_hosts_admit_exactly_the_room(redis_port: int) -> None:
    hosts = [host(redis_port, "py-a"), host(redis_port, "py-b")]
    time.sleep(2.4)  # a store that knows nobody learns first (2.1 s with these settings)
    admitted = 0
    waiters: list[tuple[Engine, str]] = []
    for i in range(20):
        e = hosts[i % 2]
        d = e.admit("shop", None)
        if d.admitted:
            admitted += 1
        else:
            assert d.outcome == "queue" and d.set_cookie is not None
            waiters.append((e, d.set_cookie.split(";", 1)[0]))
    deadline = time.monotonic() + 10
    while admitted < LIMIT and time.monotonic() < deadline:
        time.sleep(0.1)
        still = []
        for e, cookie in waiters:
            d = e.admit("shop", cookie)
            if d.admitted:
                admitted += 1
            else:
                still.append((e, d.set_cookie.split(";", 1)[0] if d.set_cookie else cookie))
        waiters = still
        assert admitted <= LIMIT
    time.sleep(0.5)
    for e, cookie in waiters:
        assert not e.admit("shop", cookie).admitted
    assert admitted == LIMIT
    for e in hosts:
        st = e.cluster_status()
        assert isinstance(st, ClusterStatus)
        assert st.syncs > 5 and st.failures == 0 and st.hosts == 2 and not st.in_outage
        assert "ClusterStatus(" in repr(st)


def test_without_a_cluster_table_there_is_no_sync_loop() -> None:
    e = Engine('[[rooms]]\nname = "r"\ntotal_active_users = 1\nnew_users_per_minute = 1\n')
    assert e.cluster_status() is None


def test_a_bad_store_url_is_a_configuration_error() -> None:
    with pytest.raises(ConfigError, match="cluster.redis_url"):
        Engine(
            '[cluster]\nredis_url = "http://x"\n'
            '[[rooms]]\nname = "r"\ntotal_active_users = 1\nnew_users_per_minute = 1\n'
        )


def lease_host(port: int, name: str) -> Coordinator:
    return Coordinator(
        f"""
{cluster_table(port, name)}[[resources]]
identifier_glob = "db"
capacity = 90
refresh_failure = "pessimistic"
algorithm = {{ kind = "fair_share", lease_length = 2, refresh_interval = 0.2 }}
"""
    )


def test_leases_are_shared_fairly_across_hosts(redis_port: int) -> None:
    """Each coordinator is a leaf under the Redis root: two clients on host A, one on host B
    converge to a third each, never holding more than the capacity together."""
    a, b = lease_host(redis_port, "py-a"), lease_host(redis_port, "py-b")
    clients = [(a, "a1"), (a, "a2"), (b, "b1")]
    held = {c: 0.0 for _, c in clients}
    deadline = time.monotonic() + 20
    fair_since = None
    while time.monotonic() < deadline:
        for coord, c in clients:
            held[c] = coord.request(c, "db", 100.0).capacity
            assert sum(held.values()) <= 90.0 + 1e-9, held
        fair = all(abs(v - 30.0) < 1e-6 for v in held.values())
        if fair and fair_since is None:
            fair_since = time.monotonic()
        if not fair:
            fair_since = None
        if fair_since is not None and time.monotonic() - fair_since > 1.0:
            break
        time.sleep(0.1)
    assert fair_since is not None, held


def test_a_leaf_coordinator_logs_learning_and_its_roots_outage(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A leaf's events reach the `velvet_rope.events` logger from its own thread: its learning
    after start, the Redis root's table learning (a new table), both ending, then the root
    killed: an outage, at WARNING."""
    caplog.set_level(logging.INFO, logger="velvet_rope.events")
    server = RedisServer()
    try:
        leaf = lease_host(server.port, "py-events")
        _leaf_events(leaf, server, caplog)
    finally:
        server.kill()


def _leaf_events(leaf: Coordinator, server: RedisServer, caplog: pytest.LogCaptureFixture) -> None:

    def seen() -> list[tuple[str, str | None, int]]:
        return [
            (r.velvet_rope_event["event"], r.velvet_rope_event["fields"].get("source"), r.levelno)
            for r in caplog.records
            if r.name == "velvet_rope.events"
        ]

    def wait_for(event: tuple[str, str | None, int]) -> None:
        deadline = time.monotonic() + 15
        while event not in seen() and time.monotonic() < deadline:
            leaf.request("c", "db", 10.0)
            time.sleep(0.1)
        assert event in seen(), seen()

    wait_for(("lease_learning_started", "coordinator", logging.INFO))
    wait_for(("lease_learning_started", "root", logging.INFO))
    wait_for(("lease_learning_ended", "root", logging.INFO))
    wait_for(("lease_learning_ended", "coordinator", logging.INFO))
    assert len(seen()) == 4, seen()
    line = next(r for r in caplog.records if r.name == "velvet_rope.events").getMessage()
    assert json.loads(line)["resource"] == "db"
    server.kill()
    wait_for(("lease_root_outage_began", None, logging.WARNING))


def test_a_coordinators_event_thread_ends_with_it() -> None:
    """The thread that logs a coordinator's events holds it weakly: it ends once the
    coordinator is collected; `log_events=False` starts none and leaves the events to
    `drain_events`."""
    config = """[[resources]]
identifier_glob = "db"
capacity = 9
algorithm = { kind = "fair_share", lease_length = 1, refresh_interval = 1 }
"""
    quiet = Coordinator(config, log_events=False)
    assert [e["event"] for e in quiet.drain_events()] == ["lease_learning_started"]
    assert quiet.events_dropped() == 0
    before = {t.ident for t in threading.enumerate() if t.name == "velvet-rope-events"}
    logged = Coordinator(config)
    thread = next(
        t for t in threading.enumerate() if t.name == "velvet-rope-events" and t.ident not in before
    )
    del logged
    gc.collect()
    thread.join(timeout=5)
    assert not thread.is_alive()
