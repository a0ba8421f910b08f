"""The engine's metrics in Envoy's own stats, against a real Envoy: admin `/stats/prometheus`
and `/stats` show each room's figures, published about once a second on Envoy's main thread
by one filter configuration per engine (see bindings/envoy/src/metrics.rs).

The filters set `metrics_namespace: velvet_rope`, so Prometheus sees
`envoy_velvet_rope_room_active_users{room="conc"}` and `/stats` shows
`velvet_rope.room_active_users.room.conc`. Uses test_envoy.py's Envoy (three filters sharing
one engine) and test_envoy_reload.py's listener updates.
"""

import json
import os
import re
import sys
import tempfile
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_envoy as te  # noqa: E402
import test_envoy_reload as tr  # noqa: E402
from http_client import Jar, get  # noqa: E402

NAMESPACE = "velvet_rope"
PUBLISH_WAIT = 6.0  # a tick and a publish (each about a second), with room to spare


def with_namespace(f, namespace=NAMESPACE):
    """A filter of test_envoy.py's whose stats go under `namespace`."""
    f["typed_config"]["dynamic_module_config"]["metrics_namespace"] = namespace
    return f


def prometheus(proxy):
    """Every sample of `/stats/prometheus`, parsed by Prometheus' own Python client:
    {(sample name, ((label, value), ...)): value}."""
    r = proxy.admin_get("/stats/prometheus")
    assert r.status == 200, r
    samples = {}
    for family in text_string_to_metric_families(r.body):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def value(samples, name, **labels):
    return samples.get((name, tuple(sorted(labels.items()))))


def flat_stats(proxy, prefix):
    """`/stats` lines under `prefix`: {name: value}."""
    r = proxy.admin_get(f"/stats?filter=^{prefix}")
    assert r.status == 200, r
    out = {}
    for line in r.body.splitlines():
        k, _, v = line.partition(": ")
        if v.strip().isdigit():
            out[k] = int(v)
    return out


def published(proxy, name, want, **labels):
    """Waits for `name{labels}` to read `want` in `/stats/prometheus`; the samples then."""
    seen = []

    def check():
        s = prometheus(proxy)
        seen[:] = [value(s, name, **labels)]
        return s if seen[0] == want else None

    samples = te.wait_until(check, PUBLISH_WAIT, step=0.1)
    assert samples, f"{name}{labels} is {seen[0]}, not {want}: {proxy.log_text()[-3000:]}"
    return samples


@pytest.fixture(scope="module")
def proxy():
    with tempfile.TemporaryDirectory(prefix="velvet-rope-envoy-metrics-") as tmp:
        e = te.Envoy(tmp, lambda rooms: [
            with_namespace(te.velvet_filter("velvet_shop", "shop", rooms)),
            with_namespace(te.velvet_filter("velvet_conc", "conc", rooms)),
            with_namespace(te.velvet_filter("velvet_rej", "rej", rooms)),
        ])
        try:
            e.start()
            yield e
        finally:
            e.close()


