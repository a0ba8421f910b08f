#!/usr/bin/env python3
"""The front-door conformance table (conformance/front_doors.{toml,json}) through real nginx.

Starts Debian's nginx with the module and the table's configuration, its routes written as
nginx's own routing (server names and locations naming the rooms with `velvet_rope`), the
realip module taking the client from X-Forwarded-For, and a tiny origin behind proxy_pass.
Every row of the table is sent as a raw HTTP/1.1 request (its target verbatim, its Host and
headers, `X-Forwarded-For: <row client>`), and the response is classified as the table's
header comment says it shows over HTTP:

    queue    -> the waiting page (the room's queueing_status_code, 503 here)
    admit    -> 200 from the origin with a new ticket (Set-Cookie)
    pass     -> 200 from the origin with a ticket, counted as "would have queued"
    bypass   -> 200 from the origin, no ticket, a bypass rule's count moved
    reject   -> 403, a reject rule's count moved
    unrouted -> 200 from the origin, no ticket, no room's counts moved

The room is read from the ticket's cookie name (`__vr_<room>`) or from the room whose
counters moved (the status location, read before and after each row). nginx runs two
workers: the rule tallies and "would have" counts are the room's, shared by both, so the
status location shows every row's counts whichever worker served the row or answers.

Then, through the same nginx: a header ticket holds a place in a room of one, a reject rule
answers problem details to a JSON client, and the status location shows each room's rule
tallies and a dry run's "would have queued".

Python standard library only; prints `N passed, M failed` last and exits 1 on any failure.
"""

import json
import os
import re
import socket
import sys
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_nginx as tn  # noqa: E402

WATCHDOG_SECS = 90
TABLE = os.path.join(tn.REPO, "conformance", "front_doors.json")
TABLE_CONFIG = os.path.join(tn.REPO, "conformance", "front_doors.toml")
ORIGIN_BODY = "origin\n"
TICKET_HEADER = "Velvet-Rope-Ticket"

# Appended to the table's configuration for the checks after the table (no routes: nginx
# names these rooms, and the table's rows never reach them): a room of one place that takes
# header tickets, and a room refusing a host.
EXTRA_ROOMS = """
[[rooms]]
name = "held"
total_active_users = 1
new_users_per_minute = 1000
session_duration = 90
refresh_interval = 1
queueing_status_code = 503
ticket_header = true

[[rooms]]
name = "hosts"
total_active_users = 1000
new_users_per_minute = 1000

[[rooms.rules]]
name = "abs"
action = "reject"
hosts = ["abs.example.com"]
"""

# The rooms that send a new ticket back in the Velvet-Rope-Ticket response header too.
TICKET_HEADER_ROOMS = {"api", "held"}

# The JSON waiting page rendered through the C ABI carries `ticket` (vr_engine_render_page_ex
# keeps the decision's Set-Cookie value). A waiter whose ticket did not change gets no
# `ticket` key: the C ABI takes no request ticket to echo (the Velvet-Rope-Ticket response
# header is sent whenever the ticket changes).
C_ABI_JSON_PAGE_HAS_TICKET = True

# Rows nginx cannot route the way the table expects, with why and what nginx does instead:
# name -> (verdict, room) asserted instead of the table's. Empty: nginx routes every row of
# the table as the engine's own routes do (checked at start-up against the table's names).
NGINX_DIFFERS = {}


