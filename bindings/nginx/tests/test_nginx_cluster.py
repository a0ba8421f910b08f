#!/usr/bin/env python3
"""Two nginx instances (two workers each) share one room through a real Redis.

Starts Debian's `redis-server` on a free 127.0.0.1 port (persistence off) and two nginx
instances, each with its own shared zone (two "hosts") and a `[cluster]` table naming the
Redis. Checks that concurrent new visitors spread over both instances are admitted exactly up
to the room's limit (waiters refreshing as browsers do), that both instances see the other,
that the room is a Redis hash and a sorted set of deadlines under one hash tag, both expiring
by themselves, and that killing Redis stops no request.

Python standard library only (reuses test_nginx.py's helpers). Prints `N passed, M failed`
last; exits 1 on any failure.
"""

import base64
import os
import shutil
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..",
                                "python", "tests"))
import test_nginx as t  # noqa: E402
from redis_server import RedisServer  # noqa: E402

LIMIT = 6
VISITORS = 24
WATCHDOG_SECS = 90


def cluster_config(secret, redis_port, host):
    return f"""
[settings]
bucket_width_secs = 2

[[tickets.keys]]
id = 1
secret = "{secret}"

[cluster]
redis_url = "redis://127.0.0.1:{redis_port}"
host_id = "{host}"
sync_interval_ms = 100
lease_ms = 600
timeout_ms = 200
fallback_share = 0.0

[[rooms]]
name = "shop"
total_active_users = {LIMIT}
new_users_per_minute = 1000
session_duration = 90
refresh_interval = 1
[rooms.cookie]
secure = false
"""


def nginx_config(prefix, port):
    return f"""
load_module {t.MODULE};
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
        listen 127.0.0.1:{port} reuseport;
        root {prefix}/html;
        location /shop/ {{ velvet_rope shop; }}
        location = /vr-status {{ velvet_rope_status; }}
    }}
}}
"""


def instance(redis, host):
    ngx = t.Nginx()
    secret = base64.urlsafe_b64encode(b"k" * 32).rstrip(b"=").decode()
    ngx.write("conf/velvet-rope.toml", cluster_config(secret, redis.port, host))
    ngx.write("conf/nginx.conf", nginx_config(ngx.prefix, ngx.port))
    return ngx


