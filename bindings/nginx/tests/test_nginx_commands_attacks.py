#!/usr/bin/env python3
"""Attacks on origin commands through Debian's nginx, from an adversarial review (each
failed before its fix):
- a response cached by proxy_cache kept the command: every later visitor served the cached
  copy had its own session revoked (the origin asked for one visitor's). A response carrying
  a command is no longer stored, and a command in a cached response is not followed.
- `Velvet-Rope-Command` as a response trailer (`add_trailer`) reached the client: the header
  filter looked at the headers only. Now taken off the trailers, and `revoke` followed (the
  header is out by then: the cookie stays, refused).
- an origin answering `revoke` together with `X-Accel-Redirect` (a logout handing the goodbye
  page to nginx): nginx never copies the upstream's other headers, so the session went on.
  Now followed, whether the redirected location answers itself (`return`), proxies again
  or is the room's too, and the final response clears the cookie (a redirect or an error
  without a command changes nothing: guards, which passed before).
- the same with `proxy_intercept_errors` and an `error_page`.

Python standard library only; prints `N passed, M failed` last and exits 1 on any failure.
"""

import base64
import http.server
import os
import re
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_nginx as tn  # noqa: E402
from test_nginx import Jar, get  # noqa: E402

WATCHDOG_SECS = 120
COMMAND = "Velvet-Rope-Command"


def room(name, total):
    return f"""
[[rooms]]
name = "{name}"
total_active_users = {total}
new_users_per_minute = 1000
session_duration = 90
refresh_interval = 1
queueing_status_code = 202
enabled_origin_commands = ["revoke"]
[rooms.cookie]
secure = false
"""


def rooms_config(secret):
    return f"""
[[tickets.keys]]
id = 1
secret = "{secret}"
""" + "".join(room(name, 3) for name in ("cached", "tr", "xa", "xp", "xs", "ie", "ip"))


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
    access_log off;
    client_body_temp_path {prefix}/tmp/body;
    proxy_temp_path       {prefix}/tmp/proxy;
    fastcgi_temp_path     {prefix}/tmp/fastcgi;
    uwsgi_temp_path       {prefix}/tmp/uwsgi;
    scgi_temp_path        {prefix}/tmp/scgi;
    proxy_cache_path      {prefix}/tmp/cache keys_zone=pages:1m;
    default_type text/plain;

    velvet_rope_config {prefix}/conf/velvet-rope.toml;

    server {{
        listen 127.0.0.1:{port} reuseport;

        location /cached/ {{ velvet_rope cached; proxy_cache pages; proxy_cache_valid 200 1m;
                             {origin} }}
        location /tr/     {{ velvet_rope tr; {origin} }}
        location = /tr/logout {{ velvet_rope tr; add_trailer {COMMAND} revoke; {origin} }}
        location /free-tr/ {{ add_trailer {COMMAND} revoke; {origin} }}
        # X-Accel-Redirect: to a location answering itself, or proxying again.
        location /xa/     {{ velvet_rope xa; {origin} }}
        location /xp/     {{ velvet_rope xp; {origin} }}
        location /xs/     {{ velvet_rope xs; {origin} }}
        location /bye/    {{ internal; return 200 "bye {tn.ORIGIN}\\n"; }}
        location /byeproxy/ {{ internal; {origin} }}
        # Intercepted errors: the error page answers itself, or is proxied.
        location /ie/     {{ velvet_rope ie; proxy_intercept_errors on;
                             error_page 403 = /bye/; {origin} }}
        location /ip/     {{ velvet_rope ip; proxy_intercept_errors on;
                             error_page 403 = /byeproxy/; {origin} }}
        location = /vr-status {{ velvet_rope_status; }}
    }}
}}
"""


class Origin(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # The origin revokes the first visitor that logs out only: a second revocation can only
    # come from a copy of that first answer.
    logouts = 0

    def do_GET(self):
        body = f"{tn.ORIGIN} {self.path}\n".encode()
        status = 200
        extra = [("Cache-Control", "max-age=60")]
        if self.path.startswith("/cached/logout"):
            Origin.logouts += 1
            if Origin.logouts == 1:
                extra.append((COMMAND, "revoke"))
        elif self.path.startswith(("/xa/logout", "/xp/logout")):
            bye = "/bye/" if self.path.startswith("/xa/") else "/byeproxy/"
            extra = [("X-Accel-Redirect", bye), (COMMAND, "revoke")]
        elif self.path.startswith("/xs/logout"):
            extra = [("X-Accel-Redirect", "/xs/goodbye"), (COMMAND, "revoke")]
        elif self.path.startswith("/xa/download"):
            extra = [("X-Accel-Redirect", "/bye/")]
        elif self.path.startswith(("/ie/logout", "/ip/logout")):
            status = 403
            extra = [(COMMAND, "revoke")]
        elif self.path.startswith("/ie/forbidden"):
            status = 403
            extra = []
        self.send_response(status)
        for k, v in extra:
            self.send_header(k, v)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class OriginServer(http.server.ThreadingHTTPServer):
    daemon_threads = True


class Nginx(tn.Nginx):
    def __init__(self):
        self.prefix = tn.tempfile.mkdtemp(prefix="velvet-rope-nginx-cmd-attacks-")
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

    def start(self):
        """As test_nginx's, but proxy_cache adds a cache manager and loader to the workers."""
        self.stderr = open(os.path.join(self.prefix, "logs", "stderr.log"), "w")
        self.proc = tn.subprocess.Popen(
            [tn.NGINX, "-p", self.prefix, "-c", self.conf, "-g", "daemon off;"],
            stdout=self.stderr, stderr=tn.subprocess.STDOUT)
        ok = tn.wait_until(lambda: self.proc.poll() is not None or self.listening(), 10)
        if self.proc.poll() is not None or not ok:
            raise RuntimeError(f"nginx did not start: {self.log_tail()}")
        if not tn.wait_until(lambda: len(tn.children(self.proc.pid)) >= 2, 5):
            raise RuntimeError("nginx did not start its workers")