def test_prometheus_shows_exactly_the_visitors_admitted(proxy):
    n, k = te.CONC_VISITORS, te.CONC_LIMIT
    results = te.crowd(proxy.port, "/conc/m", n)
    admitted = sum(r.admitted for r in results)
    assert admitted == k, f"{admitted} of {n} admitted, limit {k}"

    room = {"room": "conc"}
    s = published(proxy, "envoy_velvet_rope_room_active_users", admitted, **room)
    assert value(s, "envoy_velvet_rope_room_active_users_limit", **room) == k
    assert value(s, "envoy_velvet_rope_room_admissions_total", kind="new", **room) == k
    assert value(s, "envoy_velvet_rope_room_decisions_total", outcome="queue", **room) >= n - k
    assert value(s, "envoy_velvet_rope_room_queue_length", **room) == n - k
    # Every room of the engine, whichever filter publishes.
    assert value(s, "envoy_velvet_rope_room_active_users_limit", room="shop") == te.SHOP_LIMIT
    # A histogram's buckets: counters with `le`, up to +Inf (Prometheus' Python client names
    # a counter's samples `_total`; the exposition, which a Prometheus server keeps, does not).
    assert value(s, "envoy_velvet_rope_room_wait_seconds_bucket_total", le="+Inf", **room) == 0
    body = proxy.admin_get("/stats/prometheus").body
    assert 'envoy_velvet_rope_room_wait_seconds_bucket{room="conc",le="+Inf"} 0' in body
    assert 'envoy_velvet_rope_room_wait_seconds_bucket{room="conc",le="5.0"} 0' in body
    assert 'envoy_velvet_rope_room_wait_seconds_count{room="conc"} 0' in body
    assert 'envoy_velvet_rope_room_wait_error_seconds_bucket{room="conc",le="-600.0"} 0' in body
    # Whole numbers only: the admission rate (a fraction) is not published.
    assert not any(name.endswith("admission_rate") for name, _ in s)

    flat = flat_stats(proxy, "velvet_rope\\.")
    assert flat["velvet_rope.room_active_users.room.conc"] == k, flat
    assert flat["velvet_rope.room_active_users_limit.room.conc"] == k, flat
    assert flat["velvet_rope.room_admissions_total.room.conc.kind.new"] == k, flat
    assert flat["velvet_rope.room_decisions_total.room.conc.outcome.queue"] >= n - k, flat

    # Three filters share the engine: one publishes, so the counts are not added up thrice,
    # and later publishes add nothing while nothing happens.
    time.sleep(2.5)
    s = prometheus(proxy)
    assert value(s, "envoy_velvet_rope_room_admissions_total", kind="new", **room) == k
    assert value(s, "envoy_velvet_rope_room_active_users", **room) == k
    # The engine's events in Envoy's log: the room began queueing, logged once (one engine,
    # whichever filter's ticker).
    started = re.findall(r'velvet-rope: event (\{"event":"queueing_started"[^\n]*?"room":"conc"[^\n]*?\})',
                         proxy.log_text())
    assert len(started) == 1, proxy.log_text()[-3000:]
    assert int(json.loads(started[0])["queue_length"]) == n - k


def test_an_admitted_visitors_return_is_not_counted_again(proxy):
    # A re-admitted visitor (its cookie) holds the same seat: the gauge stays, new stays.
    jar = Jar()
    r = get(proxy.port, "/shop/m-first", jar)
    assert r.admitted, r
    published(proxy, "envoy_velvet_rope_room_active_users", 1, room="shop")
    for i in range(3):
        assert get(proxy.port, f"/shop/m-again-{i}", jar).admitted
    time.sleep(2.5)
    s = prometheus(proxy)
    assert value(s, "envoy_velvet_rope_room_active_users", room="shop") == 1
    assert value(s, "envoy_velvet_rope_room_admissions_total", room="shop", kind="new") == 1


def test_the_whole_exposition_parses(proxy):
    # prometheus() parses all of it (Envoy's own stats too); the module's families are there
    # with the types Prometheus expects.
    r = proxy.admin_get("/stats/prometheus")
    types = {f.name: f.type for f in text_string_to_metric_families(r.body)}
    assert types["envoy_velvet_rope_room_active_users"] == "gauge"
    # The client names a counter's family without its `_total`.
    assert types["envoy_velvet_rope_room_admissions"] == "counter"
    assert types["envoy_velvet_rope_room_wait_seconds_bucket"] == "counter"
    assert "# TYPE envoy_velvet_rope_room_admissions_total counter" in r.body


def test_envoy_shuts_down_cleanly(proxy):
    assert proxy.stop() == 0, proxy.log_text()[-3000:]
    log = proxy.log_text()
    assert "panic" not in log.lower(), log[-3000:]
    assert "did not define the stat" not in log and "refused" not in log, log[-3000:]


def test_without_a_namespace_the_stats_go_under_envoys_default():
    with tempfile.TemporaryDirectory(prefix="velvet-rope-envoy-metrics-") as tmp:
        e = te.Envoy(tmp, lambda rooms: [te.velvet_filter("velvet_shop", "shop", rooms)])
        try:
            e.start()
            published(e, "envoy_dynamicmodulescustom_room_active_users_limit", te.SHOP_LIMIT,
                      room="shop")
            assert e.stop() == 0
        finally:
            e.close()


