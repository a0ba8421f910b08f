"""Listener updates against a real Envoy: the filter configurations that share one engine (one
configuration file) while Envoy adds, replaces, refuses and drains listeners.

Envoy 1.40 reads its listeners from a file (LDS, `path_config_source` with a watched
directory); a test changes them by moving a new file into place, as an operator's tooling
would, and reads Envoy's own `listener_manager.lds.*` counters to know the update was taken or
refused. Each test starts its own Envoy (`--drain-time-s 1`: a replaced listener drains for a
second).
"""

import json
import os
import socket
import sys
import tempfile
import threading
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_envoy as te  # noqa: E402
from http_client import Jar, get  # noqa: E402

KEY = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY"


def room(name, total, *, per_minute=1000, refresh=5, status=202):
    return f"""
[[rooms]]
name = "{name}"
total_active_users = {total}
new_users_per_minute = {per_minute}
session_duration = 30
refresh_interval = {refresh}
queueing_status_code = {status}
[rooms.cookie]
secure = false
"""


def rooms_file(bucket_secs, *rooms):
    head = f"""
[settings]
bucket_width_secs = {bucket_secs}

[[tickets.keys]]
id = 1
secret = "{KEY}"
"""
    return head + "".join(rooms)


def velvet(name, room_name, rooms_path, **extra):
    f = te.velvet_filter(name, room_name, rooms_path)
    value = dict(json.loads(f["typed_config"]["filter_config"]["value"]), **extra)
    f["typed_config"]["filter_config"]["value"] = json.dumps(value)
    return f


class LdsEnvoy(te.Envoy):
    """An Envoy whose listeners come from a watched file, changed with `set_listeners`."""

    def __init__(self, tmp, rooms_text):
        self.tmp = tmp
        self.admin = te.free_port()
        self.upstream = te.UpstreamServer(("127.0.0.1", 0), te.Upstream)
        threading.Thread(target=self.upstream.serve_forever, daemon=True).start()
        self.rooms = os.path.join(tmp, "rooms.toml")
        self.write_rooms(rooms_text)
        self.lds_dir = os.path.join(tmp, "lds")
        os.makedirs(self.lds_dir)
        self.lds = os.path.join(self.lds_dir, "lds.json")
        self.version = 0
        upstream_port = self.upstream.server_address[1]
        bootstrap = {
            "node": {"id": "velvet-rope-test", "cluster": "velvet-rope-test"},
            "admin": {"address": {"socket_address": {"address": "127.0.0.1",
                                                     "port_value": self.admin}}},
            "dynamic_resources": {"lds_config": {
                "resource_api_version": "V3",
                "path_config_source": {"path": self.lds,
                                       "watched_directory": {"path": self.lds_dir}},
            }},
            "static_resources": {"clusters": [{
                "name": "upstream", "connect_timeout": "1s", "type": "STATIC",
                "load_assignment": {"cluster_name": "upstream", "endpoints": [{"lb_endpoints": [{
                    "endpoint": {"address": {"socket_address": {
                        "address": "127.0.0.1", "port_value": upstream_port}}},
                }]}]},
            }]},
        }
        self.config = os.path.join(tmp, "envoy.json")
        with open(self.config, "w") as f:
            json.dump(bootstrap, f)
        self.log_path = os.path.join(tmp, "envoy.log")
        self.proc = None

    def command(self, *extra):
        return super().command("--drain-time-s", "1", *extra)

    def write_rooms(self, text):
        with open(self.rooms, "w") as f:
            f.write(text)

    @staticmethod
    def listener(name, port, filters, stat_prefix="ingress"):
        """A listener on `port` whose one route goes to the upstream through `filters`."""
        return {
            "@type": "type.googleapis.com/envoy.config.listener.v3.Listener",
            "name": name,
            "address": {"socket_address": {"address": "127.0.0.1", "port_value": port}},
            "filter_chains": [{"filters": [{
                "name": "envoy.filters.network.http_connection_manager",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                    "stat_prefix": stat_prefix,
                    "route_config": {"name": "local", "virtual_hosts": [{
                        "name": "all", "domains": ["*"],
                        "routes": [{"match": {"prefix": "/"}, "route": {"cluster": "upstream"}}],
                    }]},
                    "http_filters": filters + [{
                        "name": "envoy.filters.http.router",
                        "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
                    }],
                },
            }]}],
        }

    def set_listeners(self, listeners):
        """Moves a new listener file into place (Envoy watches the directory for moves)."""
        self.version += 1
        tmp = os.path.join(self.tmp, f"lds-{self.version}.json")
        with open(tmp, "w") as f:
            json.dump({"version_info": str(self.version), "resources": listeners}, f)
        os.rename(tmp, self.lds)

    def lds_counts(self):
        text = self.admin_get("/stats?filter=listener_manager\\.lds\\.update_").body
        counts = {}
        for line in text.splitlines():
            k, _, v = line.partition(": ")
            if v.isdigit():
                counts[k.rsplit(".", 1)[-1]] = int(v)
        return counts.get("update_success", 0), counts.get("update_rejected", 0)

    def update(self, listeners):
        """`set_listeners`, then waits for Envoy to take or refuse it: True if taken."""
        ok, bad = self.lds_counts()
        self.set_listeners(listeners)
        assert te.wait_until(lambda: sum(self.lds_counts()) > ok + bad, 15), \
            f"Envoy did not read listener file {self.version}: {self.log_text()[-3000:]}"
        return self.lds_counts()[0] > ok