def nginx_config(prefix, port, origin_port, extra_port):
    origin = f"proxy_pass http://127.0.0.1:{origin_port};"
    return f"""
load_module {tn.MODULE};
user root;
# Two workers: every count (rule tallies and "would have" counts among them) is the
# room's, shared by both.
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
    default_type text/plain;

    velvet_rope_config {prefix}/conf/front_doors.toml;

    # The table's clients come through a trusted proxy (127.0.0.1), as X-Forwarded-For.
    set_real_ip_from 127.0.0.1;
    real_ip_header X-Forwarded-For;

    # The table's routes as nginx routes. The origin is proxied rather than a `return` in
    # these locations: `return` answers in the rewrite phase, before the room decides.
    # Which worker answered (two of them share every count): the front's, not the origin's
    # (a server of this nginx too, whose header the proxy drops).
    add_header X-Worker $pid always;
    proxy_hide_header X-Worker;

    server {{
        # reuseport: the kernel spreads connections over both workers.
        listen 127.0.0.1:{port} default_server reuseport;
        server_name _;
        # path_case = "insensitive": case-insensitive prefixes.
        location ~* ^/shop {{ velvet_rope shop; {origin} }}
        location ~* ^/dry  {{ velvet_rope dry; {origin} }}
        location / {{ {origin} }}
    }}
    server {{
        listen 127.0.0.1:{port};
        server_name shop.example.com;
        velvet_rope shop;
        location / {{ {origin} }}
    }}
    server {{
        listen 127.0.0.1:{port};
        server_name api.example.com;
        velvet_rope api;
        location / {{ {origin} }}
    }}
    server {{
        # `*.events.example.com`: its subdomains, not the domain itself.
        listen 127.0.0.1:{port};
        server_name ~^.+\\.events\\.example\\.com$;
        velvet_rope events;
        location / {{ {origin} }}
    }}

    # The origin.
    server {{
        listen 127.0.0.1:{origin_port};
        location / {{ return 200 "{ORIGIN_BODY.strip()}\\n"; }}
    }}

    # Off the table: the status report and the header-ticket room.
    server {{
        listen 127.0.0.1:{extra_port} reuseport;
        location = /vr-status {{ velvet_rope_status; }}
        location /held/ {{ velvet_rope held; {origin} }}
        location /hosts/ {{ velvet_rope hosts; {origin} }}
        location = / {{ velvet_rope hosts; {origin} }}
    }}
}}
"""


class Nginx(tn.Nginx):
    def __init__(self):
        self.prefix = tn.tempfile.mkdtemp(prefix="velvet-rope-nginx-conf-")
        self.port, self.origin_port, self.extra_port = (tn.free_port(), tn.free_port(),
                                                        tn.free_port())
        self.proc = None
        for d in ("conf", "logs", "tmp"):
            os.makedirs(os.path.join(self.prefix, d), exist_ok=True)
        with open(TABLE_CONFIG) as f:
            self.write("conf/front_doors.toml", f.read() + EXTRA_ROOMS)
        self.conf = self.write("conf/nginx.conf", nginx_config(
            self.prefix, self.port, self.origin_port, self.extra_port))

    def start(self):
        self.stderr = open(os.path.join(self.prefix, "logs", "stderr.log"), "w")
        self.proc = tn.subprocess.Popen(
            [tn.NGINX, "-p", self.prefix, "-c", self.conf, "-g", "daemon off;"],
            stdout=self.stderr, stderr=tn.subprocess.STDOUT)
        ok = tn.wait_until(lambda: self.proc.poll() is not None or self.listening(), 10)
        if self.proc.poll() is not None or not ok:
            raise RuntimeError(f"nginx did not start: {self.log_tail()}")
        if not tn.wait_until(lambda: len(tn.children(self.proc.pid)) == 2, 5):
            raise RuntimeError("nginx did not start its two workers")

    def status(self):
        url = f"http://127.0.0.1:{self.extra_port}/vr-status"
        with urllib.request.urlopen(url, timeout=tn.HTTP_TIMEOUT) as r:
            return json.loads(r.read())


# ------------------------------------------------------------------------------------------
# Raw HTTP

class Raw:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers          # list of (name, value) as received
        self.body = body

    def all(self, name):
        return [v for k, v in self.headers if k.lower() == name.lower()]

    def header(self, name):
        values = self.all(name)
        return values[0] if values else None

    def tickets(self):
        """{room: ticket} from the Set-Cookie headers (`__vr_<room>=<ticket>; ...`)."""
        out = {}
        for sc in self.all("Set-Cookie"):
            m = re.match(r"__vr_([^=]+)=([^;]*)", sc)
            if m:
                out[m.group(1)] = m.group(2)
        return out

    def __repr__(self):
        return f"<{self.status} {self.headers} {self.body[:160]!r}>"


