"""Origin commands through a real Envoy (`--concurrency 2`): the upstream (Python's
http.server) answers `Velvet-Rope-Command: revoke` on its /logout routes.

In a room with `enabled_origin_commands = ["revoke"]` the client never sees the header, the
response clears the room's cookie (Max-Age=0) instead of carrying the filter's own ticket,
the old ticket is refused from then on, and exactly one seat is freed: one new visitor is
admitted, the next one waits. The same holds for the ticket the request's own decision
issued and for a ticket sent as the Velvet-Rope-Ticket header (whose response header the
filter then drops). In a room without it, and for a request a `bypass` rule passed, the
header is taken off and the session goes on.

Also: the command as a response trailer (taken off, and followed: the session ends, though
the cookie cannot be cleared once the headers went out); two rooms' filters deciding one
request (whichever sees the response first, both rooms end the session and both cookies are
cleared), also when the first to see it is a room that does not accept commands; and a route
with every filter off, where the documented `header_mutation` filter ahead of the rooms'
filters takes the command off headers and trailers.
"""

import http.server
import json
import os
import re
import socket
import sys
import tempfile
import threading

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_envoy as te  # noqa: E402
from test_envoy import Jar, get  # noqa: E402

COMMAND = "Velvet-Rope-Command"
TICKET = "Velvet-Rope-Ticket"
GATE_LIMIT = 3
REVOKE = 'enabled_origin_commands = ["revoke"]'


def room(name, total, extra=""):
    return f"""
[[rooms]]
name = "{name}"
total_active_users = {total}
new_users_per_minute = 1000
session_duration = 30
queueing_status_code = 202
{extra}
[rooms.cookie]
secure = false
"""


ROOMS = """
[[tickets.keys]]
id = 1
secret = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY"
""" + (room("gate", GATE_LIMIT, REVOKE) + room("solo", 1, REVOKE) + room("duo", 1, REVOKE)
       + room("plain", 5) + room("fresh", 1, REVOKE) + room("trail", 1, REVOKE)
       + room("site", 1, REVOKE) + room("section", 1, REVOKE)
       + room("api", 1, REVOKE + "\nticket_header = true")
       + room("ruled", 1, REVOKE) + """
[[rooms.rules]]
name = "public"
action = "bypass"
paths = ["/ruled/public/"]
""")

# The filters' order in the chain: responses pass them in reverse (`plain` sees a response
# before `solo` and `duo`, `section` before `site`).
ROOM_NAMES = ("gate", "solo", "duo", "plain", "fresh", "api", "ruled", "trail", "site",
              "section")
# Routes deciding a request in two rooms: a site-wide room and a section's own; a room taking
# commands behind one that does not.
BOTH = {"/both/": ("site", "section"), "/mixed/": ("solo", "plain"),
        "/mixed-trailer/": ("duo", "plain")}


class Upstream(http.server.BaseHTTPRequestHandler):
    """The origin: `/logout` routes end the session (and the origin's own cookie); `/trailer`
    routes end it in a trailer."""

    protocol_version = "HTTP/1.1"

    def do_GET(self):
        body = json.dumps({"origin": True, "path": self.path}).encode()
        if self.path.endswith("/trailer"):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Trailer", COMMAND)
            self.end_headers()
            self.wfile.write(b"%x\r\n%s\r\n0\r\n%s: revoke\r\n\r\n"
                             % (len(body), body, COMMAND.encode()))
            return
        self.send_response(200)
        if self.path.endswith("/logout"):
            self.send_header(COMMAND, "revoke")
            self.send_header("Set-Cookie", "app_session=; Max-Age=0; Path=/")
        elif self.path.endswith("/logout-mixed"):
            self.send_header(COMMAND.lower(), "hello, REVOKE")
            self.send_header(COMMAND, "more")
        elif self.path.endswith("/other-command"):
            self.send_header(COMMAND, "something-else")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


