"""The front-door conformance table (conformance/front_doors.json) through a real Envoy.

Envoy routes by itself, as an operator would write it: virtual hosts `shop.example.com`
(room shop), `api.example.com` (api), `*.events.example.com` (events), and `*` with
case-insensitive prefix routes `/shop` (shop) and `/dry` (dry), every other route with the
filters off (unrouted). One filter per room, each off on the others' routes, all reading
conformance/front_doors.toml as it is in the repository. The connection manager resolves the
client itself: `use_remote_address` with `xff_num_trusted_hops: 1`, so the row's client, sent
as `X-Forwarded-For` from 127.0.0.1, is the `source.address` the filter reads; it also
normalises the path (`normalize_path`) and the host (`strip_any_host_port`,
`strip_trailing_host_dot`) before routing, which is what a conforming Envoy set-up does.

Every row is sent as a raw HTTP/1.1 request over a socket (its target verbatim, absolute form
included; Host; the row's headers as separate lines; X-Forwarded-For) and the response is
classified as the toml's header comment says results show over HTTP. Each route also names
its room to the upstream (a request header the upstream echoes back), so that a response
that reached the upstream tells which room Envoy's routing picked: bypass (a room, no ticket)
and unrouted (no room) differ.

Then, through the same Envoy: a header ticket holds a place (room `held`, its own
configuration file: `ticket_header = true`, one place), and a `reject` rule answers a JSON
client with 403 problem details.
"""

import http.client
import http.server
import json
import os
import socket
import sys
import tempfile
import threading
import tomllib

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_envoy as te  # noqa: E402

TABLE_DIR = os.path.join(te.REPO, "conformance")
TOML = os.path.join(TABLE_DIR, "front_doors.toml")
with open(os.path.join(TABLE_DIR, "front_doors.json")) as f:
    CASES = json.load(f)["cases"]
with open(TOML, "rb") as f:
    ROOMS = {r["name"]: r for r in tomllib.load(f)["rooms"]}

# The rooms that queue everyone (`queue_all`): a ticket they set is a waiter's, so a response
# that passed to the upstream with one was passed by a dry run or a `count_only` rule.
QUEUE_ALL = {name for name, r in ROOMS.items() if r.get("queue_all")}
TICKET_HEADER_ROOMS = {name for name, r in ROOMS.items() if r.get("ticket_header")}
assert QUEUE_ALL == {"shop", "dry"} and TICKET_HEADER_ROOMS == {"api"}, (QUEUE_ALL, TICKET_HEADER_ROOMS)

HELD = """
[tickets]
keys = [{ id = 1, secret = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY" }]

[[rooms]]
name = "held"
total_active_users = 1
new_users_per_minute = 1000
session_duration = 30
queueing_status_code = 202
ticket_header = true
"""

# The filters, by room; a route turns on its room's filter only.
FILTERS = {room: f"velvet_{room}" for room in ("shop", "api", "events", "dry", "held")}
ROUTE_ROOM = "x-conformance-room"


# ------------------------------------------------------------------------------------------
# The upstream, Envoy's configuration, Envoy

