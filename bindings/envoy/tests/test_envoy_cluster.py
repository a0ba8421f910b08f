"""Two Envoys (two workers each) share one room through a real redis-server (Debian's,
started here on a free 127.0.0.1 port, persistence off): the module's `[cluster]` table starts
its sync loop. Concurrent new visitors spread over both are admitted exactly up to the room's
limit (waiters refreshing as browsers do), and the room's Redis hash names both hosts."""

import os
import sys
import tempfile
import threading
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_envoy as te  # noqa: E402
from http_client import Jar, get  # noqa: E402
from redis_server import RedisServer  # noqa: E402

VISITORS = 16


def cluster_table(port, host):
    return f"""
[cluster]
redis_url = "redis://127.0.0.1:{port}"
host_id = "{host}"
sync_interval_ms = 100
lease_ms = 600
timeout_ms = 200
fallback_share = 0.0
"""


@pytest.fixture
def redis():
    server = RedisServer()
    try:
        yield server
    finally:
        server.kill()


def test_two_envoys_share_a_room_exactly(redis):
    redis_port = redis.port
    with tempfile.TemporaryDirectory(prefix="velvet-rope-envoy-cluster-") as tmp:
        proxies = []
        try:
            for host in ("envoy-a", "envoy-b"):
                d = os.path.join(tmp, host)
                os.makedirs(d)
                e = te.Envoy(d, lambda rooms: [te.velvet_filter("velvet_shop", "shop", rooms),
                                               te.velvet_filter("velvet_conc", "conc", rooms),
                                               te.velvet_filter("velvet_rej", "rej", rooms)])
                with open(os.path.join(d, "rooms.toml"), "w") as f:
                    f.write(te.ROOMS + cluster_table(redis_port, host))
                e.start()
                proxies.append(e)
            time.sleep(2.4)  # a store that knows nobody learns first (2.1 s with these settings)

            jars = [(proxies[i % 2], Jar()) for i in range(VISITORS)]
            results = [None] * VISITORS
            barrier = threading.Barrier(VISITORS)

            def visit(i):
                barrier.wait(timeout=10)
                results[i] = get(jars[i][0].port, f"/shop/{i}", jars[i][1])

            threads = [threading.Thread(target=visit, args=(i,)) for i in range(VISITORS)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=30)
            admitted = {i for i, r in enumerate(results) if r.admitted}
            assert all(r.admitted or r.waiting for r in results), results
            full_at = None
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                for i, (e, jar) in enumerate(jars):
                    if i not in admitted and get(e.port, f"/shop/again{i}", jar).admitted:
                        admitted.add(i)
                assert len(admitted) <= te.SHOP_LIMIT, f"{len(admitted)} admitted"
                if len(admitted) == te.SHOP_LIMIT and full_at is None:
                    full_at = time.monotonic()
                if full_at is not None and time.monotonic() - full_at > 2:
                    break
                time.sleep(0.5)
            assert len(admitted) == te.SHOP_LIMIT, f"{len(admitted)} admitted, {te.SHOP_LIMIT} expected"

            fields = redis.command("HKEYS", "{vr:shop}:s")
            hosts = sorted(f.split("#")[0] for f in fields if f.startswith("h:"))
            assert hosts == ["h:envoy-a", "h:envoy-b"], fields
            for e in proxies:
                assert "panic" not in e.log_text().lower()
        finally:
            for e in proxies:
                e.close()