STRIP = "velvet_rope_strip_command"


def bootstrap(port, admin_port, upstream_port, rooms_path):
    filters = [te.velvet_filter(f"velvet_{r}", r, rooms_path) for r in ROOM_NAMES]

    def route(prefix, rooms):
        # Where a room decides, the Envoy filter stripping the command is off: the module's
        # own stripping is what is tested there.
        off = [f"velvet_{r}" for r in ROOM_NAMES if r not in rooms] + ([STRIP] if rooms else [])
        return {
            "match": {"prefix": prefix},
            "route": {"cluster": "upstream"},
            "typed_per_filter_config": te.off(*off),
        }

    # README, Envoy, "Origin commands": on routes with every room's filter off, Envoy's
    # header_mutation filter takes the command off; it comes ahead of the rooms' filters in
    # the chain, so that it sees responses after them.
    strip = {
        "name": STRIP,
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.header_mutation.v3.HeaderMutation",
            "mutations": {
                "response_mutations": [{"remove": "velvet-rope-command"}],
                "response_trailers_mutations": [{"remove": "velvet-rope-command"}],
            },
        },
    }
    config = te.bootstrap(port, admin_port, upstream_port, [strip] + filters)
    hcm = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
    hcm["typed_config"]["route_config"]["virtual_hosts"][0]["routes"] = (
        [route(f"/{r}/", (r,)) for r in ROOM_NAMES]
        + [route(prefix, rooms) for prefix, rooms in BOTH.items()]
        + [route("/", ())])
    # Trailers pass both ways over HTTP/1 (Envoy drops them by default).
    hcm["typed_config"]["http_protocol_options"] = {"enable_trailers": True}
    cluster = config["static_resources"]["clusters"][0]
    cluster["typed_extension_protocol_options"] = {
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
            "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
            "explicit_http_config": {"http_protocol_options": {"enable_trailers": True}},
        }}
    return config


class Envoy(te.Envoy):
    def __init__(self, tmp):
        self.tmp = tmp
        self.port, self.admin = te.free_port(), te.free_port()
        self.upstream = te.UpstreamServer(("127.0.0.1", 0), Upstream)
        threading.Thread(target=self.upstream.serve_forever, daemon=True).start()
        rooms = os.path.join(tmp, "rooms.toml")
        with open(rooms, "w") as f:
            f.write(ROOMS)
        self.config = os.path.join(tmp, "envoy.json")
        with open(self.config, "w") as f:
            json.dump(bootstrap(self.port, self.admin, self.upstream.server_address[1], rooms), f)
        self.log_path = os.path.join(tmp, "envoy.log")
        self.proc = None


@pytest.fixture(scope="module")
def proxy():
    with tempfile.TemporaryDirectory(prefix="velvet-rope-envoy-cmd-") as tmp:
        e = Envoy(tmp)
        try:
            e.start()
            yield e
        finally:
            e.close()


def cleared(r, room):
    """The Set-Cookie lines clearing the room's cookie."""
    return [c for c in r.all("Set-Cookie")
            if c.startswith(f"__vr_{room}=;") and re.search(r"(?i)max-age=0(\D|$)", c)]


def tickets_set(r, room):
    """The Set-Cookie lines giving the room's cookie a value."""
    return [c for c in r.all("Set-Cookie")
            if c.startswith(f"__vr_{room}=") and not c.startswith(f"__vr_{room}=;")]


def fill(proxy, room, n):
    jars = []
    for i in range(n):
        jar = Jar()
        r = get(proxy.port, f"/{room}/page", jar)
        assert r.admitted and jar.cookies.get(f"__vr_{room}"), f"visitor {i + 1}: {r}"
        jars.append(jar)
    return jars


def admitted_until_queued(proxy, room):
    """New visitors admitted to `room` before one is queued."""
    for n in range(10):
        r = get(proxy.port, f"/{room}/new-{n}", Jar())
        if not r.admitted:
            assert r.status == 202 and r.waiting, f"neither admitted nor queued: {r}"
            return n
    raise AssertionError(f"room {room} never queued")