def raw(port, method, target, headers):
    """One request written byte for byte (the target verbatim: `/static/..%2Fcheckout`,
    `http://host/path`), on its own connection. `Connection: close` is the one header added:
    the response then ends where the connection does (no rule reads it)."""
    lines = [f"{method} {target} HTTP/1.1"] + [f"{k}: {v}" for k, v in headers]
    lines += ["Connection: close", "", ""]
    data = b""
    with socket.create_connection(("127.0.0.1", port), timeout=tn.HTTP_TIMEOUT) as s:
        s.sendall("\r\n".join(lines).encode("latin-1"))
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    status = int(status_line.split(" ")[1])
    parsed = [tuple(part.strip() for part in line.split(":", 1)) for line in header_lines]
    if any(k.lower() == "transfer-encoding" and "chunked" in v.lower() for k, v in parsed):
        body = dechunk(body)
    return Raw(status, parsed, body.decode("utf-8", "replace"))


def dechunk(body):
    out = b""
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out += rest[:size]
        body = rest[size + 2:]
    return out


# ------------------------------------------------------------------------------------------
# The counters a row moves

def counters(status):
    """{(room, what): count} for what the rules and dry runs count: each rule's matches
    (`rule:<action>:<name>`), `would_have_queued` and `would_have_rejected`."""
    out = {}
    for room, st in status["rooms"].items():
        for key in ("would_have_queued", "would_have_rejected"):
            out[(room, key)] = st[key]
        for rule in st["rules"]:
            out[(room, f"rule:{rule['action']}:{rule['name']}")] = rule["matched"]
    return out


def moved(before, after):
    return {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}


def classify(method, resp, delta):
    """(verdict, room) as the response and the counters show them."""
    tickets = resp.tickets()
    rule_rooms = lambda action: sorted({room for (room, what) in delta  # noqa: E731
                                        if what.startswith(f"rule:{action}:")})
    from_origin = resp.status == 200 and (method == "HEAD" or resp.body == ORIGIN_BODY)
    if resp.status == 503 and len(tickets) == 1 and 'id="position"' in resp.body:
        return "queue", next(iter(tickets))
    if resp.status == 403 and len(rule_rooms("reject")) == 1:
        return "reject", rule_rooms("reject")[0]
    if from_origin and len(tickets) == 1:
        room = next(iter(tickets))
        passed = delta.get((room, "would_have_queued"), 0) + \
            delta.get((room, "would_have_rejected"), 0)
        return ("pass" if passed == 1 else "admit"), room
    if from_origin and not tickets:
        bypassed = rule_rooms("bypass")
        if len(bypassed) == 1:
            return "bypass", bypassed[0]
        if not delta:
            return "unrouted", None
    return f"unclassified (HTTP {resp.status}, tickets {sorted(tickets)}, moved {delta})", None


# ------------------------------------------------------------------------------------------
# Checks

