"""Leases: the `Coordinator` that hands them out (its events written to the
`velvet_rope.events` logger), and `RateLimiter` and `Gauge` enforcing them locally, with
blocking, async and context-manager forms over the native types."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from types import TracebackType

from . import _velvet_rope as _native
from ._ticker import EventPump

__all__ = ["Coordinator", "RateLimiter", "Gauge"]


class Coordinator(_native.Coordinator):
    """Hands out leases of shared resources (the configuration's `resources` section).

    Its events (a resource's learning period started or ended; for a leaf under the Redis
    lease root, the root's learning and the root lost and found) go to the
    `velvet_rope.events` logger, written once a second by a daemon thread
    (`log_events=False`: none, drain them with `drain_events()` yourself); that thread
    starts again in a forked child. With a `[cluster]` table, make it in each worker, after
    any fork: its loop under the lease root is a thread of the process that made it.
    """

    _events: EventPump | None

    def __new__(
        cls,
        config: str | os.PathLike[str],
        *,
        now_ms: int | None = None,
        log_events: bool = True,
    ) -> Coordinator:
        self = super().__new__(cls, config, now_ms=now_ms)
        self._events = EventPump(self) if log_events else None
        return self


class RateLimiter(_native.RateLimiter):
    """Permits at a leased rate, spread evenly over each second.

    `try_acquire(n=1)` never blocks; `acquire(n=1)` blocks the thread (not the GIL);
    `await acquire_async(n=1)` waits on the event loop without blocking it.
    """

    async def acquire_async(self, n: int = 1) -> None:
        """Waits until `n` permits are taken, sleeping on the event loop meanwhile."""
        while True:
            wait = self.try_acquire_or_wait(n)
            if wait is None:
                return
            await asyncio.sleep(wait)


_BACKOFF_START = 0.00005
_BACKOFF_MAX = 0.005


class Gauge(_native.Gauge):
    """At most `capacity` units held at once.

    `with gauge:` / `async with gauge:` hold one unit for the block; `gauge.hold(n)` and
    `gauge.hold_async(n)` hold `n`. `try_acquire`, `acquire`, `acquire_async` and `release` are
    the manual forms.
    """

    async def acquire_async(self, n: int = 1) -> None:
        """Waits until `n` units are taken, sleeping on the event loop meanwhile."""
        backoff = _BACKOFF_START
        while not self.try_acquire(n):
            if n > self.capacity > 0:
                raise _capacity_error(n, self.capacity)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, _BACKOFF_MAX)

    @contextlib.contextmanager
    def hold(self, n: int = 1) -> Iterator[Gauge]:
        """Holds `n` units for the `with` block (blocking until they are free)."""
        self.acquire(n)
        try:
            yield self
        finally:
            self.release(n)

    @contextlib.asynccontextmanager
    async def hold_async(self, n: int = 1) -> AsyncIterator[Gauge]:
        """Holds `n` units for the `async with` block (waiting on the loop until they are
        free)."""
        await self.acquire_async(n)
        try:
            yield self
        finally:
            self.release(n)

    def __enter__(self) -> Gauge:
        self.acquire(1)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release(1)

    async def __aenter__(self) -> Gauge:
        await self.acquire_async(1)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release(1)


def _capacity_error(n: int, capacity: int) -> Exception:
    from .errors import CapacityError

    return CapacityError(f"cannot acquire {n} permits at once: the limit is {capacity}")
