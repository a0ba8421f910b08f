"""Origin commands through a real Envoy (`--concurrency 2`): the upstream (Python's
http.server) answers `Velvet-Rope-Command: revoke` on its /logout routes.

In a room with `enabled_origin_commands = ["revoke"]` the client never sees the header, the
response clears the room's cookie (Max-Age=0) instead of carrying the filter's own ticket,
the old ticket is refused from then on, and exactly one seat is freed: one new visitor is
admitted, the next one waits. The same holds for the ticket the request's own decision
issued and for a ticket sent as the Velvet-Rope-Ticket header (whose response header the
filter then drops). In a room without it, and for a request a `bypass` rule passed, the
header is taken off and the session goes on.
"""

import http.server
import json
import os
import re
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
""" + (room("gate", GATE_LIMIT, REVOKE) + room("plain", 3) + room("fresh", 1, REVOKE)
       + room("api", 1, REVOKE + "\nticket_header = true")
       + room("ruled", 1, REVOKE) + """
[[rooms.rules]]
name = "public"
action = "bypass"
paths = ["/ruled/public/"]
""")

ROOM_NAMES = ("gate", "plain", "fresh", "api", "ruled")


class Upstream(http.server.BaseHTTPRequestHandler):
    """The origin: `/logout` routes end the session (and the origin's own cookie)."""

    def do_GET(self):
        body = json.dumps({"origin": True, "path": self.path}).encode()
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


def bootstrap(port, admin_port, upstream_port, rooms_path):
    filters = [te.velvet_filter(f"velvet_{r}", r, rooms_path) for r in ROOM_NAMES]
    names = [f["name"] for f in filters]

    def route(prefix, on):
        return {
            "match": {"prefix": prefix},
            "route": {"cluster": "upstream"},
            "typed_per_filter_config": te.off(*[n for n in names if n != on]),
        }

    config = te.bootstrap(port, admin_port, upstream_port, filters)
    hcm = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
    hcm["typed_config"]["route_config"]["virtual_hosts"][0]["routes"] = (
        [route(f"/{r}/", f"velvet_{r}") for r in ROOM_NAMES] + [route("/", None)])
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


def test_envoy_shuts_down_cleanly(proxy):
    assert proxy.stop() == 0, proxy.log_text()[-3000:]
    assert "panic" not in proxy.log_text().lower(), proxy.log_text()[-3000:]
