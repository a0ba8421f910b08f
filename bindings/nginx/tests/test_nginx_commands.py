#!/usr/bin/env python3
"""Origin commands through Debian's real nginx (master + 2 workers): an origin behind
proxy_pass (Python's http.server) answers `Velvet-Rope-Command: revoke` on its /logout
routes.

In a room with `enabled_origin_commands = ["revoke"]` the client never sees the header, the
response clears the room's cookie (Max-Age=0) instead of carrying the module's own ticket,
the old ticket is refused by both workers from then on, and exactly one seat is freed: one
new visitor is admitted, the next one waits. The same holds for a ticket the request's own
decision issued, a ticket sent as the Velvet-Rope-Ticket header (and the module's
Velvet-Rope-Ticket response header is dropped), a decision remembered across an internal
redirect, a `return` nginx answers before the room decides, and an `auth_request` check
whose answer carries the command (allowed or denied: the client response follows it, in
the room of the location the check protects, even after an `error_page` moved the request
elsewhere). In a room without it, in a location without a room, and in a subrequest the
client response does not wait for (`mirror`), the header is taken off and the session
goes on.

Python standard library only; prints `N passed, M failed` last and exits 1 on any failure.
"""

import base64
import http.server
import os
import re
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_nginx as tn  # noqa: E402
from test_nginx import Jar, get  # noqa: E402

WATCHDOG_SECS = 120
COMMAND = "Velvet-Rope-Command"
TICKET = "Velvet-Rope-Ticket"
GATE_LIMIT = 3


def room(name, total, extra=""):
    return f"""
[[rooms]]
name = "{name}"
total_active_users = {total}
new_users_per_minute = 1000
session_duration = 90
refresh_interval = 1
queueing_status_code = 202
{extra}
[rooms.cookie]
secure = false
"""


REVOKE = 'enabled_origin_commands = ["revoke"]'


def rooms_config(secret):
    return f"""
[[tickets.keys]]
id = 1
secret = "{secret}"
""" + (room("gate", GATE_LIMIT, REVOKE) + room("plain", 3) + room("fresh", 1, REVOKE)
       + room("mixed", 1, REVOKE) + room("redir", 1, REVOKE) + room("ret", 1, REVOKE)
       + room("authed", 1, REVOKE) + room("authdeny", 1, REVOKE) + room("mirrored", 1, REVOKE)
       + room("authslow", 3, REVOKE) + room("authint", 1, REVOKE)
       + room("authrej", 1, REVOKE + """
[[rooms.rules]]
name = "exports"
action = "reject"
paths = ["/authrej/export"]
""") + room("api", 1, REVOKE + "\nticket_header = true"))


