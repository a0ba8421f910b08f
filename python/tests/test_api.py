"""The Python API and every error, in process."""

from __future__ import annotations

import asyncio
import json
import pathlib
import threading
import time

import pytest

import velvet_rope
from velvet_rope import (
    CapacityError,
    ConfigError,
    Coordinator,
    Engine,
    Gauge,
    RateLimiter,
    SharedMemoryError,
    UnknownResourceError,
    UnknownRoomError,
    VelvetRopeError,
)
from velvet_rope._ticker import ThreadTicker

T0 = 1_800_000_000_000


def room(name: str = "shop", total: int = 2, extra: str = "") -> str:
    return (
        f'[[rooms]]\nname = "{name}"\ntotal_active_users = {total}\n'
        f"new_users_per_minute = 1000\n{extra}\n[rooms.cookie]\nsecure = false\n"
    )


def value(d: velvet_rope.Decision) -> str:
    assert d.set_cookie is not None
    return d.set_cookie.split(";", 1)[0]


def test_engine_from_text_json_and_path(tmp_path: pathlib.Path) -> None:
    text = room()
    assert Engine(text).rooms == ["shop"]
    json_text = '{"rooms": [{"name": "j", "total_active_users": 1, "new_users_per_minute": 1}]}'
    assert Engine(json_text).rooms == ["j"]
    path = tmp_path / "rooms.toml"
    path.write_text(text)
    assert Engine(path).rooms == ["shop"]
    assert "Engine(rooms=" in repr(Engine(text))
    assert velvet_rope.shared_memory_size(text) > 0


def test_configuration_errors_name_the_field() -> None:
    with pytest.raises(ConfigError, match=r"rooms\[0\]\.total_active_users") as e:
        Engine(room(total=0))
    assert isinstance(e.value, ValueError) and isinstance(e.value, VelvetRopeError)
    with pytest.raises(ConfigError, match="could not be parsed"):
        Engine("[[rooms]]\nname = 3\n")
    with pytest.raises(ConfigError, match="cannot read configuration file"):
        Engine(pathlib.Path("/nonexistent/rooms.toml"))
    with pytest.raises(TypeError):
        Engine(42)  # type: ignore[arg-type]


def test_admission_flow_and_decisions() -> None:
    e = Engine(room(total=2), now_ms=T0)
    first = e.admit("shop", now_ms=T0)
    assert first.outcome == "admit" and first.admitted and first.set_cookie is not None
    assert first.ticket_error is None and first.position is None
    cookie = value(first)
    steady = e.admit("shop", cookie, now_ms=T0 + 1)
    assert steady.admitted and steady.set_cookie is None
    assert e.admit("shop", cookie.encode(), now_ms=T0 + 1).admitted, "bytes headers too"
    assert e.admit("shop", f"a=1; {cookie}; b=2", now_ms=T0 + 1).admitted
    e.admit("shop", now_ms=T0)
    third = e.admit("shop", now_ms=T0 + 2)
    assert third.outcome == "queue" and not third.admitted
    assert third.position == 1 and third.retry_after_secs == 20
    assert third.estimated_wait_secs is not None and third.queue_length is not None
    assert "outcome='queue'" in repr(third)
    ticket = cookie.split("=", 1)[1]
    assert e.admit_ticket("shop", ticket, now_ms=T0 + 3).admitted
    with pytest.raises(TypeError, match="str or bytes"):
        e.admit("shop", 42, now_ms=T0)  # type: ignore[arg-type]


