"""Python benchmarks (`make bench-python`, not part of `make test`): velvet-rope's calls
against the peers Python services use today, in one run, with a native no-op as the floor.

Peers: `limits` (memory storage; fixed and moving window `hit`), `pyrate-limiter` (in-memory
bucket, `try_acquire` without blocking). Every limiter is set far above what the loop takes,
so each call is an allowed call, as in steady traffic.
"""

from __future__ import annotations

import itertools

import limits
import pyrate_limiter
import pytest

import velvet_rope

T0 = 1_800_000_000_000
ROOM = (
    '[[rooms]]\nname = "shop"\ntotal_active_users = 1000000\nnew_users_per_minute = 1000000\n'
    "[rooms.cookie]\nsecure = false\n"
)
VISITORS = 10_000
# Many calls per timed round: one call per round would measure the timer, not the call.
ITERATIONS = 20_000
ROUNDS = 30


def run(benchmark, fn, *args):  # type: ignore[no-untyped-def]
    return benchmark.pedantic(fn, args=args, iterations=ITERATIONS, rounds=ROUNDS, warmup_rounds=2)


@pytest.fixture(scope="module")
def engine() -> velvet_rope.Engine:
    return velvet_rope.Engine(ROOM, now_ms=T0)


def cookie_of(d: velvet_rope.Decision) -> str:
    assert d.set_cookie is not None
    return d.set_cookie.split(";", 1)[0]


def test_floor_native_noop(benchmark) -> None:  # type: ignore[no-untyped-def]
    run(benchmark, velvet_rope.noop)


def test_admit_valid_cookie_one_visitor(benchmark, engine) -> None:  # type: ignore[no-untyped-def]
    """One cookie replayed: the per-thread ticket cache always hits (the warm path)."""
    cookie = cookie_of(engine.admit("shop", now_ms=T0))
    admit = engine.admit
    d = run(benchmark, admit, "shop", cookie, T0 + 1)
    assert d.admitted and d.set_cookie is None


def test_admit_valid_cookie_distinct_visitors(benchmark, engine) -> None:  # type: ignore[no-untyped-def]
    """10,000 visitors in turn, each with its own ticket: as during a sale (cold path)."""
    cookies = [cookie_of(engine.admit("shop", now_ms=T0)) for _ in range(VISITORS)]
    turn = itertools.cycle(cookies)
    admit = engine.admit

    def one() -> velvet_rope.Decision:
        return admit("shop", next(turn), T0 + 1)

    d = run(benchmark, one)
    assert d.admitted


def test_rate_limiter_try_acquire(benchmark) -> None:  # type: ignore[no-untyped-def]
    rl = velvet_rope.RateLimiter(1e12)
    assert run(benchmark, rl.try_acquire)


def test_peer_limits_fixed_window_hit(benchmark) -> None:  # type: ignore[no-untyped-def]
    limiter = limits.strategies.FixedWindowRateLimiter(limits.storage.MemoryStorage())
    item = limits.parse("1000000000/second")
    assert run(benchmark, limiter.hit, item, "key")


def test_peer_limits_moving_window_hit(benchmark) -> None:  # type: ignore[no-untyped-def]
    limiter = limits.strategies.MovingWindowRateLimiter(limits.storage.MemoryStorage())
    item = limits.parse("100000/second")  # the window keeps every hit: bounded to stay fair
    assert run(benchmark, limiter.hit, item, "key")


def test_peer_pyrate_limiter_try_acquire(benchmark) -> None:  # type: ignore[no-untyped-def]
    limiter = pyrate_limiter.Limiter(
        pyrate_limiter.Rate(10**9, pyrate_limiter.Duration.SECOND)
    )
    assert run(benchmark, limiter.try_acquire, "key", 1, False)