class Suite:
    def __init__(self, redis, a, b):
        self.redis, self.a, self.b = redis, a, b
        self.admitted = []

    def test_exactly_the_limit_across_two_instances(self):
        jars = [(self.a if i % 2 else self.b, t.Jar()) for i in range(VISITORS)]
        results = [None] * VISITORS
        start = threading.Barrier(VISITORS)

        def visit(i):
            ngx, jar = jars[i]
            start.wait()
            results[i] = t.get(ngx.port, "/shop/page.html", jar)

        threads = [threading.Thread(target=visit, args=(i,)) for i in range(VISITORS)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        admitted = {i for i, r in enumerate(results) if r.admitted}
        assert all(r.admitted or r.waiting for r in results), results
        # Waiters refresh (once a second, as the page says) until the room is full, then a
        # few seconds more: nobody else gets in.
        full_at = None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            for i, (ngx, jar) in enumerate(jars):
                if i not in admitted and t.get(ngx.port, "/shop/page.html", jar).admitted:
                    admitted.add(i)
            assert len(admitted) <= LIMIT, f"{len(admitted)} admitted into a room of {LIMIT}"
            if len(admitted) == LIMIT and full_at is None:
                full_at = time.monotonic()
            if full_at is not None and time.monotonic() - full_at > 2.5:
                break
            time.sleep(1.0)
        assert len(admitted) == LIMIT, f"{len(admitted)} admitted, {LIMIT} expected"
        self.admitted = [jars[i] for i in admitted]
        time.sleep(1.3)
        active = sum(n.room_stats("shop")["active_users"] for n in (self.a, self.b))
        assert active == LIMIT, f"the instances count {active} active"

    def test_admitted_visitors_pass_again(self):
        for ngx, jar in self.admitted:
            r = t.get(ngx.port, "/shop/page.html", jar)
            assert r.admitted, f"admitted visitor refused at its instance: {r}"

    def test_one_hash_per_room_that_expires(self):
        keys = sorted(self.redis.command("KEYS", "*"))
        # The room's state and its hosts' deadlines (no log of revocations: the origin may
        # not revoke here).
        assert keys == ["{vr:shop}:d", "{vr:shop}:s"], keys
        fields = self.redis.command("HKEYS", "{vr:shop}:s")
        # A host is its id and its counters' incarnation.
        hosts = sorted(f.split("#")[0] for f in fields if f.startswith("h:"))
        assert hosts == ["h:nginx-a", "h:nginx-b"], fields
        for key in keys:
            ttl = self.redis.command("PTTL", key)
            assert ttl.startswith(":") and int(ttl[1:]) > 0, (key, ttl)

    def test_redis_killed_stops_no_request(self):
        self.redis.kill()
        for ngx, jar in self.admitted:
            t0 = time.monotonic()
            r = t.get(ngx.port, "/shop/page.html", jar)
            took = time.monotonic() - t0
            assert r.admitted, f"admitted visitor refused with Redis gone: {r}"
            assert took < 1.0, f"a request took {took:.2f} s with Redis gone"
        r = t.get(self.a.port, "/shop/page.html", t.Jar())
        assert r.waiting, f"a new visitor was not queued in the full room: {r}"
        time.sleep(0.5)
        for ngx in (self.a, self.b):
            log = ngx.log()
            # nginx points its workers' standard error at the error log.
            lines = (log + ngx.log("stderr.log")).splitlines()
            # The structured event is logged once per host, by the worker
            # whose tick advances the room; the plain diagnostic once per
            # worker that syncs. The event may still be a tick away.
            events = [ln for ln in lines if '"event":"cluster_outage_began"' in ln]
            outage_lines = [ln for ln in lines if ln not in events
                            and ("store unreachable" in ln or "did not answer" in ln)]
            assert 1 <= len(outage_lines) <= 2, \
                f"outage diagnosed {len(outage_lines)} times (once per syncing worker)"
            assert len(events) <= 1, f"outage event logged {len(events)} times:\n" \
                + "\n".join(events)
            assert "[emerg]" not in log and "[alert]" not in log, log[-2000:]
            assert len(t.children(ngx.proc.pid)) == 2, "a worker died"


ORDER = [
    "test_exactly_the_limit_across_two_instances",
    "test_admitted_visitors_pass_again",
    "test_one_hash_per_room_that_expires",
    "test_redis_killed_stops_no_request",
]


class Watchdog(BaseException):
    pass


def main():
    t.ensure_nginx()
    if not os.path.exists(t.MODULE):
        print(f"module not built: {t.MODULE} (run bindings/nginx/build.sh)")
        print("0 passed, 1 failed")
        return 1

    def on_watchdog(signum, frame):
        raise Watchdog(f"watchdog: the suite ran over {WATCHDOG_SECS} s")

    signal.signal(signal.SIGALRM, on_watchdog)
    signal.alarm(WATCHDOG_SECS)
    passed = failed = 0
    redis = a = b = None
    try:
        redis = RedisServer()
        a, b = instance(redis, "nginx-a"), instance(redis, "nginx-b")
        a.start()
        b.start()
        # A store that knows nobody learns before it grants anything (2.1 s with these
        # settings: a sync interval, a turn whose holder stopped and an interval, and a lease
        # of margin for its clock).
        time.sleep(2.4)
        suite = Suite(redis, a, b)
        for name in ORDER:
            t0 = time.monotonic()
            try:
                getattr(suite, name)()
                passed += 1
                print(f"ok   {name} ({time.monotonic() - t0:.1f} s)", flush=True)
            except Exception as e:
                failed += 1
                print(f"FAIL {name} ({time.monotonic() - t0:.1f} s): {type(e).__name__}: {e}",
                      flush=True)
    except Watchdog as e:
        failed += 1
        print(f"FAIL {e}")
    except Exception as e:
        failed += 1
        print(f"FAIL setting up: {type(e).__name__}: {e}")
    finally:
        signal.alarm(0)
        for ngx in (a, b):
            if ngx is not None:
                ngx.kill()
                if failed:
                    print(f"--- {ngx.prefix}:\n{ngx.log_tail(25)}")
                else:
                    shutil.rmtree(ngx.prefix, ignore_errors=True)
        if redis is not None:
            redis.kill()
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