class Upstream(http.server.BaseHTTPRequestHandler):
    """Answers every method with 200 and the route's room (the header the route added) in
    `X-Conformance-Room`, which a HEAD response carries too."""

    def answer(self, with_body):
        body = json.dumps({"origin": True, "path": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Origin", "1")
        self.send_header("X-Conformance-Room", self.headers.get(ROUTE_ROOM, "missing"))
        self.end_headers()
        if with_body:
            self.wfile.write(body)

    def do_GET(self):
        self.answer(True)

    def do_POST(self):
        self.answer(True)

    def do_HEAD(self):
        self.answer(False)

    def log_message(self, *args):
        pass


def route(match, room):
    """A route to the upstream with only `room`'s filter on (none for `None`), naming the room
    to the upstream."""
    return {
        "match": match,
        "route": {"cluster": "upstream"},
        "request_headers_to_add": [{"header": {"key": ROUTE_ROOM, "value": room or "none"},
                                    "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}],
        "typed_per_filter_config": te.off(*(f for r, f in FILTERS.items() if r != room)),
    }


def bootstrap(port, admin_port, upstream_port, filters):
    everything = {"prefix": "/"}
    virtual_hosts = [
        {"name": "shop", "domains": ["shop.example.com"], "routes": [route(everything, "shop")]},
        {"name": "api", "domains": ["api.example.com"], "routes": [route(everything, "api")]},
        {"name": "events", "domains": ["*.events.example.com"],
         "routes": [route(everything, "events")]},
        {"name": "held", "domains": ["held.example.com"], "routes": [route(everything, "held")]},
        {"name": "any", "domains": ["*"], "routes": [
            route({"prefix": "/shop", "case_sensitive": False}, "shop"),
            route({"prefix": "/dry", "case_sensitive": False}, "dry"),
            route(everything, None),
        ]},
    ]
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
                        # Envoy establishes the client: the peer (127.0.0.1) is one trusted
                        # hop, and the address X-Forwarded-For names before it is the client.
                        "use_remote_address": True,
                        "xff_num_trusted_hops": 1,
                        # Envoy's routing reads the normalised path and host (as core's routes
                        # do), and the filter is handed the path Envoy routed on.
                        "normalize_path": True,
                        "strip_any_host_port": True,
                        "strip_trailing_host_dot": True,
                        "http_protocol_options": {"allow_absolute_url": True},
                        "route_config": {"name": "local", "virtual_hosts": virtual_hosts},
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


class ConformanceEnvoy(te.Envoy):
    """The test Envoy of test_envoy (start, stop, logs), with the conformance routes."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.port, self.admin = te.free_port(), te.free_port()
        self.upstream = te.UpstreamServer(("127.0.0.1", 0), Upstream)
        threading.Thread(target=self.upstream.serve_forever, daemon=True).start()
        held = os.path.join(tmp, "held.toml")
        with open(held, "w") as f:
            f.write(HELD)
        filters = [te.velvet_filter(name, room, held if room == "held" else TOML)
                   for room, name in FILTERS.items()]
        self.config = os.path.join(tmp, "envoy.json")
        with open(self.config, "w") as f:
            json.dump(bootstrap(self.port, self.admin, self.upstream.server_address[1], filters), f)
        self.log_path = os.path.join(tmp, "envoy.log")
        self.proc = None


@pytest.fixture(scope="module")
def proxy():
    with tempfile.TemporaryDirectory(prefix="velvet-rope-envoy-conformance-") as tmp:
        e = ConformanceEnvoy(tmp)
        try:
            e.start()
            yield e
        finally:
            e.close()


# ------------------------------------------------------------------------------------------
# Raw requests and what their responses show

class Reply:
    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body

    def header(self, name):
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)

    def all(self, name):
        return [v for k, v in self.headers if k.lower() == name.lower()]

    def tickets(self):
        """The ticket cookies set: {room: value} (cookies are named `__vr_<room>`)."""
        out = {}
        for sc in self.all("Set-Cookie"):
            name, _, value = sc.split(";", 1)[0].strip().partition("=")
            if name.startswith("__vr_"):
                out[name[len("__vr_"):]] = value
        return out

    def __repr__(self):
        return f"Reply({self.status}, {self.headers}, {self.body[:300]!r})"


def send(port, method, target, headers):
    """Sends one request exactly as given (target verbatim, headers as lines in order) and
    reads the response."""
    lines = [f"{method} {target} HTTP/1.1"] + [f"{k}: {v}" for k, v in headers]
    lines += ["Connection: close", "", ""]
    with socket.create_connection(("127.0.0.1", port), timeout=te.HTTP_TIMEOUT) as s:
        s.sendall("\r\n".join(lines).encode("latin-1"))
        r = http.client.HTTPResponse(s, method=method)
        r.begin()
        body = r.read().decode("utf-8", "replace")
        return Reply(r.status, r.getheaders(), body)


def row_headers(case):
    return [("Host", case["host"])] + [tuple(h) for h in case["headers"]] + \
        [("X-Forwarded-For", case["client"])]


def classify(r):
    """(result, room) as the response shows them (see front_doors.toml's header comment)."""
    tickets = r.tickets()
    if r.header("X-Origin") == "1":
        routed = r.header("X-Conformance-Room")
        if r.status != 200:
            return f"upstream {r.status}", routed
        if tickets:
            (room, _), = tickets.items()
            assert room == routed, f"a ticket of room {room} on route {routed}: {r}"
            return ("pass" if room in QUEUE_ALL else "admit"), room
        return ("unrouted", None) if routed == "none" else ("bypass", routed)
    if r.status == 503 and r.header("Refresh") and len(tickets) == 1:
        (room, _), = tickets.items()
        return "queue", room
    if r.status == 403 and "<h1>Forbidden</h1>" in r.body and not tickets:
        # A rule's refusal names no room over HTTP (no ticket, not the room's page); the only
        # rule refusing anything in the table is shop's.
        return "reject", "shop"
    return f"other {r.status}", None


# Every row passes as the table states: with `normalize_path`, Envoy's routing finds the room
# of `/%73hop/item` and `/static/../shop/item` (it decodes the escaped letter and resolves the
# dot segments before matching), and hands the filter that path; the rows about a bypassed
# prefix (`/static/..%2Fcheckout` and the like) are core's to decide on the path Envoy passes.
@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_the_conformance_table(proxy, case):
    r = send(proxy.port, case["method"], case["target"], row_headers(case))
    assert classify(r) == (case["expect"], case["room"]), r
    if case["expect"] in ("admit", "pass", "queue") and case["room"] in TICKET_HEADER_ROOMS:
        # A room taking header tickets sends the new ticket in Velvet-Rope-Ticket too.
        assert r.header("Velvet-Rope-Ticket") == r.tickets()[case["room"]], r
    else:
        assert r.header("Velvet-Rope-Ticket") is None, r


def test_the_table_has_its_rows():
    # An empty or truncated table would pass the parametrised test vacuously.
    assert len(CASES) >= 39, len(CASES)
    assert {c["expect"] for c in CASES} == {"queue", "admit", "pass", "bypass", "reject", "unrouted"}


# ------------------------------------------------------------------------------------------
# Header tickets and rule refusals

def held(port, headers=()):
    return send(port, "GET", "/page", [("Host", "held.example.com"),
                                       ("X-Forwarded-For", "198.51.100.20"), *headers])


def test_a_header_ticket_holds_a_place(proxy):
    first = held(proxy.port)
    assert first.status == 200 and first.header("X-Origin") == "1", first
    ticket = first.header("Velvet-Rope-Ticket")
    assert ticket and ticket == first.tickets().get("held"), first
    # The client keeps no cookies, only the header: it is admitted again.
    again = held(proxy.port, [("Velvet-Rope-Ticket", ticket)])
    assert again.status == 200 and again.header("X-Origin") == "1", again
    # Renewed (a new counting bucket began meanwhile) or not, a ticket set is in both places.
    assert again.header("Velvet-Rope-Ticket") == again.tickets().get("held"), again
    # A second client without it waits (one place), its ticket in the header and in the JSON.
    second = held(proxy.port, [("Accept", "application/json")])
    assert second.status == 202 and second.header("X-Origin") is None, second
    doc = json.loads(second.body)
    waiting = second.header("Velvet-Rope-Ticket")
    assert doc["outcome"] == "queue" and doc["position"] == 1, doc
    assert waiting and doc["ticket"] == waiting == second.tickets()["held"], (doc, second)
    # Brought back in the header, the waiter's ticket keeps its place, and the JSON echoes the
    # ticket it holds (or the new one, sent in the header too).
    back = held(proxy.port, [("Accept", "application/json"), ("Velvet-Rope-Ticket", waiting)])
    doc = json.loads(back.body)
    assert back.status == 202 and doc["position"] == 1, (doc, back)
    assert doc["ticket"] == (back.header("Velvet-Rope-Ticket") or waiting), (doc, back)
    # The first client still holds the place.
    assert held(proxy.port, [("Velvet-Rope-Ticket", ticket)]).status == 200


def test_a_reject_rule_answers_a_json_client_with_problem_details(proxy):
    r = send(proxy.port, "GET", "/cart", [
        ("Host", "shop.example.com"), ("User-Agent", "Mozilla/5.0 BadBot/1.0"),
        ("Accept", "application/json"), ("X-Forwarded-For", "198.51.100.7")])
    assert r.status == 403 and r.header("X-Origin") is None, r
    assert (r.header("Content-Type") or "").startswith("application/problem+json"), r
    doc = json.loads(r.body)
    assert doc["status"] == 403 and doc["room"] == "shop" and doc["outcome"] == "reject", doc
    assert doc["type"] == "urn:velvet-rope:problem:refused-by-rule", doc
    assert r.header("Set-Cookie") is None and r.header("Retry-After") is None, r


def test_envoy_shuts_down_cleanly(proxy):
    assert proxy.stop() == 0, proxy.log_text()[-3000:]
    assert "panic" not in proxy.log_text().lower(), proxy.log_text()[-3000:]