def nginx_config(prefix, port, origin_port):
    origin = f"proxy_pass http://127.0.0.1:{origin_port};"
    return f"""
load_module {tn.MODULE};
user root;
worker_processes 2;
error_log {prefix}/logs/error.log info;
pid {prefix}/logs/nginx.pid;
events {{ worker_connections 256; }}
http {{
    log_format  vr  '$pid $request_uri $status';
    access_log  {prefix}/logs/access.log vr;
    client_body_temp_path {prefix}/tmp/body;
    proxy_temp_path       {prefix}/tmp/proxy;
    fastcgi_temp_path     {prefix}/tmp/fastcgi;
    uwsgi_temp_path       {prefix}/tmp/uwsgi;
    scgi_temp_path        {prefix}/tmp/scgi;
    default_type text/plain;

    velvet_rope_config {prefix}/conf/velvet-rope.toml;

    server {{
        # reuseport: one listening socket per worker, so fresh connections spread over both.
        listen 127.0.0.1:{port} reuseport;

        location /gate/   {{ velvet_rope gate; {origin} }}
        location /plain/  {{ velvet_rope plain; {origin} }}
        location /fresh/  {{ velvet_rope fresh; {origin} }}
        location /mixed/  {{ velvet_rope mixed; {origin} }}
        location /api/    {{ velvet_rope api; {origin} }}
        location /free/   {{ {origin} }}
        # Decided in the room, then redirected into a location without one.
        location /redir/  {{ velvet_rope redir; try_files /nothing-here @origin; }}
        location @origin  {{ {origin} }}
        # Answered in the rewrite phase, before the room decides: the location's room.
        location = /ret/logout {{
            velvet_rope ret; add_header {COMMAND} revoke; return 200 "bye\\n";
        }}
        location /ret/    {{ velvet_rope ret; {origin} }}
        # An auth subrequest whose answer carries the command when the URI asks for it
        # (the origin's /check/ routes), with a 401 for URIs ending in -denied, which an
        # error_page sends to a location without a room.
        location /authed/   {{ velvet_rope authed; auth_request /auth-check; {origin} }}
        location /authdeny/ {{
            velvet_rope authdeny; auth_request /auth-check; error_page 401 /please-log-in;
            {origin}
        }}
        location /authslow/ {{ velvet_rope authslow; auth_request /auth-check; {origin} }}
        location /authrej/  {{ velvet_rope authrej; auth_request /auth-check; {origin} }}
        # The check's 401 intercepted and answered by nginx: the command in the upstream
        # response nginx replaced.
        location /authint/  {{ velvet_rope authint; auth_request /auth-check-int; {origin} }}
        location = /auth-check-int {{
            internal; proxy_pass http://127.0.0.1:{origin_port}/check$request_uri;
            proxy_intercept_errors on; error_page 401 = @auth-denied;
        }}
        location @auth-denied {{ return 401; }}
        location = /please-log-in {{ return 401 "log in\n"; }}
        location = /auth-check {{
            internal; proxy_pass http://127.0.0.1:{origin_port}/check$request_uri;
        }}
        # A mirror subrequest (background: the client response does not wait for it).
        location /mirrored/ {{ velvet_rope mirrored; mirror /mirror-sink; {origin} }}
        location = /mirror-sink {{ internal; proxy_pass http://127.0.0.1:{origin_port}/sink/logout; }}
        location = /vr-status {{ velvet_rope_status; }}
    }}
}}
"""


class Origin(http.server.BaseHTTPRequestHandler):
    """The origin: `/logout` routes end the session (and the origin's own cookie)."""

    def do_GET(self):
        if self.path.startswith("/check/"):
            # The auth check: allows (204) or denies (401), revoking for a `-by-auth` URI.
            self.send_response(401 if self.path.endswith("-denied") else 204)
            if "-by-auth" in self.path:
                self.send_header(COMMAND, "revoke")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if "-slow" in self.path:
            time.sleep(1.5)
        body = f"{tn.ORIGIN} {self.path}\n".encode()
        self.send_response(200)
        if self.path.endswith("/logout"):
            self.send_header(COMMAND, "revoke")
            self.send_header("Set-Cookie", "app_session=; Max-Age=0; Path=/")
        elif self.path.endswith("/logout-mixed"):
            # Any case, among other commands.
            self.send_header(COMMAND.lower(), "hello, REVOKE")
        elif self.path.endswith("/other-command"):
            self.send_header(COMMAND, "something-else")
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class OriginServer(http.server.ThreadingHTTPServer):
    request_queue_size = 128
    daemon_threads = True


class Nginx(tn.Nginx):
    def __init__(self):
        self.prefix = tn.tempfile.mkdtemp(prefix="velvet-rope-nginx-cmd-")
        self.port = tn.free_port()
        self.proc = None
        self.origin = OriginServer(("127.0.0.1", 0), Origin)
        threading.Thread(target=self.origin.serve_forever, daemon=True).start()
        for d in ("conf", "logs", "tmp"):
            os.makedirs(os.path.join(self.prefix, d), exist_ok=True)
        secret = base64.urlsafe_b64encode(os.urandom(32)).rstrip(b"=").decode()
        self.write("conf/velvet-rope.toml", rooms_config(secret))
        self.conf = self.write("conf/nginx.conf", nginx_config(
            self.prefix, self.port, self.origin.server_address[1]))

    def close_origin(self):
        self.origin.shutdown()
        self.origin.server_close()

    def served_by(self, uri):
        """The pid of the worker that served `uri` (its access log line may come just after
        the response)."""
        def pid():
            for line in self.log("access.log").splitlines():
                if line.split()[1:2] == [uri]:
                    return int(line.split()[0])
            return None
        found = tn.wait_until(pid, 3, 0.02)
        assert found, f"{uri} is not in the access log"
        return found


