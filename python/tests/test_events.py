"""A ticket drop through FastAPI under uvicorn (two workers sharing the room): a scheduled
event with a pre-queue and a shuffled start, driven over HTTP.

200 visitors arrive in order during the pre-queue and refresh once a second, as the page
does; 10 more come after the start. Nobody gets in before the start (each sees the
pre-queue's countdown and no place); the pre-queue is let in in an order unrelated to its
order of arrival (rank correlation of one run: standard error about 0.07); the late ones
no earlier than the pre-queue's last admission window (the frontier passes the pre-queue
once all of its live waiters fit in the free slots: from then on they and the late ones
enter first come, first served, so who refreshes first at that window's opening wins);
the room counts exactly who got in."""

from __future__ import annotations

import concurrent.futures
import datetime
import json
import pathlib
import re
import time
from collections.abc import Iterator

import pytest

from velvet_rope import Engine

from .http_client import Jar, get
from .servers import CONFIG, Server

PREQUEUED = 200
LATE = 10
PER_BUCKET = 20


def rfc3339(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")


def rank_correlation(xs: list[float], ys: list[float]) -> float:
    def ranks(v: list[float]) -> list[float]:
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j < len(order) and v[order[j]] == v[order[i]]:
                j += 1
            for k in order[i:j]:
                r[k] = (i + j - 1) / 2
            i = j
        return r
    a, b = ranks(xs), ranks(ys)
    m = (len(a) - 1) / 2
    cov = sum((x - m) * (y - m) for x, y in zip(a, b))
    var = (sum((x - m) ** 2 for x in a) * sum((y - m) ** 2 for y in b)) ** 0.5
    return cov / var


class Drop:
    def __init__(self, tmp: pathlib.Path) -> None:
        now = time.time()
        self.opens = now + 3
        self.starts = float(int(now + 14))
        # The test servers' rooms, with 1 s buckets and room `shop` holding the drop.
        text = CONFIG.read_text()
        text = "[settings]\nbucket_width_secs = 1\n\n" + text
        shop = re.search(r'\[\[rooms\]\]\nname = "shop"\n(?:(?!\[\[rooms\]\]).)*', text, re.S)
        assert shop, "room `shop` in rooms.toml"
        event = (f'[[rooms.events]]\nname = "drop"\nprequeue_start = "{rfc3339(self.opens)}"\n'
                 f'event_start = "{rfc3339(self.starts)}"\n'
                 f'event_end = "{rfc3339(self.starts + 3600)}"\n'
                 f'shuffle_at_event_start = true\n'
                 f'total_active_users = 5000\nnew_users_per_minute = {PER_BUCKET}\n'
                 f'session_duration = 300\n\n')
        block = shop.group(0).replace("refresh_interval = 5", "refresh_interval = 1")
        text = text.replace(shop.group(0), block + event)
        self.config = tmp / "drop.toml"
        self.config.write_text(text)
        self.state = tmp / "drop.state"
        self.server = Server("uvicorn", self.state, self.config)
        self.jars: list[Jar] = []
        self.admitted_at: dict[int, float] = {}
        self.early = 0
        self.prequeue_pages = 0

    def visit(self, i: int) -> None:
        r = get(self.server.port, "/shop/item", self.jars[i])
        now = time.time()
        if r.admitted:
            self.admitted_at.setdefault(i, now)
            if now < self.starts:
                self.early += 1
        elif now < self.starts - 0.3 and 'id="countdown"' in r.body \
                and 'id="position"' not in r.body:
            self.prequeue_pages += 1

    def run(self) -> None:
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            while time.time() < self.opens + 0.3:
                time.sleep(0.05)
            arrive_until = self.starts - 3
            last_round = 0.0
            while len(self.jars) < PREQUEUED:
                due = int(PREQUEUED * min(1.0, (time.time() - self.opens) /
                                          (arrive_until - self.opens)))
                while len(self.jars) < max(due, 1) and len(self.jars) < PREQUEUED:
                    self.jars.append(Jar())
                    self.visit(len(self.jars) - 1)
                if time.time() - last_round >= 1.0:
                    last_round = time.time()
                    list(pool.map(self.visit, range(len(self.jars))))
                time.sleep(0.02)
            late_added = False
            deadline = self.starts + 45
            while time.time() < deadline:
                if not late_added and time.time() > self.starts + 1:
                    late_added = True
                    for _ in range(LATE):
                        self.jars.append(Jar())
                        self.visit(len(self.jars) - 1)
                waiting = [i for i in range(len(self.jars)) if i not in self.admitted_at]
                if late_added and not waiting:
                    break
                started = time.time()
                list(pool.map(self.visit, waiting))
                time.sleep(max(0.0, 1.0 - (time.time() - started)))


@pytest.fixture(scope="module")
def drop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Drop]:
    d = Drop(tmp_path_factory.mktemp("drop"))
    try:
        d.run()
        yield d
    finally:
        d.server.stop()


def test_nobody_gets_in_during_the_prequeue(drop: Drop) -> None:
    assert drop.early == 0
    assert drop.prequeue_pages >= PREQUEUED, drop.prequeue_pages


def test_everyone_gets_in_and_the_room_counts_them_exactly(drop: Drop) -> None:
    assert len(drop.admitted_at) == PREQUEUED + LATE
    # The workers' counts, read from their state file by an engine of the same configuration.
    engine = Engine(drop.config, shared_memory=drop.state)
    stats = json.loads(engine.stats_json())["rooms"]["shop"]
    assert stats["admitted_total"] == PREQUEUED + LATE, stats
    assert (stats["event"], stats["event_phase"]) == ("drop", "active"), stats


def test_the_prequeue_is_shuffled_and_the_late_come_after(drop: Drop) -> None:
    pre = [i for i in range(PREQUEUED) if i in drop.admitted_at]
    rho = rank_correlation([float(i) for i in pre], [drop.admitted_at[i] for i in pre])
    print(f"rank correlation of arrival and admission over {len(pre)} visitors: {rho:.3f}")
    assert abs(rho) < 0.3, rho
    first_late = min(drop.admitted_at[i] for i in range(PREQUEUED, PREQUEUED + LATE))
    # The pre-queue's waiters let in after a late one: those live when the frontier passed
    # them fit in that window's new-user slots (PER_BUCKET); as many again allows for waiters
    # a slow round of refreshes left uncounted then. Jumping the queue would leave ~180.
    after = sorted(drop.admitted_at[i] - drop.starts for i in pre
                   if drop.admitted_at[i] > first_late)
    print(f"first late one in at start + {first_late - drop.starts:.2f} s; "
          f"pre-queue let in after it: {len(after)} {[round(t, 2) for t in after]}")
    assert len(after) <= 2 * PER_BUCKET, after