def test_the_plain_admits_read_the_cookie_lines_among_the_headers() -> None:
    """`admit_plain_headers` answers what `admit_plain` answers for the same request's
    `Cookie` lines (joined with `; `), and `None` in a room that reads more."""
    rules = '[[rooms.rules]]\nname = "health"\naction = "bypass"\npaths = ["/health"]\n'
    e = Engine(room(total=1) + room("ruled", extra=rules), now_ms=T0)
    cookie = value(e.admit("shop", now_ms=T0)).encode()
    other = [(b"host", b"example.com"), (b"accept", b"*/*")]
    requests: list[list[tuple[bytes | str, bytes | str]]] = [
        other,
        [*other, (b"cookie", cookie)],
        [(b"cookie", b"a=1"), *other, (b"cookie", cookie)],
        [(b"cookie", cookie), (b"cookie", b"a=1; b=2")],
        [("Cookie", cookie.decode()), ("accept", "*/*")],
        [(b"cookie", b"a=" + cookie[:20])],
    ]
    for headers in requests:
        lines = [v if isinstance(v, bytes) else v.encode() for n, v in headers
                 if (n if isinstance(n, bytes) else n.encode()).lower() == b"cookie"]
        joined = b"; ".join(lines) if lines else None
        for when in (T0 + 1, T0 + 2):
            want = e.admit_plain("shop", joined, now_ms=when)
            got = e.admit_plain_headers("shop", headers, now_ms=when)
            assert want is not None and got is not None
            assert (got.outcome, got.set_cookie is None, got.ticket_error) == (
                want.outcome, want.set_cookie is None, want.ticket_error), headers
    # The steady visitor is admitted, the cookie-less one queued (a room of one).
    assert e.admit_plain_headers("shop", [(b"cookie", cookie)], now_ms=T0 + 3).admitted
    assert not e.admit_plain_headers("shop", other, now_ms=T0 + 3).admitted
    assert e.admit_plain_headers("shop", [[b"cookie", cookie]], now_ms=T0 + 3).admitted, "lists"
    assert e.admit_plain_headers("shop", (), now_ms=T0 + 3) is not None
    assert e.admit_plain_headers("ruled", [(b"cookie", cookie)], now_ms=T0) is None
    assert e.admit_plain("ruled", cookie, now_ms=T0) is None
    for bad in ([(b"cookie",)], [b"cookie"], [(b"cookie", 42)], 7):
        with pytest.raises(TypeError):
            e.admit_plain_headers("shop", bad, now_ms=T0)  # type: ignore[arg-type]
    with pytest.raises(UnknownRoomError):
        e.admit_plain_headers("nope", other, now_ms=T0)


def test_a_ticket_in_a_later_cookie_line_is_read_alike_by_every_path() -> None:
    """HTTP/2's cookie crumbs, the first holding a cookie of the ticket's name after a `,`
    (another cookie's unquoted value): every path reads the lines as their join, where the
    real ticket after `; ` comes first. Before, the whole-request path searched line by line
    and took the planted value (queued, `bad_encoding`), while the plain path admitted."""
    rules = '[[rooms.rules]]\nname = "health"\naction = "bypass"\npaths = ["/health"]\n'
    e = Engine(room(total=1) + room("ruled", total=1, extra=rules), now_ms=T0)
    for name in ("shop", "ruled"):
        cookie = value(e.admit(name, now_ms=T0)).encode()
        planted = b"pref=x," + cookie.split(b"=", 1)[0] + b"=" + b"A" * 94
        headers = [(b"cookie", planted), (b"cookie", cookie)]
        placed = e.decide_request("GET", "/", headers, room=name, now_ms=T0 + 1)
        assert placed is not None
        d = placed[1]
        assert (d.outcome, d.ticket_error) == ("admit", None), name
        if name == "shop":
            d2 = e.admit_plain_headers(name, headers, now_ms=T0 + 1)
            assert d2 is not None and (d2.outcome, d2.ticket_error) == ("admit", None)


def test_the_steady_admit_is_one_shared_object_while_no_room_looks_at_responses() -> None:
    """`decision is engine.steady_admit` means: admitted, nothing to add to the response, and
    no room accepts origin commands (the middleware then passes the request on as is)."""
    e = Engine(room(total=2), now_ms=T0)
    first = e.admit("shop", now_ms=T0)
    assert first is not e.steady_admit, "a new ticket to set"
    cookie = value(first)
    for d in (
        e.admit("shop", cookie, now_ms=T0 + 1),
        e.admit_plain("shop", cookie, now_ms=T0 + 1),
        e.admit_plain_headers("shop", [(b"cookie", cookie.encode())], now_ms=T0 + 1),
    ):
        assert d is e.steady_admit
    assert e.admit("shop", "__vr_shop=forged", now_ms=T0 + 1) is not e.steady_admit
    steady = e.steady_admit
    assert steady.admitted and steady.set_cookie is None and steady.ticket_error is None
    e.reload(room(total=3))
    assert e.admit("shop", cookie, now_ms=T0 + 2) is steady is e.steady_admit, "reloaded"
    # While a room (any room) accepts origin commands: the same answer, another object.
    w = Engine(room(extra='enabled_origin_commands = ["revoke"]') + room("plain"), now_ms=T0)
    assert w.accepts_origin_commands
    for name in ("shop", "plain"):
        c = value(w.admit(name, now_ms=T0))
        watched = w.admit(name, c, now_ms=T0 + 1)
        assert watched is not w.steady_admit, name
        assert (watched.outcome, watched.set_cookie, watched.ticket_error) == ("admit", None, None)