# ------------------------------------------------------------------------------------------
# The tests, in order

gate = []
state = {}


def test_the_gate_fills_up(proxy):
    gate.extend(fill(proxy, "gate", GATE_LIMIT))


def test_logout_clears_the_cookie_and_the_client_never_sees_the_command(proxy):
    assert len(gate) == GATE_LIMIT, "runs after test_the_gate_fills_up"
    jar = gate[0]
    state["revoked"] = jar.header()
    r = get(proxy.port, "/gate/logout", jar)
    assert r.admitted, r
    assert r.header(COMMAND) is None, f"the client saw the command: {r.headers}"
    assert len(cleared(r, "gate")) == 1, f"no cookie clearing the ticket: {r.all('Set-Cookie')}"
    assert not tickets_set(r, "gate"), r.all("Set-Cookie")
    assert "app_session=; Max-Age=0; Path=/" in r.all("Set-Cookie"), "the origin's own cookie"


def test_exactly_one_seat_is_freed(proxy):
    assert "revoked" in state, "runs after the logout"
    assert admitted_until_queued(proxy, "gate") == 1


def test_the_old_ticket_is_refused(proxy):
    assert "revoked" in state, "runs after the logout"
    # On fresh connections, so both of Envoy's workers take some of them.
    for i in range(6):
        r = get(proxy.port, f"/gate/after-{i}", headers={"Cookie": state["revoked"]})
        assert r.status == 202 and r.waiting, f"the revoked ticket passed: {r}"
    for jar in gate[1:]:
        assert get(proxy.port, "/gate/page", jar).admitted


def test_another_command_is_taken_off_and_ignored(proxy):
    jar = gate[1]
    r = get(proxy.port, "/gate/other-command", jar)
    assert r.admitted and r.header(COMMAND) is None and not cleared(r, "gate"), r
    assert get(proxy.port, "/gate/page", jar).admitted


def test_the_ticket_the_decision_issued_is_revoked(proxy):
    # A new visitor's first request is the logout: the decision admits it with a new ticket,
    # which the response must not carry; the seat comes free again at once.
    r = get(proxy.port, "/fresh/logout", Jar())
    assert r.admitted and r.header(COMMAND) is None, r
    assert len(cleared(r, "fresh")) == 1 and not tickets_set(r, "fresh"), r.all("Set-Cookie")
    assert admitted_until_queued(proxy, "fresh") == 1


def test_the_command_is_read_in_any_case_among_others(proxy):
    jar = gate[2]
    old = jar.header()
    r = get(proxy.port, "/gate/logout-mixed", jar)
    assert r.admitted and r.header(COMMAND) is None, r
    assert len(cleared(r, "gate")) == 1, r.all("Set-Cookie")
    # Refused: it arrives anew, behind the visitors waiting for the seat it freed.
    r = get(proxy.port, "/gate/page", headers={"Cookie": old})
    assert r.status == 202 and r.waiting, f"the revoked ticket passed: {r}"


def test_a_header_ticket_is_revoked_and_not_sent_back(proxy):
    r = get(proxy.port, "/api/page")
    ticket = r.header(TICKET)
    assert r.admitted and ticket, r
    assert get(proxy.port, "/api/page", headers={TICKET: ticket}).admitted
    r = get(proxy.port, "/api/logout", headers={TICKET: ticket})
    assert r.admitted and r.header(COMMAND) is None, r
    assert r.header(TICKET) is None and len(cleared(r, "api")) == 1, r.headers
    # A new client whose first request is the logout: the ticket its decision issued is
    # revoked, and neither sent as the header nor as the cookie.
    r = get(proxy.port, "/api/logout")
    assert r.admitted and r.header(COMMAND) is None, r
    assert r.header(TICKET) is None, f"the revoked ticket was sent: {r.headers}"
    assert len(cleared(r, "api")) == 1 and not tickets_set(r, "api"), r.all("Set-Cookie")
    # The old ticket arrives anew: it takes the free seat with a new ticket, and a second
    # request holding it then waits.
    r = get(proxy.port, "/api/page", headers={TICKET: ticket})
    assert r.admitted and r.header(TICKET) not in (None, ticket), r
    r = get(proxy.port, "/api/page", headers={TICKET: ticket})
    assert r.status == 202 and r.waiting, f"the revoked ticket passed: {r}"