@pytest.fixture
def tmp():
    with tempfile.TemporaryDirectory(prefix="velvet-rope-envoy-lds-") as d:
        yield d


def started(e, listeners):
    e.set_listeners(listeners)
    e.start()
    assert te.wait_until(lambda: e.lds_counts()[0] >= 1, 15), e.log_text()[-3000:]
    return e


def serving(port):
    """Waits for a listener to accept connections (a request would take a seat)."""
    def up():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            return False
    assert te.wait_until(up, 15), f"nothing serves 127.0.0.1:{port}"


def test_a_reload_keeps_a_room_that_a_live_filter_still_decides(tmp):
    # Filters `velvet_a` (room a, listener one) and `velvet_b` (room b, listener two) share
    # the rooms file. The file loses room b, and an update replaces listener one only (a new
    # configuration of `velvet_a`): `velvet_b` is still live and must go on deciding room b.
    e = LdsEnvoy(tmp, rooms_file(2, room("a", 5), room("b", 1)))
    p1, p2 = te.free_port(), te.free_port()
    one = lambda prefix: e.listener("one", p1, [velvet("velvet_a", "a", e.rooms)], prefix)  # noqa: E731
    two = e.listener("two", p2, [velvet("velvet_b", "b", e.rooms)])
    try:
        started(e, [one("one"), two])
        serving(p1)
        holder = Jar()
        assert get(p2, "/b/holder", holder).admitted
        r = get(p2, "/b/full", Jar())
        assert r.status == 202 and r.waiting, r

        e.write_rooms(rooms_file(2, room("a", 5)))
        assert e.update([one("one-v2"), two]), e.log_text()[-3000:]
        serving(p1)
        time.sleep(0.5)
        for i in range(5):
            r = get(p2, f"/b/new-{i}", Jar())
            assert r.status == 202 and r.waiting, f"room b let a new visitor through: {r}"
        assert get(p2, "/b/again", holder).admitted
        log = e.log_text()
        said = [line for line in log.splitlines() if "`velvet_a`" in line and "`b`" in line]
        assert said and "`velvet_b`" in said[0], log[-3000:]
        # Never a line per request for a steady condition.
        assert log.count("no room named `b`") <= 1, log[-3000:]

        # Listener two goes: once it has drained, nothing decides room b and it is dropped.
        assert e.update([one("one-v2")]), e.log_text()[-3000:]
        assert te.wait_until(lambda: "room `b` is dropped" in e.log_text(), 15), \
            e.log_text()[-3000:]
        assert get(p1, "/a/after", Jar()).admitted
        assert e.stop() == 0
        assert "panic" not in e.log_text().lower()
    finally:
        e.close()


