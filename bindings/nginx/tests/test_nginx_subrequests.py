#!/usr/bin/env python3
"""Subrequests into waiting rooms, against Debian's real nginx (master + 2 workers).

SSI (`include virtual`, nested, with `stub`, through an internal redirect), the addition
filter and a protected page including from its own room are decided for the client
request's visitor: a visitor admitted to the room sees the protected fragment, anyone else
gets nothing from it (an empty 403 for the subrequest: SSI shows its `stub` instead), and
no subrequest hands out a seat or a place in the queue. auth_request and mirror subrequests
(whose responses the client never sees) stay undecided: the client request is decided in
its own location's room, as before. In a room with rules, a client request a bypass rule
passed passes its subrequests into the room too; a subrequest is not matched against the
rules on its own (it would take a seat to do so), so it is held to the holder rule.

Python standard library only; prints `N passed, M failed` last and exits 1 on any failure.
"""

import base64
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_nginx as tn  # noqa: E402
from test_nginx import Jar, get  # noqa: E402

WATCHDOG_SECS = 120
SECRET = "SECRET-FRAGMENT"
PAGE = "PUBLIC-PAGE"
STUB = "JOIN-THE-QUEUE"


def room(name, total):
    return f"""
[[rooms]]
name = "{name}"
total_active_users = {total}
new_users_per_minute = 1000
session_duration = 90
refresh_interval = 1
queueing_status_code = 202
[rooms.cookie]
secure = false
"""


def rooms_config(secret):
    return f"""
[settings]
bucket_width_secs = 2

[[tickets.keys]]
id = 1
secret = "{secret}"
""" + room("shop", 1) + room("solo", 1) + room("gate", 1) + room("ruled", 1) + """
[[rooms.rules]]
name = "staff"
action = "bypass"
headers = { "X-Staff" = "yes" }

[[rooms.rules]]
name = "public"
action = "bypass"
paths = ["/ruled/public/"]
"""