def test_a_room_without_origin_commands_keeps_the_session(proxy):
    [jar] = fill(proxy, "plain", 1)
    r = get(proxy.port, "/plain/logout", jar)
    assert r.admitted and r.header(COMMAND) is None, r
    assert not cleared(r, "plain") and jar.cookies.get("__vr_plain"), r.all("Set-Cookie")
    assert get(proxy.port, "/plain/page", jar).admitted
    assert te.wait_until(lambda: "which the room does not accept" in proxy.log_text()
                         or "the room does not accept it" in proxy.log_text(), 3), \
        proxy.log_text()[-2000:]


def test_a_bypassed_request_takes_the_command_off_and_keeps_the_session(proxy):
    [jar] = fill(proxy, "ruled", 1)
    r = get(proxy.port, "/ruled/public/logout", jar)
    assert r.admitted and r.header(COMMAND) is None, r
    assert not cleared(r, "ruled"), r.all("Set-Cookie")
    assert get(proxy.port, "/ruled/page", jar).admitted
    assert get(proxy.port, "/ruled/page", Jar()).status == 202, "still full"


def raw_trailer_get(port, path, cookie=None):
    """The raw response to a GET asking for trailers (`TE: trailers`), as the client saw it."""
    lines = [f"GET {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "TE: trailers",
             "Connection: close"] + ([f"Cookie: {cookie}"] if cookie else [])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return out
            out += chunk


trail = {}


def test_a_trailer_never_carries_the_command_and_ends_the_session(proxy):
    # A new visitor: the decision issues a ticket (its Set-Cookie is out with the headers,
    # before the trailer comes), and the trailer's revoke ends that session.
    raw = raw_trailer_get(proxy.port, "/trail/trailer")
    assert raw.startswith(b"HTTP/1.1 200"), raw[:300]
    assert b"velvet-rope-command" not in raw.lower() and b"revoke" not in raw.lower(), \
        f"the command reached the client:\n{raw.decode('latin-1')}"
    issued = re.search(rb"(?im)^set-cookie: (__vr_trail=[^;\r\n]+)", raw)
    assert issued, f"no ticket issued:\n{raw.decode('latin-1')}"
    # Its seat is free (a new visitor takes it, the next one waits), and its ticket refused.
    jar = Jar()
    assert get(proxy.port, "/trail/page", jar).admitted, "the seat was not freed"
    assert get(proxy.port, "/trail/page", Jar()).status == 202, "one seat only"
    r = get(proxy.port, "/trail/page", headers={"Cookie": issued.group(1).decode()})
    assert r.status == 202 and r.waiting, f"the revoked ticket passed: {r}"
    trail["jar"] = jar


def test_a_trailer_ends_the_session_the_request_brought(proxy):
    assert "jar" in trail, "runs after the trailer test above"
    old = trail["jar"].header()
    raw = raw_trailer_get(proxy.port, "/trail/trailer", cookie=old)
    assert raw.startswith(b"HTTP/1.1 200"), raw[:300]
    assert b"velvet-rope-command" not in raw.lower(), raw.decode("latin-1")
    # Refused (with its session it would pass): it arrives anew, behind the visitors who
    # waited for the seat it freed.
    r = get(proxy.port, "/trail/page", headers={"Cookie": old})
    assert r.status == 202 and r.waiting and tickets_set(r, "trail"), \
        f"the revoked ticket passed: {r}"