def draining(e):
    """Listeners Envoy is draining now."""
    text = e.admin_get("/stats?filter=total_listeners_draining$").body.strip()
    return int(text.rpartition(": ")[2] or 0)


def test_counters_go_on_across_listener_updates(tmp_path):
    # The newest live filter configuration of the engine publishes. A listener added with
    # its own filter (a newer configuration) takes over, then goes again; a listener
    # replaced by an update hands over to its new configuration. Each time the counters go
    # on from where they were: never counted twice, never back to zero.
    e = tr.LdsEnvoy(str(tmp_path), tr.rooms_file(2, tr.room("a", 100)))
    p1, p2 = te.free_port(), te.free_port()

    def one(prefix):
        return e.listener("one", p1, [with_namespace(tr.velvet("velvet_a", "a", e.rooms))], prefix)

    two = e.listener("two", p2, [with_namespace(tr.velvet("velvet_a2", "a", e.rooms))])
    new = "envoy_velvet_rope_room_admissions_total"

    def admit(port, count, tag):
        for i in range(count):
            assert get(port, f"/a/{tag}-{i}", Jar()).admitted

    def settled():
        assert te.wait_until(lambda: draining(e) == 0, 15), e.log_text()[-3000:]
        time.sleep(2.5)  # two more publishes by whoever publishes now

    try:
        tr.started(e, [one("one")])
        tr.serving(p1)
        admit(p1, 3, "first")
        published(e, new, 3, room="a", kind="new")

        # A newer configuration (listener two) publishes from now on.
        assert e.update([one("one"), two]), e.log_text()[-3000:]
        tr.serving(p2)
        admit(p2, 2, "second")
        published(e, new, 5, room="a", kind="new")

        # It goes: the older one publishes again, from where the counts are.
        assert e.update([one("one")]), e.log_text()[-3000:]
        settled()
        admit(p1, 1, "third")
        published(e, new, 6, room="a", kind="new")

        # Listener one replaced: its new configuration takes over, the old one drains and goes.
        assert e.update([one("one-v2")]), e.log_text()[-3000:]
        tr.serving(p1)
        settled()
        admit(p1, 1, "fourth")
        s = published(e, new, 7, room="a", kind="new")
        assert value(s, "envoy_velvet_rope_room_active_users", room="a") == 7
        assert e.stop() == 0
        assert "panic" not in e.log_text().lower()
    finally:
        e.close()


def test_engines_over_one_state_file_publish_its_counters_once(tmp_path):
    # Two listeners whose filters carry inline configurations that differ, over one state
    # file: two engines in the process holding the host's counters, as a listener update that
    # changed an inline configuration leaves them while the old listener drains. Their
    # counters go into Envoy's once, however many publishes come (each engine used to add the
    # host's counts: 10 where 5 were admitted).
    e = tr.LdsEnvoy(str(tmp_path), tr.rooms_file(2, tr.room("a", 100)))
    state = str(tmp_path / "rooms.state")
    p1, p2 = te.free_port(), te.free_port()

    def inline(name, text):
        f = with_namespace(te.velvet_filter(name, "a", e.rooms))
        settings = {"config": text, "room": "a", "state_file": state}
        f["typed_config"]["filter_config"]["value"] = json.dumps(settings)
        return f

    text = tr.rooms_file(2, tr.room("a", 100))
    one = e.listener("one", p1, [inline("velvet_one", text)], "one")
    two = e.listener("two", p2, [inline("velvet_two", text + "# changed\n")], "two")
    new = "envoy_velvet_rope_room_admissions_total"
    try:
        tr.started(e, [one, two])
        tr.serving(p1)
        tr.serving(p2)
        for i in range(3):
            assert get(p1, f"/a/one-{i}", Jar()).admitted
        for i in range(2):
            assert get(p2, f"/a/two-{i}", Jar()).admitted
        published(e, new, 5, room="a", kind="new")
        time.sleep(3)  # more publishes, by both engines' tickers
        s = prometheus(e)
        assert value(s, new, room="a", kind="new") == 5, e.log_text()[-3000:]
        assert value(s, "envoy_velvet_rope_room_active_users", room="a") == 5
        assert e.stop() == 0
    finally:
        e.close()