def cleared(resp, room):
    """The Set-Cookie lines clearing the room's cookie."""
    return [c for c in resp.all("Set-Cookie")
            if c.startswith(f"__vr_{room}=;") and re.search(r"(?i)max-age=0(\D|$)", c)]


def tickets_set(resp, room):
    """The Set-Cookie lines giving the room's cookie a value."""
    return [c for c in resp.all("Set-Cookie")
            if c.startswith(f"__vr_{room}=") and not c.startswith(f"__vr_{room}=;")]


def origin_page(resp):
    return resp.status == 200 and tn.ORIGIN in resp.body


class Suite:
    def __init__(self, ngx):
        self.ngx = ngx
        self.port = ngx.port
        self.gate = []              # the gate's three visitors

    def stats(self, room):
        time.sleep(1.3)             # every worker ticks once a second
        return self.ngx.room_stats(room)

    def fill(self, room, n):
        jars = []
        for i in range(n):
            jar = Jar()
            r = get(self.port, f"/{room}/page", jar)
            assert origin_page(r) and f"__vr_{room}" in jar.cookies, f"visitor {i + 1}: {r}"
            jars.append(jar)
        return jars

    def admitted_until_queued(self, room):
        """New visitors admitted to `room` before one is queued."""
        for n in range(10):
            r = get(self.port, f"/{room}/new-{n}", Jar())
            if not origin_page(r):
                assert r.status == 202 and r.waiting, f"neither admitted nor queued: {r}"
                return n
        raise AssertionError(f"room {room} never queued")

    # -- a room that accepts the command ------------------------------------------------

    def test_the_gate_fills_up(self):
        self.gate = self.fill("gate", GATE_LIMIT)
        st = self.stats("gate")
        assert st["active_users"] == GATE_LIMIT and st["free_slots"] == 0, st
        assert st["queue_length"] == 0, st

    def test_logout_clears_the_cookie_and_the_client_never_sees_the_command(self):
        jar = self.gate[0]
        self.revoked_cookie = jar.header()
        r = get(self.port, "/gate/logout", jar)
        assert origin_page(r), r
        assert r.header(COMMAND) is None, f"the client saw the command: {r.headers}"
        assert len(cleared(r, "gate")) == 1, f"no cookie clearing the ticket: {r.all('Set-Cookie')}"
        assert not tickets_set(r, "gate"), r.all("Set-Cookie")
        assert "app_session=; Max-Age=0; Path=/" in r.all("Set-Cookie"), "the origin's own cookie"
        assert "__vr_gate" not in jar.cookies
        self.logout_pid = self.ngx.served_by("/gate/logout")

    def test_exactly_one_seat_is_freed(self):
        st = self.stats("gate")
        assert st["active_users"] == GATE_LIMIT - 1 and st["free_slots"] == 1, st
        assert st["revocations"]["made"] == 1, st
        assert self.admitted_until_queued("gate") == 1
        st = self.stats("gate")
        assert st["active_users"] == GATE_LIMIT and st["queue_length"] == 1, st

    def test_the_old_ticket_is_refused_by_both_workers(self):
        workers = tn.children(self.ngx.proc.pid)
        assert len(workers) == 2, workers
        seen = set()
        for i in range(40):
            uri = f"/gate/after-{i}"
            r = get(self.port, uri, headers={"Cookie": self.revoked_cookie})
            assert r.status == 202 and r.waiting, f"the revoked ticket passed: {r}"
            seen.add(self.ngx.served_by(uri))
            if seen == workers:
                break
        assert seen == workers, f"refused by {seen} only, workers {workers}"
        assert self.logout_pid in workers
        # The other visitors keep their seats.
        for jar in self.gate[1:]:
            assert origin_page(get(self.port, "/gate/page", jar))

    def test_the_command_is_read_in_any_case_among_others(self):
        [jar] = self.fill("mixed", 1)
        r = get(self.port, "/mixed/logout-mixed", jar)
        assert origin_page(r) and r.header(COMMAND) is None, r
        assert len(cleared(r, "mixed")) == 1, r.all("Set-Cookie")
        st = self.stats("mixed")
        assert st["active_users"] == 0 and st["revocations"]["made"] == 1, st
        assert self.admitted_until_queued("mixed") == 1

    def test_another_command_is_taken_off_and_ignored(self):
        jar = self.gate[2]
        r = get(self.port, "/gate/other-command", jar)
        assert origin_page(r) and r.header(COMMAND) is None and not cleared(r, "gate"), r
        assert origin_page(get(self.port, "/gate/page", jar))

    def test_the_ticket_the_decision_issued_is_revoked(self):
        # A new visitor's first request is the logout: the decision admits it with a new
        # ticket, which the response must not carry; the seat comes free again.
        r = get(self.port, "/fresh/logout", Jar())
        assert origin_page(r) and r.header(COMMAND) is None, r
        assert len(cleared(r, "fresh")) == 1 and not tickets_set(r, "fresh"), r.all("Set-Cookie")
        st = self.stats("fresh")
        assert st["active_users"] == 0 and st["revocations"]["made"] == 1, st
        assert self.admitted_until_queued("fresh") == 1

    def test_a_header_ticket_is_revoked_and_not_sent_back(self):
        # An API client keeping no cookies: its ticket comes as Velvet-Rope-Ticket.
        r = get(self.port, "/api/page")
        ticket = r.header(TICKET)
        assert origin_page(r) and ticket, r
        assert origin_page(get(self.port, "/api/page", headers={TICKET: ticket}))
        r = get(self.port, "/api/logout", headers={TICKET: ticket})
        assert origin_page(r) and r.header(COMMAND) is None, r
        assert r.header(TICKET) is None and len(cleared(r, "api")) == 1, r.headers
        # A new client whose first request is the logout: the ticket its decision issued is
        # revoked, and neither sent as the header nor as the cookie.
        r = get(self.port, "/api/logout")
        assert origin_page(r) and r.header(COMMAND) is None, r
        assert r.header(TICKET) is None, f"the revoked ticket was sent: {r.headers}"
        assert len(cleared(r, "api")) == 1 and not tickets_set(r, "api"), r.all("Set-Cookie")
        st = self.stats("api")
        assert st["active_users"] == 0 and st["revocations"]["made"] == 2, st
        # The old ticket arrives anew: it takes the free seat with a new ticket, and a second
        # request holding it then waits.
        r = get(self.port, "/api/page", headers={TICKET: ticket})
        assert origin_page(r) and r.header(TICKET) not in (None, ticket), r
        r = get(self.port, "/api/page", headers={TICKET: ticket})
        assert r.status == 202 and r.waiting, f"the revoked ticket passed: {r}"

    def test_a_decision_is_followed_across_an_internal_redirect(self):
        # Decided in room `redir`, redirected to a named location without a room (the
        # request's ctx is gone from r->ctx), where the origin answers.
        [jar] = self.fill("redir", 1)
        r = get(self.port, "/redir/logout", jar)
        assert origin_page(r) and r.header(COMMAND) is None, r
        assert len(cleared(r, "redir")) == 1, r.all("Set-Cookie")
        st = self.stats("redir")
        assert st["active_users"] == 0 and st["revocations"]["made"] == 1, st

    def test_a_return_before_the_decision_revokes_in_the_locations_room(self):
        [jar] = self.fill("ret", 1)
        cookie = jar.header()
        r = get(self.port, "/ret/logout", jar)
        assert r.status == 200 and r.body == "bye\n" and r.header(COMMAND) is None, r
        assert len(cleared(r, "ret")) == 1, r.all("Set-Cookie")
        r = get(self.port, "/ret/page", headers={"Cookie": cookie})
        assert origin_page(r), "the seat was free for the visitor arriving anew"
        r = get(self.port, "/ret/page", headers={"Cookie": cookie})
        assert r.status == 202, f"a second visitor with the revoked ticket: {r}"

    # -- where the command is not followed ------------------------------------------------

    def test_a_room_without_origin_commands_keeps_the_session(self):
        [jar] = self.fill("plain", 1)
        r = get(self.port, "/plain/logout", jar)
        assert origin_page(r) and r.header(COMMAND) is None, r
        assert not cleared(r, "plain") and "__vr_plain" in jar.cookies, r.all("Set-Cookie")
        assert origin_page(get(self.port, "/plain/page", jar))
        st = self.stats("plain")
        assert st["active_users"] == 1 and st["revocations"] is None, st
        assert tn.wait_until(lambda: "which the room does not accept" in self.ngx.log(), 3), \
            "no notice in the error log"

    def test_a_location_without_a_room_takes_the_command_off(self):
        r = get(self.port, "/free/logout", Jar(self.gate[2].cookies))
        assert origin_page(r) and r.header(COMMAND) is None, r
        assert not cleared(r, "gate"), r.all("Set-Cookie")
        assert origin_page(get(self.port, "/gate/page", self.gate[2]))

    def test_a_background_subrequests_command_is_taken_off_and_not_followed(self):
        # Every request here is mirrored to /sink/logout, whose answer revokes: the client
        # response does not wait for it, so it is not about the client response.
        [jar] = self.fill("mirrored", 1)
        assert origin_page(get(self.port, "/mirrored/page", jar))
        st = self.stats("mirrored")
        assert st["active_users"] == 1 and st["revocations"]["made"] == 0, st
        assert tn.wait_until(
            lambda: "in a subrequest's response is ignored" in self.ngx.log(), 3), \
            "no notice in the error log"

    # -- an auth_request check's answer --------------------------------------------------------

    def test_an_auth_checks_revoke_ends_the_session_with_the_client_response(self):
        [jar] = self.fill("authed", 1)
        cookie = jar.header()
        r = get(self.port, "/authed/page-by-auth", jar)
        assert origin_page(r) and r.header(COMMAND) is None, r
        assert len(cleared(r, "authed")) == 1 and not tickets_set(r, "authed"), \
            r.all("Set-Cookie")
        st = self.stats("authed")
        assert st["active_users"] == 0 and st["revocations"]["made"] == 1, st
        r = get(self.port, "/authed/page", headers={"Cookie": cookie})
        assert origin_page(r), "the seat was free for the visitor arriving anew"
        r = get(self.port, "/authed/page", headers={"Cookie": cookie})
        assert r.status == 202 and r.waiting, f"a second visitor with the revoked ticket: {r}"

    def test_a_denying_auth_checks_revoke_ends_the_session_in_its_locations_room(self):
        # The check denies and revokes; error_page sends the 401 to a location without a
        # room: the room of the location the check protected is the one revoked.
        [jar] = self.fill("authdeny", 1)
        cookie = jar.header()
        r = get(self.port, "/authdeny/page-by-auth-denied", jar)
        assert r.status == 401 and r.body == "log in\n" and r.header(COMMAND) is None, r
        assert len(cleared(r, "authdeny")) == 1, r.all("Set-Cookie")
        st = self.stats("authdeny")
        assert st["active_users"] == 0 and st["revocations"]["made"] == 1, st
        r = get(self.port, "/authdeny/page", headers={"Cookie": cookie})
        assert origin_page(r), "the seat was free for the visitor arriving anew"
        r = get(self.port, "/authdeny/page", headers={"Cookie": cookie})
        assert r.status == 202, f"a second visitor with the revoked ticket: {r}"

    def test_a_check_pending_for_one_request_revokes_nothing_for_others(self):
        # While one request's check has answered `revoke` and its origin takes 1.5 s, the
        # other requests its worker serves keep their sessions.
        [jar] = self.fill("authslow", 1)
        slow = {}

        def logout():
            slow["r"] = get(self.port, "/authslow/logout-by-auth-slow", Jar())

        t = threading.Thread(target=logout)
        t.start()
        time.sleep(0.3)
        for i in range(12):
            r = get(self.port, f"/authslow/page-{i}", jar)
            assert origin_page(r) and not cleared(r, "authslow"), r
        t.join()
        r = slow["r"]
        assert origin_page(r) and len(cleared(r, "authslow")) == 1, r
        st = self.stats("authslow")
        assert st["active_users"] == 1 and st["revocations"]["made"] == 1, st

    def test_a_checks_revoke_holds_when_the_room_refuses_the_request(self):
        # The check allows and revokes; the room's `reject` rule refuses the request (403):
        # the ticket the request brought is revoked all the same.
        [jar] = self.fill("authrej", 1)
        cookie = jar.header()
        r = get(self.port, "/authrej/export-by-auth", jar)
        assert r.status == 403 and r.header(COMMAND) is None, r
        assert len(cleared(r, "authrej")) == 1, r.all("Set-Cookie")
        st = self.stats("authrej")
        assert st["active_users"] == 0 and st["revocations"]["made"] == 1, st
        r = get(self.port, "/authrej/page", headers={"Cookie": cookie})
        assert origin_page(r), "the seat was free for the visitor arriving anew"
        r = get(self.port, "/authrej/page", headers={"Cookie": cookie})
        assert r.status == 202, f"a second visitor with the revoked ticket: {r}"

    def test_a_checks_revoke_in_a_response_nginx_replaced_is_followed(self):
        [jar] = self.fill("authint", 1)
        r = get(self.port, "/authint/page-by-auth-denied", jar)
        assert r.status == 401 and r.header(COMMAND) is None, r
        assert len(cleared(r, "authint")) == 1, r.all("Set-Cookie")
        st = self.stats("authint")
        assert st["active_users"] == 0 and st["revocations"]["made"] == 1, st

    def test_an_auth_check_without_the_command_changes_nothing(self):
        # A visitor holding a seat passes checks that answer without the command: its
        # session goes on (the room keeps the two revocations of the earlier tests only).
        made = self.stats("authslow")["revocations"]["made"]
        [jar] = self.fill("authslow", 1)
        for i in range(4):
            r = get(self.port, f"/authslow/again-{i}", jar)
            assert origin_page(r) and not cleared(r, "authslow"), r
        st = self.stats("authslow")
        assert st["revocations"]["made"] == made, st

    def test_stops_cleanly(self):
        rc = self.ngx.stop()
        assert rc == 0, f"master exit status {rc}"
        bad = [line for line in self.ngx.log().splitlines()
               if re.search(r"\[(alert|crit|emerg)\]|exited on signal", line)]
        assert not bad, "error log:\n" + "\n".join(bad[:10])


