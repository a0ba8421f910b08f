"""Real servers on 127.0.0.1, driven over HTTP: FastAPI under uvicorn and Flask under gunicorn,
two worker processes each, sharing the room's counts through one state file."""

from __future__ import annotations

import concurrent.futures
import json
from collections.abc import Iterator

import pytest

from .http_client import Jar, attack_targets, get, position, raw_get
from .servers import Server

K = 10  # total_active_users of room `shop` (tests/apps/rooms.toml)
N = 40  # concurrent new visitors


class Run:
    def __init__(self, server: Server) -> None:
        self.server = server
        self.port = server.port
        self.admitted: list[Jar] = []


@pytest.fixture(scope="module", params=["uvicorn", "gunicorn"])
def run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    server = Server(request.param, tmp_path_factory.mktemp(request.param) / "rooms.state")
    try:
        yield Run(server)
    finally:
        server.stop()


def test_exactly_k_of_n_concurrent_new_visitors_across_both_workers(run: Run) -> None:
    def visit(_: int) -> tuple[Jar, object]:
        jar = Jar()
        return jar, get(run.port, "/shop/a", jar)

    with concurrent.futures.ThreadPoolExecutor(N) as pool:
        results = list(pool.map(visit, range(N)))
    admitted = [jar for jar, r in results if r.admitted]  # type: ignore[attr-defined]
    waiting = [r for _, r in results if r.waiting]  # type: ignore[attr-defined]
    assert len(admitted) == K, f"{len(admitted)} of {N} admitted, the limit is {K}"
    assert len(waiting) == N - K
    pids = {r.header("X-Worker-Pid") for _, r in results}  # type: ignore[attr-defined]
    assert len(pids) == 2, f"one worker served every request: {pids}"
    run.admitted = admitted


def test_metrics_from_either_worker_are_the_hosts(run: Run) -> None:
    """Each worker reports the host's figures (the counters are in the shared state file):
    the crowd above, counted once, whichever worker answers. Under gunicorn the route is
    prometheus_client's multiprocess registry with the engine's collector in it."""
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as om
    from prometheus_client.parser import text_string_to_metric_families as text

    assert run.admitted, "needs the crowd's admitted visitors"
    by_worker: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
    for i in range(40):
        accept = "application/openmetrics-text; version=1.0.0" if i % 2 else "text/plain"
        r = get(run.port, f"/metrics?n={i}", None, {"Accept": accept})
        assert r.status == 200, r
        kind = r.header("Content-Type") or ""
        parse = om if kind.startswith("application/openmetrics-text") else text
        if run.server.kind == "uvicorn":
            assert kind.startswith("application/openmetrics-text"), kind
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for f in parse(r.body) for s in f.samples}
        host_wide = {k: v for k, v in samples.items() if k[0].startswith(
            ("velvet_rope_room_admissions", "velvet_rope_room_decisions"))}
        pid = r.header("X-Worker-Pid")
        assert pid is not None
        if pid in by_worker:
            continue
        by_worker[pid] = host_wide
        assert host_wide[("velvet_rope_room_admissions_total",
                          (("kind", "new"), ("room", "shop")))] == K, host_wide
        assert host_wide[("velvet_rope_room_decisions_total",
                          (("outcome", "queue"), ("room", "shop")))] == N - K
        if run.server.kind == "gunicorn":
            # The app's own counter, summed over both workers' files.
            assert samples[("app_shop_pages_total", ())] >= K
        if len(by_worker) == 2:
            break
    assert len(by_worker) == 2, f"one worker answered every scrape: {list(by_worker)}"
    first, second = by_worker.values()
    assert first == second


def test_a_rules_matches_from_both_workers_are_counted_once_for_the_host(run: Run) -> None:
    """Requests a bypass rule of the room matched (`/shop/ping`), served by both workers,
    counted in the room's counters: each worker's metrics show all of them."""
    sent: dict[str, int] = {}
    for _ in range(200):
        r = get(run.port, "/shop/ping")
        assert not r.all("Set-Cookie") and not r.waiting, "bypassed: no ticket, no queue"
        pid = r.header("X-Worker-Pid") or ""
        sent[pid] = sent.get(pid, 0) + 1
        if len(sent) == 2 and sum(sent.values()) >= 20:
            break
    assert len(sent) == 2, f"one worker served every request: {sent}"
    key = ("velvet_rope_rule_matches_total",
           (("action", "bypass"), ("room", "shop"), ("rule", "ping")))
    from prometheus_client.parser import text_string_to_metric_families as text

    seen: dict[str, float] = {}
    for i in range(200):
        r = get(run.port, f"/metrics?n=ping{i}", None, {"Accept": "text/plain"})
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for f in text(r.body) for s in f.samples}
        seen[r.header("X-Worker-Pid") or ""] = samples[key]
        if len(seen) == 2:
            break
    assert seen == {pid: sum(sent.values()) for pid in sent}, (seen, sent)


def test_admitted_cookies_readmit(run: Run) -> None:
    assert run.admitted, "needs the crowd's admitted visitors"
    for jar in run.admitted:
        for _ in range(2):
            assert get(run.port, "/shop/b", jar).admitted