class Suite:
    def __init__(self, ngx):
        self.ngx = ngx
        self.port = ngx.port
        self.table_status = None    # the status report right after the table's rows
        with open(TABLE) as f:
            self.rows = json.load(f)["cases"]

    def test_every_row_of_the_table(self):
        names = {row["name"] for row in self.rows}
        assert set(NGINX_DIFFERS) <= names, \
            f"NGINX_DIFFERS names no row: {set(NGINX_DIFFERS) - names}"
        failures = []
        before = counters(self.ngx.status())
        for row in self.rows:
            headers = [("Host", row["host"])] + [tuple(h) for h in row["headers"]]
            headers.append(("X-Forwarded-For", row["client"]))
            resp = raw(self.port, row["method"], row["target"], headers)
            after = counters(self.ngx.status())
            delta = moved(before, after)
            before = after
            got = classify(row["method"], resp, delta)
            want = NGINX_DIFFERS.get(row["name"], (row["expect"], row["room"]))
            if got != want:
                failures.append(f"`{row['name']}` ({row['method']} {row['target']}, host "
                                f"{row['host']}): expected {want}, got {got}: {resp}")
                continue
            # Rules that pass or refuse count one match; nothing else matches a rule.
            rule_moves = {k: v for k, v in delta.items() if k[1].startswith("rule:")}
            if got[0] in ("bypass", "reject") and list(rule_moves.values()) != [1]:
                failures.append(f"`{row['name']}`: rule tallies moved {rule_moves}")
            if got[0] in ("queue", "admit", "unrouted") and rule_moves:
                failures.append(f"`{row['name']}`: {got[0]} but rule tallies moved {rule_moves}")
            # A room taking header tickets hands its new ticket out as a header too.
            tickets = resp.tickets()
            sent = resp.all(TICKET_HEADER)
            wanted = [tickets[got[1]]] if got[1] in TICKET_HEADER_ROOMS and tickets else []
            if sent != wanted:
                failures.append(f"`{row['name']}`: {TICKET_HEADER} {sent}, expected {wanted}")
        assert not failures, \
            f"{len(failures)} of {len(self.rows)} rows:\n  " + "\n  ".join(failures)
        self.table_status = self.ngx.status()

    def test_status_shows_rule_tallies_and_dry_runs(self):
        # The table's rows, counted by what they expect, against what the status shows.
        assert self.table_status is not None, "the table's rows did not all pass"
        rooms = self.table_status["rooms"]
        by = {}
        for row in self.rows:
            by[(row["expect"], row["room"])] = by.get((row["expect"], row["room"]), 0) + 1

        def tally(room, action):
            return sum(r["matched"] for r in rooms[room]["rules"] if r["action"] == action)

        shop = rooms["shop"]
        assert [r["name"] for r in shop["rules"]] == [
            "health", "static", "staff", "monitor", "partner", "preview", "bots", "api-count"
        ], shop["rules"]
        assert tally("shop", "bypass") == by[("bypass", "shop")], shop["rules"]
        assert tally("shop", "reject") == by[("reject", "shop")], shop["rules"]
        # Shop's passes are its count_only rule's: counted, and counted as would-have-queued.
        assert tally("shop", "count_only") == by[("pass", "shop")], shop["rules"]
        assert shop["would_have_queued"] == by[("pass", "shop")], shop
        health = next(r for r in shop["rules"] if r["name"] == "health")
        assert health["matched"] == 2 and health["action"] == "bypass", health
        dry = rooms["dry"]
        assert dry["mode"] == "dry_run" and dry["rules"] == [], dry
        assert dry["would_have_queued"] == by[("pass", "dry")] >= 1, dry
        for room in ("api", "events"):
            assert rooms[room]["rules"] == [] and rooms[room]["would_have_queued"] == 0, rooms[room]

    def test_a_reject_rule_answers_problem_details_to_a_json_client(self):
        before = counters(self.ngx.status())
        resp = raw(self.port, "GET", "/cart", [
            ("Host", "shop.example.com"), ("User-Agent", "Mozilla/5.0 BadBot/1.0"),
            ("Accept", "application/json"), ("X-Forwarded-For", "198.51.100.7")])
        assert resp.status == 403, resp
        assert resp.header("Content-Type") == "application/problem+json", resp
        doc = json.loads(resp.body)
        assert doc["type"] == "urn:velvet-rope:problem:refused-by-rule", doc
        assert doc["status"] == 403 and doc["room"] == "shop", doc
        assert not resp.all("Set-Cookie") and not resp.header("Retry-After"), resp
        assert resp.header("Cache-Control") == "no-store", resp
        delta = moved(before, counters(self.ngx.status()))
        assert delta == {("shop", "rule:reject:bots"): 1}, delta

    def test_a_header_ticket_holds_a_place(self):
        # Room `held`: one place, tickets taken from the Velvet-Rope-Ticket header. A client
        # that keeps no cookies gets its ticket in that response header and sends it back.
        port = self.ngx.extra_port
        first = raw(port, "GET", "/held/a", [("Host", "held.example.com")])
        assert first.status == 200 and first.body == ORIGIN_BODY, first
        ticket = first.header(TICKET_HEADER)
        assert ticket and first.tickets() == {"held": ticket}, first
        # Back with the header only (no cookie): admitted again, its place kept.
        for _ in range(2):
            again = raw(port, "GET", "/held/b", [("Host", "held.example.com"),
                                                 (TICKET_HEADER, ticket)])
            assert again.status == 200 and again.body == ORIGIN_BODY, again
        # Another client, without it, waits; the JSON waiting page carries its queued ticket,
        # the one in its response header.
        other = raw(port, "GET", "/held/a", [("Host", "held.example.com"),
                                             ("Accept", "application/json")])
        assert other.status == 503, other
        doc = json.loads(other.body)
        assert doc["room"] == "held" and doc["outcome"] == "queue" and doc["position"] >= 1, doc
        queued = other.header(TICKET_HEADER)
        assert queued and queued != ticket and other.tickets() == {"held": queued}, other
        if C_ABI_JSON_PAGE_HAS_TICKET:
            assert doc.get("ticket") == queued, (doc, queued)
        else:
            assert "ticket" not in doc, f"the C ABI's JSON page carries `ticket` now: {doc}"
        # The waiter, back with its queued ticket as a header: still waiting, same place.
        back = raw(port, "GET", "/held/a", [("Host", "held.example.com"),
                                            ("Accept", "application/json"),
                                            (TICKET_HEADER, queued)])
        assert back.status == 503 and json.loads(back.body)["position"] == doc["position"], back
        # The holder still passes.
        r = raw(port, "GET", "/held/c", [("Host", "held.example.com"), (TICKET_HEADER, ticket)])
        assert r.status == 200 and r.body == ORIGIN_BODY, r

    def test_an_absolute_form_targets_host_reaches_the_rules(self):
        # nginx routes `GET http://abs.example.com/...` by the target's host, whatever the
        # Host header says; the module hands the engine the whole target, so a rule on
        # hosts reads that host too (a `reject` rule matches when either host matches).
        port = self.ngx.extra_port
        cases = [("/hosts/x", "abs.example.com", 403),
                 ("/hosts/x", "other.example.com", 200),
                 ("http://abs.example.com/hosts/x", "other.example.com", 403),
                 ("http://abs.example.com:8080/hosts/x?q=1", "other.example.com", 403),
                 ("http://other.example.com/hosts/x", "other.example.com", 200),
                 # No path: nginx makes it `/`, and unparsed_uri keeps no authority; the
                 # module hands over the target's host all the same.
                 ("http://abs.example.com", "other.example.com", 403),
                 ("http://abs.example.com:8080", "other.example.com", 403),
                 ("/", "other.example.com", 200)]
        for target, host, status in cases:
            r = raw(port, "GET", target, [("Host", host)])
            assert r.status == status, f"{target} (Host {host}): {r}"
            assert status == 403 or r.body == ORIGIN_BODY, f"{target} (Host {host}): {r}"

    def test_both_workers_report_the_hosts_rule_tallies(self):
        """Bypassed requests served by both workers, and the status read from both: every
        reading shows all of them (the tallies were per process before)."""
        def health():
            return next(r["matched"] for r in self.ngx.status()["rooms"]["shop"]["rules"]
                        if r["name"] == "health")

        before = health()
        served = {}
        for _ in range(400):
            r = raw(self.port, "GET", "/health", [("Host", "shop.example.com")])
            assert r.status == 200 and r.body == ORIGIN_BODY, r
            [worker] = r.all("X-Worker")
            served[worker] = served.get(worker, 0) + 1
            if len(served) == 2 and sum(served.values()) >= 20:
                break
        assert len(served) == 2, f"one worker served every request: {served}"
        sent = sum(served.values())
        answered = set()
        url = f"http://127.0.0.1:{self.ngx.extra_port}/vr-status"
        for _ in range(400):
            with urllib.request.urlopen(url, timeout=tn.HTTP_TIMEOUT) as resp:
                worker = resp.headers["X-Worker"]
                shop = json.loads(resp.read())["rooms"]["shop"]
            matched = next(r["matched"] for r in shop["rules"] if r["name"] == "health")
            assert matched == before + sent, (worker, matched, before, served)
            answered.add(worker)
            if len(answered) == 2:
                break
        assert answered == set(served), f"status answered by {answered}, requests by {served}"

    def test_stops_cleanly(self):
        rc = self.ngx.stop()
        assert rc == 0, f"master exit status {rc}"
        bad = [line for line in self.ngx.log().splitlines()
               if re.search(r"\[(alert|crit|emerg)\]|exited on signal|velvet_rope: .*failed",
                            line)]
        assert not bad, "error log:\n" + "\n".join(bad[:10])


ORDER = [
    "test_every_row_of_the_table",
    "test_status_shows_rule_tallies_and_dry_runs",
    "test_a_reject_rule_answers_problem_details_to_a_json_client",
    "test_a_header_ticket_holds_a_place",
    "test_an_absolute_form_targets_host_reaches_the_rules",
    "test_both_workers_report_the_hosts_rule_tallies",
    "test_stops_cleanly",
]


def main():
    return tn.run_suite(Nginx, Suite, ORDER, WATCHDOG_SECS)


if __name__ == "__main__":
    sys.exit(main())