def raw_get(port, path, cookie=None):
    """The whole response, bytes as sent (HTTP/1.1, so trailers come with a chunked body)."""
    lines = [f"GET {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "TE: trailers",
             "Connection: close"]
    if cookie:
        lines.append(f"Cookie: {cookie}")
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return out
            out += chunk


def cleared(resp, name):
    return [c for c in resp.all("Set-Cookie")
            if c.startswith(f"__vr_{name}=;") and re.search(r"(?i)max-age=0(\D|$)", c)]


class Suite:
    def __init__(self, ngx):
        self.ngx = ngx
        self.port = ngx.port

    def visitor(self, name):
        jar = Jar()
        r = get(self.port, f"/{name}/page", jar)
        assert r.admitted and f"__vr_{name}" in jar.cookies, r
        return jar

    def revoked(self, name, jar):
        """Whether the jar's ticket is refused now (stats: revocations made)."""
        time.sleep(1.3)
        return self.ngx.room_stats(name)["revocations"]["made"]

    def test_a_cached_revoke_is_not_replayed_on_other_visitors(self):
        first, second = self.visitor("cached"), self.visitor("cached")
        r = get(self.port, "/cached/logout", first)
        assert r.admitted and r.header(COMMAND) is None and cleared(r, "cached"), r
        assert self.revoked("cached", first) == 1
        # The second visitor is served the cached copy: its session is not the origin's
        # business of that first response.
        r = get(self.port, "/cached/logout", second)
        assert r.admitted, r
        made = self.revoked("cached", second)
        assert made == 1 and not cleared(r, "cached"), \
            f"the cached command revoked another visitor (made {made}, {r.all('Set-Cookie')})"

    def test_a_trailer_never_carries_the_command_to_the_client(self):
        jar = self.visitor("tr")
        raw = raw_get(self.port, "/tr/logout", jar.header())
        assert raw.startswith(b"HTTP/1.1 200"), raw[:200]
        assert b"transfer-encoding: chunked" in raw.lower() and b"\r\n0\r\n" in raw, \
            f"not a chunked response: {raw[:400]!r}"
        assert b"velvet-rope-command" not in raw.lower(), \
            f"the command reached the client:\n{raw.decode('latin-1')}"
        made = self.revoked("tr", jar)
        assert made == 1, f"the trailer's revoke was not followed (made {made})"

    def test_x_accel_redirect_with_revoke_ends_the_session(self):
        jar = self.visitor("xa")
        r = get(self.port, "/xa/logout", jar)
        assert r.status == 200 and r.body.startswith("bye"), r
        assert r.header(COMMAND) is None, r
        made = self.revoked("xa", jar)
        assert made == 1, f"the origin's revoke was dropped with X-Accel-Redirect (made {made})"
        assert cleared(r, "xa"), f"the cookie is not cleared: {r.all('Set-Cookie')}"

    def test_x_accel_redirect_to_a_proxied_location_with_revoke_ends_the_session(self):
        """The redirected location makes an upstream of its own, in place of the first."""
        jar = self.visitor("xp")
        r = get(self.port, "/xp/logout", jar)
        assert r.admitted and "/byeproxy/" in r.body, r
        assert r.header(COMMAND) is None, r
        made = self.revoked("xp", jar)
        assert made == 1, f"the origin's revoke was dropped with X-Accel-Redirect (made {made})"
        assert cleared(r, "xp"), f"the cookie is not cleared: {r.all('Set-Cookie')}"

    def test_x_accel_redirect_into_the_same_room_ends_the_session(self):
        """The redirected location is the room's too: its decision stands (no new one), and
        its response clears the cookie."""
        jar = self.visitor("xs")
        r = get(self.port, "/xs/logout", jar)
        assert r.admitted and "/xs/goodbye" in r.body, r
        assert r.header(COMMAND) is None, r
        made = self.revoked("xs", jar)
        assert made == 1, f"the origin's revoke was dropped with X-Accel-Redirect (made {made})"
        assert cleared(r, "xs") and len(r.all("Set-Cookie")) == 1, \
            f"the cookie is not cleared: {r.all('Set-Cookie')}"

    def test_a_trailer_command_outside_any_room_is_taken_off(self):
        raw = raw_get(self.port, "/free-tr/page")
        assert raw.startswith(b"HTTP/1.1 200") and b"\r\n0\r\n" in raw, raw[:400]
        assert b"velvet-rope-command" not in raw.lower(), raw.decode("latin-1")

    def test_x_accel_redirect_without_a_command_keeps_the_session(self):
        """(A guard: what the two checks above must leave alone.)"""
        jar = self.visitor("xa")
        before = self.revoked("xa", jar)
        r = get(self.port, "/xa/download", jar)
        assert r.status == 200 and r.body.startswith("bye"), r
        assert not cleared(r, "xa"), r
        assert self.revoked("xa", jar) == before, "a redirect without a command revoked"
        assert get(self.port, "/xa/page", jar).admitted

    def test_an_intercepted_error_with_revoke_ends_the_session(self):
        jar = self.visitor("ie")
        r = get(self.port, "/ie/logout", jar)
        assert r.status == 200 and r.body.startswith("bye"), r
        assert r.header(COMMAND) is None, r
        made = self.revoked("ie", jar)
        assert made == 1, f"the origin's revoke was dropped by proxy_intercept_errors (made {made})"
        assert cleared(r, "ie"), f"the cookie is not cleared: {r.all('Set-Cookie')}"

    def test_an_intercepted_error_proxied_anew_with_revoke_ends_the_session(self):
        jar = self.visitor("ip")
        r = get(self.port, "/ip/logout", jar)
        assert r.admitted and "/byeproxy/" in r.body, r
        assert r.header(COMMAND) is None, r
        made = self.revoked("ip", jar)
        assert made == 1, f"the origin's revoke was dropped by proxy_intercept_errors (made {made})"
        assert cleared(r, "ip"), f"the cookie is not cleared: {r.all('Set-Cookie')}"

    def test_an_intercepted_error_without_a_command_keeps_the_session(self):
        """(A guard, likewise.)"""
        jar = self.visitor("ie")
        before = self.revoked("ie", jar)
        r = get(self.port, "/ie/forbidden", jar)
        assert r.status == 200 and r.body.startswith("bye"), r
        assert not cleared(r, "ie"), r
        assert self.revoked("ie", jar) == before, "an error without a command revoked"
        assert get(self.port, "/ie/page", jar).admitted

    def test_stops_cleanly(self):
        assert self.ngx.stop() == 0
        bad = [line for line in self.ngx.log().splitlines()
               if re.search(r"\[(alert|crit|emerg)\]|exited on signal", line)]
        assert not bad, "error log:\n" + "\n".join(bad[:10])


ORDER = [
    "test_a_cached_revoke_is_not_replayed_on_other_visitors",
    "test_a_trailer_never_carries_the_command_to_the_client",
    "test_x_accel_redirect_with_revoke_ends_the_session",
    "test_x_accel_redirect_to_a_proxied_location_with_revoke_ends_the_session",
    "test_x_accel_redirect_into_the_same_room_ends_the_session",
    "test_a_trailer_command_outside_any_room_is_taken_off",
    "test_x_accel_redirect_without_a_command_keeps_the_session",
    "test_an_intercepted_error_with_revoke_ends_the_session",
    "test_an_intercepted_error_proxied_anew_with_revoke_ends_the_session",
    "test_an_intercepted_error_without_a_command_keeps_the_session",
    "test_stops_cleanly",
]


def main():
    return tn.run_suite(Nginx, Suite, ORDER, WATCHDOG_SECS)


if __name__ == "__main__":
    sys.exit(main())