def test_over_the_limit_visitors_get_the_waiting_page(run: Run) -> None:
    jar = Jar()
    r = get(run.port, "/shop/c", jar)
    assert not r.admitted and r.waiting
    assert r.status == 202, "the room's queueing_status_code"
    assert (r.header("Content-Type") or "").startswith("text/html")
    assert r.header("Refresh") == "5"
    assert r.header("Cache-Control") == "no-store"
    assert (position(r) or 0) >= 1
    assert "__vr_shop" in jar.cookies, "a waiter gets a queued ticket"
    # The room has accept_language = true: the visitor's Accept-Language picks the page.
    german = get(run.port, "/shop/c", jar, {"Accept-Language": "de-AT,de;q=0.9,en;q=0.5"})
    assert german.status == 202 and 'lang="de-DE"' in german.body
    assert "Sie sind in der Warteschlange" in german.body and (position(german) or 0) >= 1
    r = get(run.port, "/shop/c", Jar(), {"Accept": "application/json"})
    assert r.status == 202 and (r.header("Content-Type") or "").startswith("application/json")
    doc = json.loads(r.body)
    assert doc["outcome"] == "queue" and doc["position"] >= 1


def test_a_tampered_cookie_is_a_new_visitor(run: Run) -> None:
    assert run.admitted, "needs the crowd's admitted visitors"
    value = run.admitted[0].cookies["__vr_shop"]
    i = len(value) // 2
    forged = Jar({"__vr_shop": value[:i] + ("A" if value[i] != "A" else "B") + value[i + 1:]})
    r = get(run.port, "/shop/d", forged)
    assert not r.admitted and r.waiting, "a forged ticket got in"
    assert forged.cookies["__vr_shop"] != value, "treated as new: a queued ticket of its own"


def test_bypassed_and_unroomed_paths_pass_untouched(run: Run) -> None:
    r = get(run.port, "/health")
    assert r.status == 200 and json.loads(r.body) == {"ok": True}
    assert not r.all("Set-Cookie")


def test_a_ticket_in_a_second_cookie_line_readmits(run: Run) -> None:
    """Two `Cookie` lines (HTTP/2 splits cookies so; some clients send them so): gunicorn joins
    them with `,`, uvicorn hands both to the middleware. The room is full: only the ticket
    readmits."""
    assert run.admitted, "needs the crowd's admitted visitors"
    ticket = run.admitted[1].cookies["__vr_shop"]
    wrong = []
    for lines in (
        [("Cookie", "a=1"), ("Cookie", f"__vr_shop={ticket}")],
        [("Cookie", f"__vr_shop={ticket}"), ("Cookie", "b=2")],
        [("Cookie", "a=1; b=2"), ("Cookie", f"c=3; __vr_shop={ticket}; d=4")],
    ):
        r = raw_get(run.port, "/shop/split", lines)
        if not r.admitted:
            wrong.append(f"{[v for _, v in lines]}: {r.status}")
    assert wrong == []
    # A ticket inside another cookie's quoted value is no ticket (as servers parse it).
    r = raw_get(run.port, "/shop/split", [("Cookie", f'pref="x,__vr_shop={ticket}"')])
    assert not r.admitted and r.waiting, "a ticket smuggled in a quoted value got in"


def _decided_in(r: object, room: str) -> bool:
    from .http_client import Response

    assert isinstance(r, Response)
    return r.status in (202, 429) or any(
        c.startswith(f"__vr_{room}=") for c in r.all("Set-Cookie")
    )


def test_the_room_of_a_path_is_decided_on_its_normal_form(run: Run) -> None:
    """`..`, its escapes and other escapes are resolved before the room is chosen: a static
    handler at the root that resolves `..` after the bypass prefix serves the vault's page
    only to a decided request."""
    wrong = []
    for target in ("/static/../vault.html", "/static/%2e%2e/vault.html", "/static/.%2E/vault.html",
                   "/static/..%2Fvault.html", "/static//../vault.html", "/%76ault.html"):
        r = raw_get(run.port, target)
        if r.status != 200 or 'id="vault"' not in r.body:
            wrong.append(f"{target}: not the vault's page ({r.status})")
        elif not _decided_in(r, "vault"):
            wrong.append(f"{target}: the vault's page, undecided")
    # The room `shop` is full (the crowd): its requests get the waiting page.
    for target in ("/%73hop/e", "/shop/%2e/e", "/static/../shop/e"):
        r = raw_get(run.port, target)
        if not _decided_in(r, "shop"):
            wrong.append(f"{target}: undecided ({r.status})")
    for target in ("/static/app.css", "/health"):
        r = raw_get(run.port, target)
        if r.status != 200 or r.all("Set-Cookie"):
            wrong.append(f"{target}: {r.status}, decided")
    assert wrong == []


def test_no_spelling_of_a_protected_path_reaches_it_undecided(run: Run) -> None:
    """Seeded attack targets (encodings of `..`, `/`, `\\` and letters, absolute forms, case):
    whatever the server serves the vault's page for was decided in its room, and the shop's
    route (its room full) never runs."""
    import http.client

    vault, shop = attack_targets()
    escaped, served = [], 0
    for target in vault:
        try:
            r = raw_get(run.port, target)
        except (http.client.HTTPException, OSError):
            continue  # refused by the server's parser: reaches nothing
        if r.status == 200 and 'id="vault"' in r.body:
            served += 1
            if not _decided_in(r, "vault"):
                escaped.append(target)
    for target in shop:
        try:
            r = raw_get(run.port, target)
        except (http.client.HTTPException, OSError):
            continue
        if r.admitted:
            escaped.append(target)
    assert escaped == []
    assert served >= 20, f"only {served} spellings served the vault's page: the attack is too weak"


def test_the_server_stops_cleanly(run: Run) -> None:
    assert run.server.stop() == 0, run.server.log.read_text()