def test_two_rooms_deciding_a_request_are_both_revoked(proxy):
    jar = Jar()
    r = get(proxy.port, "/both/page", jar)
    assert r.admitted and "__vr_site" in jar.cookies and "__vr_section" in jar.cookies, r
    old = jar.header()
    r = get(proxy.port, "/both/logout", jar)
    assert r.admitted and r.header(COMMAND) is None, r
    assert len(cleared(r, "site")) == 1 and len(cleared(r, "section")) == 1, \
        f"not cleared in both rooms: {r.all('Set-Cookie')}"
    assert not tickets_set(r, "site") and not tickets_set(r, "section"), r.all("Set-Cookie")
    # Both seats are free, and both old tickets refused.
    assert admitted_until_queued(proxy, "site") == 1
    assert admitted_until_queued(proxy, "section") == 1
    for room in ("site", "section"):
        r = get(proxy.port, f"/{room}/page", headers={"Cookie": old})
        assert r.status == 202 and r.waiting, f"the revoked ticket passed in {room}: {r}"


def test_a_room_that_does_not_take_commands_seeing_the_response_first(proxy):
    # `plain` (no origin commands) sees the response before `solo`: it takes the command
    # off, and `solo` still ends its session.
    r = get(proxy.port, "/mixed/logout", Jar())
    assert r.admitted and r.header(COMMAND) is None, r
    assert len(cleared(r, "solo")) == 1 and not tickets_set(r, "solo"), r.all("Set-Cookie")
    assert not cleared(r, "plain") and tickets_set(r, "plain"), r.all("Set-Cookie")
    assert admitted_until_queued(proxy, "solo") == 1


def test_a_trailer_through_two_rooms_ends_the_session_in_the_one_taking_commands(proxy):
    # `plain` sees the trailer first and takes it off; `duo` ends the session it issued.
    raw = raw_trailer_get(proxy.port, "/mixed-trailer/trailer")
    assert raw.startswith(b"HTTP/1.1 200"), raw[:300]
    assert b"velvet-rope-command" not in raw.lower() and b"revoke" not in raw.lower(), \
        f"the command reached the client:\n{raw.decode('latin-1')}"
    issued = re.search(rb"(?im)^set-cookie: (__vr_duo=[^;\r\n]+)", raw)
    assert issued and re.search(rb"(?im)^set-cookie: __vr_plain=", raw), raw.decode("latin-1")
    assert admitted_until_queued(proxy, "duo") == 1
    r = get(proxy.port, "/duo/page", headers={"Cookie": issued.group(1).decode()})
    assert r.status == 202 and r.waiting, f"the revoked ticket passed: {r}"


def test_a_route_with_the_filters_off_takes_the_command_off(proxy):
    # No room's filter runs here (Envoy does not make a disabled filter for the route): the
    # header_mutation filter of the README's configuration takes the command off the headers
    # and the trailers.
    r = get(proxy.port, "/elsewhere/logout")
    assert r.admitted, r
    assert r.header(COMMAND) is None, f"the client saw the command: {r.headers}"
    raw = raw_trailer_get(proxy.port, "/elsewhere/trailer")
    assert raw.startswith(b"HTTP/1.1 200"), raw[:300]
    # The origin's `Trailer: Velvet-Rope-Command` announcement passes (that filter removes
    # whole headers only), never the command: no header or trailer line of that name.
    assert not re.search(rb"(?im)^velvet-rope-command\s*:", raw) and b"revoke" not in raw, \
        f"the command reached the client:\n{raw.decode('latin-1')}"


def test_envoy_shuts_down_cleanly(proxy):
    assert proxy.stop() == 0, proxy.log_text()[-3000:]
    assert "panic" not in proxy.log_text().lower(), proxy.log_text()[-3000:]