ORDER = [
    "test_the_gate_fills_up",
    "test_logout_clears_the_cookie_and_the_client_never_sees_the_command",
    "test_exactly_one_seat_is_freed",
    "test_the_old_ticket_is_refused_by_both_workers",
    "test_the_command_is_read_in_any_case_among_others",
    "test_another_command_is_taken_off_and_ignored",
    "test_the_ticket_the_decision_issued_is_revoked",
    "test_a_header_ticket_is_revoked_and_not_sent_back",
    "test_a_decision_is_followed_across_an_internal_redirect",
    "test_a_return_before_the_decision_revokes_in_the_locations_room",
    "test_a_room_without_origin_commands_keeps_the_session",
    "test_a_location_without_a_room_takes_the_command_off",
    "test_a_background_subrequests_command_is_taken_off_and_not_followed",
    "test_an_auth_checks_revoke_ends_the_session_with_the_client_response",
    "test_a_denying_auth_checks_revoke_ends_the_session_in_its_locations_room",
    "test_a_check_pending_for_one_request_revokes_nothing_for_others",
    "test_a_checks_revoke_holds_when_the_room_refuses_the_request",
    "test_a_checks_revoke_in_a_response_nginx_replaced_is_followed",
    "test_an_auth_check_without_the_command_changes_nothing",
    "test_stops_cleanly",
]


def main():
    return tn.run_suite(Nginx, Suite, ORDER, WATCHDOG_SECS)


if __name__ == "__main__":
    sys.exit(main())