def nginx_config(prefix, port, gate_port):
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
    default_type text/html;

    velvet_rope_config {prefix}/conf/velvet-rope.toml;

    server {{
        listen 127.0.0.1:{port};
        root {prefix}/html;

        # Public pages with SSI, and the protected fragments they include.
        location /page/    {{ ssi on; }}
        location /shop/    {{ velvet_rope shop; }}
        # Public locations that redirect internally into the room.
        location /free/    {{ try_files /nothing-here /shop/frag.html; }}
        location /missing/ {{ error_page 404 /shop/frag.html; }}
        # The addition filter's subrequest.
        location /added/   {{ add_before_body /shop/frag.html; }}
        # A protected page including fragments of its own room.
        location /solo/    {{ velvet_rope solo; ssi on; }}
        # A room with rules: a page including from its own room, and a bypassed prefix.
        location /ruled/   {{ velvet_rope ruled; ssi on; }}
        location = /vr-status {{ velvet_rope_status; }}
    }}

    server {{
        # The room at server level: the auth and mirror locations inherit it.
        listen 127.0.0.1:{gate_port};
        root {prefix}/html;
        velvet_rope gate;
        location /authed/  {{ auth_request /auth-check; }}
        location = /auth-check {{ internal; try_files /ok.html =403; }}
        location /mirrored/ {{ mirror /mirror-sink; try_files /authed/page.html =404; }}
        location = /mirror-sink {{ internal; try_files /ok.html =404; }}
    }}
}}
"""


PAGES = {
    "shop/frag.html": f"{SECRET}\n",
    "shop/page.html": f"{tn.ORIGIN} shop\n",
    "page/inc.html": f'<p>{PAGE}</p><!--# include virtual="/shop/frag.html" --><p>END</p>\n',
    "page/stub.html": f'<!--# block name="wait" -->{STUB}<!--# endblock -->'
                      f'<p>{PAGE}</p><!--# include virtual="/shop/frag.html" stub="wait" -->\n',
    "page/nested.html": f'<p>{PAGE}</p><!--# include virtual="/page/inner.html" -->\n',
    "page/inner.html": '<p>inner</p><!--# include virtual="/shop/frag.html" -->\n',
    "page/via-try-files.html": f'<p>{PAGE}</p><!--# include virtual="/free/x.html" -->\n',
    "page/via-error-page.html": f'<p>{PAGE}</p><!--# include virtual="/missing/x.html" -->\n',
    "added/page.html": f"<p>{PAGE}</p>\n",
    "solo/page.html": f'{tn.ORIGIN} solo <!--# include virtual="/solo/frag.html" -->'
                      '<!--# include virtual="/solo/frag.html" -->\n',
    "solo/frag.html": f"{SECRET}\n",
    "ruled/page.html": f'{tn.ORIGIN} ruled <!--# include virtual="/ruled/frag.html" -->'
                       '<!--# include virtual="/ruled/frag.html" -->\n',
    "ruled/frag.html": f"{SECRET}\n",
    "ruled/public/frag.html": f"{SECRET}\n",
    "page/ruled-public.html": f'<!--# block name="wait" -->{STUB}<!--# endblock -->'
                              f'<p>{PAGE}</p>'
                              '<!--# include virtual="/ruled/public/frag.html" stub="wait" -->\n',
    "authed/page.html": f"{tn.ORIGIN} authed\n",
    "ok.html": "ok\n",
}


class Nginx(tn.Nginx):
    def __init__(self):
        self.prefix = tn.tempfile.mkdtemp(prefix="velvet-rope-nginx-sr-")
        self.port, self.gate_port = tn.free_port(), tn.free_port()
        self.proc = None
        for d in ("conf", "logs", "tmp", "html/shop", "html/page", "html/added", "html/solo",
                  "html/authed", "html/ruled/public"):
            os.makedirs(os.path.join(self.prefix, d), exist_ok=True)
        for rel, text in PAGES.items():
            self.write(f"html/{rel}", text)
        secret = base64.urlsafe_b64encode(os.urandom(32)).rstrip(b"=").decode()
        self.write("conf/velvet-rope.toml", rooms_config(secret))
        self.conf = self.write("conf/nginx.conf",
                               nginx_config(self.prefix, self.port, self.gate_port))


class Suite:
    def __init__(self, ngx):
        self.ngx = ngx
        self.port = ngx.port
        self.holder = Jar()         # admitted to `shop` (its one place)
        self.waiter = Jar()         # queued in `shop`

    def shop(self):
        time.sleep(1.3)             # every worker ticks once a second
        return self.ngx.room_stats("shop")

    def test_the_shop_fills_up(self):
        assert get(self.port, "/shop/page.html", self.holder).admitted
        r = get(self.port, "/shop/page.html", self.waiter)
        assert r.status == 202 and r.waiting, f"the second visitor was not queued: {r}"
        self.before = self.shop()
        assert self.before["active_users"] == 1 and self.before["queue_length"] == 1, self.before

    def test_ssi_includes_the_fragment_for_an_admitted_visitor_only(self):
        r = get(self.port, "/page/inc.html", self.holder)
        assert r.status == 200 and PAGE in r.body and SECRET in r.body and "END" in r.body, r
        for label, jar in (("queued", self.waiter), ("new", Jar())):
            r = get(self.port, "/page/inc.html", jar)
            assert r.status == 200 and PAGE in r.body and "END" in r.body, f"{label}: {r}"
            assert SECRET not in r.body, f"a {label} visitor got the protected fragment: {r}"
            assert "<html" not in r.body.lower(), f"{label}: a page inside the page: {r}"
            assert not r.all("Set-Cookie"), f"{label}: a subrequest handed out a ticket: {r}"

    def test_the_stub_stands_in_for_the_fragment(self):
        r = get(self.port, "/page/stub.html", self.waiter)
        assert STUB in r.body and SECRET not in r.body, r
        r = get(self.port, "/page/stub.html", self.holder)
        assert SECRET in r.body and STUB not in r.body, r

    def test_nested_includes_and_redirects_into_the_room_are_decided(self):
        for page in ("nested", "via-try-files", "via-error-page"):
            r = get(self.port, f"/page/{page}.html", self.waiter)
            assert r.status == 200 and PAGE in r.body, f"{page}: {r}"
            assert SECRET not in r.body, f"{page}: the queued visitor got the fragment: {r}"
            r = get(self.port, f"/page/{page}.html", self.holder)
            assert SECRET in r.body, f"{page}: the admitted visitor lost the fragment: {r}"

    def test_the_addition_filter_is_decided(self):
        r = get(self.port, "/added/page.html", self.waiter)
        assert PAGE in r.body and SECRET not in r.body, r
        r = get(self.port, "/added/page.html", self.holder)
        assert PAGE in r.body and SECRET in r.body, r

    def test_subrequests_took_no_seat_and_no_place(self):
        after = self.shop()
        for k in ("active_users", "admitted_total", "queue_length"):
            assert after[k] == self.before[k], f"{k}: {self.before[k]} -> {after[k]}"
        # The room is still full for a new visitor; the holder still passes.
        r = get(self.port, "/shop/page.html", Jar())
        assert r.status == 202 and r.waiting, r
        assert get(self.port, "/shop/page.html", self.holder).admitted

    def test_a_renewal_in_a_subrequest_counts_once(self):
        # A new bucket (2 s): the holder's ticket is due for renewal. The include renews it
        # (the client response's header is already out, so the renewed ticket stays behind):
        # still one active user, however often it happens; the holder's next protected page
        # delivers the renewed ticket.
        time.sleep(2.2)
        for _ in range(2):
            r = get(self.port, "/page/inc.html", self.holder)
            assert SECRET in r.body and not r.all("Set-Cookie"), r
        st = self.shop()
        assert st["active_users"] == 1 and st["admitted_total"] == 1, st
        r = get(self.port, "/shop/page.html", self.holder)
        assert r.admitted and len(r.all("Set-Cookie")) == 1, r
        st = self.shop()
        assert st["active_users"] == 1 and st["admitted_total"] == 1, st

    def test_a_page_including_from_its_own_room_takes_one_seat(self):
        jar = Jar()
        r = get(self.port, "/solo/page.html", jar)
        assert r.status == 200 and r.body.count(SECRET) == 2, r
        assert len(r.all("Set-Cookie")) == 1, r.all("Set-Cookie")
        r = get(self.port, "/solo/page.html", Jar())
        assert r.status == 202 and r.waiting and SECRET not in r.body, r
        r = get(self.port, "/solo/page.html", jar)
        assert r.status == 200 and r.body.count(SECRET) == 2, r
        time.sleep(1.3)
        st = self.ngx.room_stats("solo")
        assert st["active_users"] == 1 and st["admitted_total"] == 1, st

    def test_a_bypassed_request_passes_its_subrequests_into_the_room(self):
        # Room `ruled` (one place) bypasses staff (by header) and /ruled/public/. Its one
        # place goes to a visitor; staff then see the page and its fragments, untouched.
        holder = Jar()
        r = get(self.port, "/ruled/page.html", holder)
        assert r.status == 200 and r.body.count(SECRET) == 2, r
        assert len(r.all("Set-Cookie")) == 1, r.all("Set-Cookie")
        for _ in range(2):
            r = get(self.port, "/ruled/page.html", Jar(), {"X-Staff": "yes"})
            assert r.status == 200 and r.body.count(SECRET) == 2, f"staff: {r}"
            assert not r.all("Set-Cookie"), f"a bypass handed out a ticket: {r}"
        r = get(self.port, "/ruled/page.html", Jar())
        assert r.status == 202 and r.waiting and SECRET not in r.body, r
        # A subrequest is not matched against the rules on its own (that would take a seat):
        # an include of a bypassed prefix from a public page is held to the holder rule.
        r = get(self.port, "/page/ruled-public.html", Jar())
        assert PAGE in r.body and STUB in r.body and SECRET not in r.body, r
        assert not r.all("Set-Cookie"), r
        r = get(self.port, "/page/ruled-public.html", holder)
        assert SECRET in r.body and STUB not in r.body, r
        # The staff visits and the includes took no seat and no place but the one waiter's.
        time.sleep(1.3)
        st = self.ngx.room_stats("ruled")
        assert st["active_users"] == 1 and st["admitted_total"] == 1, st
        assert st["queue_length"] == 1, st

    def test_auth_request_and_mirror_subrequests_stay_undecided(self):
        # Room `gate` (one place) at server level, inherited by the auth and mirror
        # locations: the client request is decided once, in the access phase's wake, and a
        # queued visitor gets the waiting page (not the auth subrequest's answer).
        port = self.ngx.gate_port
        first = Jar()
        r = get(port, "/authed/page.html", first)
        assert r.admitted and len(r.all("Set-Cookie")) == 1, r
        r = get(port, "/authed/page.html", Jar())
        assert r.status == 202 and r.waiting, f"a queued visitor got {r.status}: {r}"
        assert get(port, "/authed/page.html", first).admitted
        assert get(port, "/mirrored/page.html", first).admitted
        r = get(port, "/mirrored/page.html", Jar())
        assert r.status == 202 and r.waiting, r
        time.sleep(1.3)
        st = self.ngx.room_stats("gate")
        assert st["active_users"] == 1 and st["admitted_total"] == 1, st

    def test_stops_cleanly(self):
        rc = self.ngx.stop()
        assert rc == 0, f"master exit status {rc}"
        bad = [line for line in self.ngx.log().splitlines()
               if re.search(r"\[(alert|crit|emerg)\]|exited on signal", line)]
        assert not bad, "error log:\n" + "\n".join(bad[:10])


ORDER = [
    "test_the_shop_fills_up",
    "test_ssi_includes_the_fragment_for_an_admitted_visitor_only",
    "test_the_stub_stands_in_for_the_fragment",
    "test_nested_includes_and_redirects_into_the_room_are_decided",
    "test_the_addition_filter_is_decided",
    "test_subrequests_took_no_seat_and_no_place",
    "test_a_renewal_in_a_subrequest_counts_once",
    "test_a_page_including_from_its_own_room_takes_one_seat",
    "test_a_bypassed_request_passes_its_subrequests_into_the_room",
    "test_auth_request_and_mirror_subrequests_stay_undecided",
    "test_stops_cleanly",
]


def main():
    return tn.run_suite(Nginx, Suite, ORDER, WATCHDOG_SECS)


if __name__ == "__main__":
    sys.exit(main())