def test_a_refused_listener_update_leaves_the_engine_as_it_was(tmp):
    # Room a admits 1. The file raises it to 2 and an update brings a new configuration of
    # `velvet_a` next to a bad filter: Envoy refuses the update, so the engine must keep
    # admitting 1. A good update then raises it, seen through listener two (its filter,
    # untouched, shares the engine) without a request through the new listener.
    e = LdsEnvoy(tmp, rooms_file(2, room("a", 1, refresh=1)))
    p1, p2 = te.free_port(), te.free_port()
    fast = {"tick_interval_ms": 100}

    def one(prefix, *more):
        return e.listener("one", p1, [velvet("velvet_a", "a", e.rooms, **fast), *more], prefix)

    two = e.listener("two", p2, [velvet("velvet_a2", "a", e.rooms, **fast)])
    try:
        started(e, [one("one"), two])
        serving(p1)
        assert get(p1, "/a/holder", Jar()).admitted
        waiter = Jar()
        r = get(p1, "/a/waiter", waiter)
        assert r.status == 202 and r.waiting, r

        e.write_rooms(rooms_file(2, room("a", 2, refresh=1)))
        bad = velvet("velvet_bad", "nope", e.rooms)
        assert not e.update([one("one-v2", bad), two]), "Envoy took a listener with a bad filter"
        assert "velvet-rope: filter `velvet_bad`: no room named `nope`" in e.log_text()
        time.sleep(1.0)
        for path in ("/a/waiter-1", "/a/waiter-2"):
            r = get(p1, path, waiter)
            assert r.status == 202 and r.waiting, f"a refused update changed the room: {r}"
        r = get(p2, "/a/new", Jar())
        assert r.status == 202 and r.waiting, f"a refused update changed the room: {r}"

        assert e.update([one("one-v3"), two]), e.log_text()[-3000:]
        assert te.wait_until(lambda: get(p2, "/a/waiter-3", waiter).admitted, 5), \
            f"the accepted update was not applied: {e.log_text()[-3000:]}"
        assert e.stop() == 0
        assert "panic" not in e.log_text().lower()
    finally:
        e.close()


def test_the_tick_follows_the_shortest_interval_of_the_live_filters(tmp):
    # `velvet_slow` (room a, 4 s ticks) is made first, `velvet_fast` (room b, 100 ms) second;
    # they share one engine. Room b lets one new visitor in per 4 s bucket: a waiter is let in
    # once a tick has opened the next bucket, within a tick interval of it.
    bucket = 4
    e = LdsEnvoy(tmp, rooms_file(bucket, room("a", 100, refresh=4),
                                 room("b", 100, per_minute=1, refresh=4)))
    port = te.free_port()
    filters = [velvet("velvet_slow", "a", e.rooms, tick_interval_ms=4000),
               velvet("velvet_fast", "b", e.rooms, tick_interval_ms=100)]

    def phase():
        return time.time() % bucket

    def sleep_to_phase(p):
        time.sleep((p - phase()) % bucket)

    try:
        # Started 1 s into a bucket: a 4 s ticker would tick 1 s or more after each boundary.
        sleep_to_phase(1.0)
        started(e, [e.listener("one", port, filters)])
        serving(port)
        sleep_to_phase(0.2)
        assert get(port, "/b/first", Jar()).admitted
        waiter = Jar()
        r = get(port, "/b/second", waiter)
        assert r.status == 202 and r.waiting, r
        sleep_to_phase(0.1)
        deadline = time.monotonic() + 0.8
        admitted = False
        while not admitted and time.monotonic() < deadline:
            admitted = get(port, "/b/second", waiter).admitted
            time.sleep(0.1)
        assert admitted, "the waiter was not let in within 0.9 s of the bucket boundary: " \
                         "the engine ticks at the first filter's 4 s, not the shortest 100 ms"
        assert e.stop() == 0
    finally:
        e.close()