def test_pages_and_their_headers() -> None:
    e = Engine(room(total=1), now_ms=T0)
    admitted = e.admit("shop", now_ms=T0)
    assert e.render_page("shop", admitted) is None
    waiting = e.admit("shop", now_ms=T0)
    page = e.render_page("shop", waiting, "text/html")
    assert page is not None and page.status == 200
    assert page.content_type.startswith("text/html") and 'id="position"' in page.body
    names = [k for k, _ in page.headers]
    assert names == ["Content-Type", "Cache-Control", "Refresh", "Set-Cookie"]
    as_json = e.render_page("shop", waiting, b"application/json")
    assert as_json is not None and as_json.content_type == "application/json"
    reject = Engine(room(total=1, extra='queueing_method = "reject"'), now_ms=T0)
    reject.admit("shop", now_ms=T0)
    d = reject.admit("shop", now_ms=T0)
    assert d.outcome == "reject" and d.retry_after_secs == 20
    page = reject.render_page("shop", d)
    assert page is not None and page.status == 429
    assert ("Retry-After", "20") in page.headers


def test_pages_in_the_visitors_language() -> None:
    e = Engine(room(total=1, extra="accept_language = true"), now_ms=T0)
    e.admit("shop", now_ms=T0)
    waiting = e.admit("shop", now_ms=T0)
    page = e.render_page("shop", waiting, "text/html", "de", now_ms=T0)
    assert page is not None and 'lang="de-DE"' in page.body
    assert "Sie sind in der Warteschlange" in page.body and 'id="position"' in page.body
    page = e.render_page("shop", waiting, accept_language=b"ar-EG, en;q=0.5")
    assert page is not None and 'lang="ar-EG" dir="rtl"' in page.body
    page = e.render_page("shop", waiting)
    assert page is not None and 'lang="en-US"' in page.body
    as_json = e.render_page("shop", waiting, "application/json", "fr", now_ms=T0)
    assert as_json is not None
    doc = json.loads(as_json.body)
    assert doc["language"] == "fr-FR" and doc["event_state"] == "none"
    assert doc["cfWaitingRoom"]["inWaitingRoom"] is True
    with pytest.raises(ValueError, match="default_template_language"):
        Engine(room(extra='default_template_language = "xx"'))
    with pytest.raises(ValueError, match="line 1, column 4"):
        Engine(room(extra='custom_page = "<p>{{#a}}"'))


def test_unknown_rooms() -> None:
    e = Engine(room())
    for call in (
        lambda: e.admit("nope"),
        lambda: e.stats("nope"),
        lambda: e.cookie_name("nope"),
        lambda: e.render_page("nope", e.admit("shop")),
    ):
        with pytest.raises(UnknownRoomError, match="no room named `nope`") as err:
            call()
        assert isinstance(err.value, KeyError)


def test_stats_tick_and_reload() -> None:
    e = Engine(room(total=3), now_ms=T0)
    tampered = value(e.admit("shop", now_ms=T0))[:-3] + "AAA"
    e.admit("shop", tampered, now_ms=T0)
    e.tick(now_ms=T0 + 1000)
    st = e.stats("shop")
    assert (st.active_users, st.admitted_total) == (2, 2)
    assert st.ticket_rejections["bad_tag"] + st.ticket_rejections["bad_encoding"] == 1
    assert st.memory_bytes > 0 and isinstance(st.admission_rate, float)
    assert '"shop"' in e.stats_json()
    assert e.cookie_name("shop") == "__vr_shop"
    with pytest.raises(ConfigError):
        e.reload(room(total=0))
    e.reload(room(total=5))
    e.tick(now_ms=T0 + 2000)
    assert e.stats("shop").active_users == 2, "counts kept across a reload"
    with pytest.raises(ConfigError, match="refresh_interval"):
        e.reload(room(total=5, extra="refresh_interval = 7"))


