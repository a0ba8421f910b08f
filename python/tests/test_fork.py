"""A pre-fork server (gunicorn `--preload`) builds the engine, ticks it from a thread, and
forks workers whenever: each child must tick, reload, sync and end as if it had built the
engine itself. Before, a child forked mid-tick inherited the engine's tick lock held by a
thread that does not exist there (its ticks did nothing, `reload()` deadlocked: 28 of 30
children), and an engine with a `[cluster]` table panicked in the child on `reload()` and
when it was dropped."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from velvet_rope import Engine

from .redis_server import RedisServer

def config(port: int, per_minute: int, host: str = "fork") -> str:
    return f"""
[cluster]
redis_url = "redis://127.0.0.1:{port}"
host_id = "{host}"
sync_interval_ms = 50
lease_ms = 600
timeout_ms = 100
[[rooms]]
name = "r"
total_active_users = 1000
new_users_per_minute = {per_minute}
[rooms.cookie]
secure = false
"""


@pytest.fixture
def redis_port() -> Iterator[int]:
    server = RedisServer()
    try:
        yield server.port
    finally:
        server.kill()


def child(engine: Engine, port: int) -> int:
    """What each child does; its exit status says which step failed (an alarm ends a child
    that hangs)."""
    signal.alarm(20)
    # The ticker's tick starts a sync loop in this process (the parent's thread is not here):
    # its figures move.
    engine.tick()
    before = engine.cluster_status()
    deadline = time.monotonic() + 10
    while True:
        time.sleep(0.1)
        engine.tick()
        now = engine.cluster_status()
        if now is not None and before is not None and now.syncs != before.syncs:
            break
        if time.monotonic() > deadline:
            return 2
    # A reload that changes the cluster table stops the parent's sync loop (never joined
    # here: its thread is the parent's) and starts one in this process.
    engine.reload(config(port, 7, host="fork-child"))
    engine.tick()
    deadline = time.monotonic() + 10
    while True:
        status = engine.cluster_status()
        if status is not None and status.syncs > 0:
            break
        if time.monotonic() > deadline:
            return 3
        time.sleep(0.05)
        engine.tick()
    del engine
    return 0


def test_children_forked_mid_tick_tick_reload_and_sync(redis_port: int) -> None:
    # Counters in the engine's own memory: each child has a copy (a child's reload with
    # another configuration would otherwise take the shared room over from the parent, see
    # "One configuration per room" in the README).
    engine = Engine(config(redis_port, 5))
    stop = threading.Event()

    def tick_hard() -> None:
        while not stop.is_set():
            engine.tick()

    ticker = threading.Thread(target=tick_hard, daemon=True)
    ticker.start()
    failed = []
    try:
        for i in range(12):
            time.sleep(0.003 + 0.0007 * i)
            pid = os.fork()
            if pid == 0:
                code = 9
                try:
                    code = child(engine, redis_port)
                finally:
                    os._exit(code)
            _, status = os.waitpid(pid, 0)
            if not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
                failed.append((i, status))
    finally:
        stop.set()
        ticker.join()
    assert not failed, f"children that failed (index, wait status): {failed}"
    # The parent's engine and sync loop go on.
    engine.tick()
    status = engine.cluster_status()
    assert status is not None and status.syncs > 0


def test_a_coordinators_event_thread_runs_again_in_a_forked_child() -> None:
    """A coordinator made before the fork (gunicorn `--preload`) logs its events from each
    worker: its event thread starts again in the child (threads do not survive a fork)."""
    from velvet_rope import Coordinator

    coordinator = Coordinator(
        "[[resources]]\nidentifier_glob = \"db\"\ncapacity = 9\n"
        "algorithm = { kind = \"fair_share\", lease_length = 1, refresh_interval = 1 }\n"
    )
    pid = os.fork()
    if pid == 0:
        alive = any(t.name == "velvet-rope-events" and t.is_alive() for t in threading.enumerate())
        os._exit(0 if alive and coordinator is not None else 3)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
