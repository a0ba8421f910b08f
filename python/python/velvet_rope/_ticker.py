"""Driving `Engine.tick()` about once a second, on a daemon thread or on an asyncio loop, and
writing the engine's events to the `velvet_rope.events` logger after each tick."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import weakref

from ._velvet_rope import Coordinator, Engine

__all__ = ["ThreadTicker", "LoopTicker", "EventPump", "EVENTS", "log_events"]

#: The logger the tickers write the engine's events to: a room's queue starting and stopping,
#: a scheduled event's phases, a reload, the cluster store lost or found; and a coordinator's
#: (`EventPump`): a learning period started or ended, a leaf's lease root lost or found. One
#: JSON line each, at INFO (WARNING for a refusal or an outage), the event as a dict in the
#: record's `velvet_rope_event`.
EVENTS = logging.getLogger("velvet_rope.events")


def log_events(source: Engine | Coordinator) -> None:
    """Writes the events `source` (an engine or a coordinator) logged since the last call to
    `EVENTS`."""
    for event in source.drain_events():
        EVENTS.log(logging.WARNING if event["warning"] else logging.INFO, "%s", event["line"],
                   extra={"velvet_rope_event": event})


_FAILED = logging.getLogger("velvet_rope")


def _tick(engine: Engine, failed: list[bool]) -> None:
    """One tick and its events: an error (a logging filter or handler that raises) is logged
    once per ticker, and ticking goes on (a ticker that stopped would leave the room's
    figures where they were)."""
    try:
        engine.tick()
        log_events(engine)
    except Exception:
        if not failed[0]:
            failed[0] = True
            _FAILED.exception("velvet-rope: a tick failed; ticking goes on")

#: Seconds between ticks (the engine expects about one a second).
INTERVAL = 1.0


class ThreadTicker:
    """Ticks an engine every `interval` seconds on a daemon thread until `stop()`.

    `engine.tick()` never waits and releases the GIL, so the thread costs a few microseconds a
    second. One ticker per engine is enough; a second is harmless (ticks never wait for each
    other).
    """

    def __init__(self, engine: Engine, interval: float = INTERVAL) -> None:
        self._engine = engine
        self._interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        _TICKERS.add(self)

    def _after_fork(self) -> None:
        # A forked child (a pre-fork server's worker) has no threads but the one that forked:
        # a ticker that was running starts again there.
        was_running = self._thread is not None and not self._stop.is_set()
        self._lock = threading.Lock()
        self._thread = None
        if was_running:
            self.start()

    def start(self) -> None:
        """Starts ticking (idempotent)."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._run, name="velvet-rope-ticker", daemon=True
            )
            self._thread.start()

    def _run(self) -> None:
        failed = [False]
        while not self._stop.wait(self._interval):
            _tick(self._engine, failed)

    def stop(self) -> None:
        """Stops ticking and waits for the thread to end."""
        with self._lock:
            self._stop.set()
            thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    @property
    def running(self) -> bool:
        """Whether the thread runs."""
        return self._thread is not None and self._thread.is_alive()


_TICKERS: weakref.WeakSet[ThreadTicker] = weakref.WeakSet()


class EventPump:
    """Writes a coordinator's events to `EVENTS` every `interval` seconds on a daemon thread,
    until the coordinator is collected or `stop()`. The thread holds the coordinator weakly
    (it ends within an interval of the coordinator's collection), and starts again in a forked
    child (a coordinator made before a pre-fork server forks logs from every worker)."""

    def __init__(self, coordinator: Coordinator, interval: float = INTERVAL) -> None:
        self._ref = weakref.ref(coordinator)
        self._interval = interval
        self._stop = threading.Event()
        self._thread = self._start()
        _PUMPS.add(self)

    def _start(self) -> threading.Thread:
        thread = threading.Thread(
            target=self._run, args=(self._ref, self._interval, self._stop),
            name="velvet-rope-events", daemon=True,
        )
        thread.start()
        return thread

    @staticmethod
    def _run(ref: weakref.ref[Coordinator], interval: float, stop: threading.Event) -> None:
        # No weakref callback: one run by the collector on this thread, inside `stop.wait`,
        # would take the event's lock this thread holds (a deadlock of the collector).
        failed = False
        while not stop.wait(interval):
            coordinator = ref()
            if coordinator is None:
                return
            try:
                log_events(coordinator)
            except Exception:
                if not failed:
                    failed = True
                    _FAILED.exception("velvet-rope: logging a coordinator's events failed")
            del coordinator

    def _after_fork(self) -> None:
        if not self._stop.is_set() and self._ref() is not None:
            self._stop = threading.Event()
            self._thread = self._start()

    def stop(self) -> None:
        """Stops the thread (its last round may still log) and waits for it."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()

    @property
    def running(self) -> bool:
        """Whether the thread runs."""
        return self._thread.is_alive()


_PUMPS: weakref.WeakSet[EventPump] = weakref.WeakSet()


def _restart_after_fork() -> None:
    for ticker in list(_TICKERS):
        ticker._after_fork()
    for pump in list(_PUMPS):
        pump._after_fork()


os.register_at_fork(after_in_child=_restart_after_fork)


class LoopTicker:
    """Ticks an engine every `interval` seconds from a task on the running asyncio loop."""

    def __init__(self, engine: Engine, interval: float = INTERVAL) -> None:
        self._engine = engine
        self._interval = interval
        self._task: asyncio.Task[None] | None = None
        #: Whether the task was started and has not ended (it is cleared when the task ends,
        #: or is stopped): what the middleware reads on every request, an attribute instead
        #: of a call to `ensure_started`.
        self.live = False

    def ensure_started(self) -> None:
        """Starts the task on the running loop unless it runs already."""
        if self._task is None or self._task.done():
            task = asyncio.get_running_loop().create_task(self._run())
            self._task = task
            self.live = True
            task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        if task is self._task:
            self.live = False

    async def _run(self) -> None:
        failed = [False]
        while True:
            await asyncio.sleep(self._interval)
            _tick(self._engine, failed)

    async def stop(self) -> None:
        """Cancels the task and waits for it."""
        task, self._task = self._task, None
        self.live = False
        if task is not None and not task.done():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    @property
    def running(self) -> bool:
        """Whether the task runs."""
        return self._task is not None and not self._task.done()