def test_state_file_shared_by_engines_and_restarts(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "rooms.state"
    a = Engine(room(total=3), shared_memory=path, now_ms=T0)
    b = Engine(room(total=3), shared_memory=str(path), now_ms=T0)
    admitted = sum(x.admit("shop", now_ms=T0).admitted for x in (a, b, a, b, a))
    assert admitted == 3
    del a, b
    c = Engine(room(total=3), shared_memory=path, now_ms=T0 + 1000)
    assert c.stats("shop").active_users == 3
    assert not c.admit("shop", now_ms=T0 + 1000).admitted
    with pytest.raises(SharedMemoryError) as err:
        Engine(room(), shared_memory="/nonexistent/dir/rooms.state")
    assert isinstance(err.value, OSError)


def test_threads_share_an_engine_exactly_while_it_ticks() -> None:
    e = Engine(room(total=37, extra="") )
    ticker = ThreadTicker(e, interval=0.001)
    ticker.start()
    admitted: list[int] = []
    barrier = threading.Barrier(8)

    def crowd() -> None:
        barrier.wait()
        admitted.append(sum(e.admit("shop").admitted for _ in range(20)))

    threads = [threading.Thread(target=crowd) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert ticker.running
    ticker.stop()
    assert not ticker.running
    assert sum(admitted) == 37


def test_coordinator_and_leases() -> None:
    c = Coordinator(
        "[[resources]]\nidentifier_glob = \"db-*\"\ncapacity = 100\n"
        'algorithm = { kind = "fair_share", lease_length = 60, refresh_interval = 5, '
        "learning_mode_duration = 0 }\n",
        now_ms=T0,
    )
    a = c.request("a", "db-1", 80.0, now_ms=T0)
    b = c.request("b", "db-1", 80.0, now_ms=T0)
    assert a.capacity == 80.0 and 0.0 <= b.capacity <= 20.0
    assert a.expires_at_ms > T0 and a.refresh_interval_secs == 5.0
    assert "Lease(capacity=80" in repr(a)
    assert c.release("a", "db-1") and not c.release("a", "db-1")
    with pytest.raises(UnknownResourceError) as err:
        c.request("a", "cache-1", 1.0)
    assert isinstance(err.value, KeyError)
    with pytest.raises(ValueError):
        c.request("a", "db-1", -1.0)
    limiter = RateLimiter.from_lease(b)
    assert isinstance(limiter, RateLimiter) and hasattr(limiter, "acquire_async")
    gauge = Gauge.from_lease(a)
    assert isinstance(gauge, Gauge) and gauge.capacity == 80


def test_rate_limiter() -> None:
    rl = RateLimiter(10.0)
    assert rl.rate == 10.0
    got = sum(rl.try_acquire() for _ in range(100))
    assert 1 <= got <= 10
    wait = rl.try_acquire_or_wait()
    assert wait is not None and 0 < wait <= 1.0
    with pytest.raises(CapacityError):
        rl.acquire(1000)
    with pytest.raises(CapacityError):
        rl.try_acquire(1000)  # more than one call can ever take, as Node throws
    with pytest.raises(ValueError):
        RateLimiter(-1.0)
    rl.set_rate(0.0)
    assert not rl.try_acquire()
    with pytest.raises(ValueError):
        rl.set_rate(float("nan"))


def test_blocking_acquire_releases_the_gil() -> None:
    rl = RateLimiter(2.0)  # one permit now, the next in 0.5 s
    assert rl.try_acquire()
    spins = 0
    done = threading.Event()

    def blocked() -> None:
        rl.acquire()
        done.set()

    t = threading.Thread(target=blocked)
    t.start()
    while not done.is_set():
        spins += 1
    t.join()
    # With the GIL held by the waiting thread this loop could not run while it waited.
    assert spins > 1000, spins


def test_async_acquire_does_not_block_the_loop() -> None:
    async def main() -> float:
        rl = RateLimiter(20.0)  # 2 per tenth of a second: 6 permits take about 0.2 s
        worst = 0.0

        async def watch() -> None:
            nonlocal worst
            while True:
                t = time.monotonic()
                await asyncio.sleep(0.005)
                worst = max(worst, time.monotonic() - t - 0.005)

        watcher = asyncio.create_task(watch())
        start = time.monotonic()
        for _ in range(6):
            await rl.acquire_async()
        elapsed = time.monotonic() - start
        watcher.cancel()
        try:
            await watcher
        except asyncio.CancelledError:
            pass
        assert elapsed >= 0.15, f"the permits were not spread out: {elapsed:.3f} s"
        return worst

    worst = asyncio.run(main())
    # A blocking wait would have held the loop for the whole fifth of a second.
    assert worst < 0.1, f"the loop stalled {worst * 1000:.0f} ms"


def test_gauge_sync_async_and_errors() -> None:
    g = Gauge(2)
    assert g.try_acquire(2) and not g.try_acquire()
    assert g.in_use == 2
    g.release(2)
    with g:
        assert g.in_use == 1
        with g.hold(1):
            assert g.in_use == 2
    assert g.in_use == 0
    with pytest.raises(CapacityError):
        g.release()
    with pytest.raises(CapacityError):
        g.acquire(3)
    with pytest.raises(CapacityError):
        g.try_acquire(3)

    async def main() -> None:
        async with g:
            assert g.in_use == 1
            async with g.hold_async(1):
                assert g.in_use == 2
                waiter = asyncio.create_task(g.acquire_async(1))
                await asyncio.sleep(0.02)
                assert not waiter.done(), "waits while the gauge is full"
            await waiter
            g.release(1)
        with pytest.raises(CapacityError):
            await g.acquire_async(3)

    asyncio.run(main())
    assert g.in_use == 0
    g.set_capacity(5)
    assert g.capacity == 5


def test_native_floor_and_clock() -> None:
    velvet_rope.noop()
    assert abs(velvet_rope.now_ms() - time.time() * 1000) < 5_000
    assert velvet_rope.__version__ == "0.3.0"


def test_times_past_2106_are_refused() -> None:
    """Microseconds passed for milliseconds (a common mistake) lie far past the engine's last
    time (2106): refused as bad arguments, as the C ABI and Node refuse them, rather than
    granting a lease that never ends."""
    micros = velvet_rope.now_ms() * 1000
    config = (
        '[[resources]]\nidentifier_glob = "db-*"\ncapacity = 100\n'
        'algorithm = { kind = "fair_share", lease_length = 60, refresh_interval = 5, '
        "learning_mode_duration = 0 }\n"
    )
    with pytest.raises(ValueError, match="2106"):
        Coordinator(config, now_ms=micros)
    c = Coordinator(config, now_ms=T0)
    for now in (micros, 2**63, 2**64 - 1):
        with pytest.raises(ValueError, match="2106"):
            c.request("a", "db-1", 80.0, now_ms=now)
    assert c.request("a", "db-1", 80.0, now_ms=T0).capacity == 80.0, "nothing granted before"
    assert c.request("b", "db-1", 80.0, now_ms=T0).capacity == 20.0
    e = Engine(room(), now_ms=T0)
    for call in (
        lambda: Engine(room(), now_ms=micros),
        lambda: e.admit("shop", now_ms=micros),
        lambda: e.admit_ticket("shop", None, now_ms=micros),
        lambda: e.tick(now_ms=micros),
    ):
        with pytest.raises(ValueError, match="2106"):
            call()


SIGINT_SCRIPT = """
import signal, sys, velvet_rope
# A shell running `make test` in the background starts it with SIGINT ignored, and children
# inherit that: Python then installs no KeyboardInterrupt handler. Install it.
signal.signal(signal.SIGINT, signal.default_int_handler)
kind = sys.argv[1]
if kind == "rate":
    limiter = velvet_rope.RateLimiter(0.0)        # no permit until the lease changes
    print("waiting", flush=True)
    limiter.acquire()
else:
    gauge = velvet_rope.Gauge(0)                   # nothing to hold until it changes
    print("waiting", flush=True)
    with gauge:
        pass
"""


@pytest.mark.parametrize("kind", ["rate", "gauge"])
def test_blocking_waits_let_ctrl_c_land(kind: str, tmp_path: pathlib.Path) -> None:
    """`RateLimiter.acquire()` and `with Gauge(...)` wait in slices that check for signals:
    SIGINT raises KeyboardInterrupt in the waiting process promptly."""
    import signal
    import subprocess
    import sys

    script = tmp_path / "wait.py"
    script.write_text(SIGINT_SCRIPT)
    with subprocess.Popen([sys.executable, str(script), kind], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None and proc.stderr is not None
            assert proc.stdout.readline().strip() == "waiting"
            time.sleep(0.3)  # well inside the wait
            sent = time.monotonic()
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pytest.fail(f"{kind}: SIGINT did not end the wait within 5 s")
            took = time.monotonic() - sent
            err = proc.stderr.read()
            assert "KeyboardInterrupt" in err, err
            assert took < 1.0, f"{kind}: the wait took {took:.2f} s to notice SIGINT"
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
