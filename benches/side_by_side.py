#!/usr/bin/env python3
"""CPU time per request of a real nginx, Envoy or Fastify app with velvet-rope and without
it, both loaded at the same moment on the same core: `make bench-side-by-side`. Not a test.

Why not requests/s one side after the other (`make bench-nginx`, `make bench-envoy`): on this
shared two-core machine a server's speed moves by 10-20 % from one two-second round to the
next, and an A/A control of that method read 1.083 (95 % interval 1.025-1.103) on
2026-11-23: its noise and its biases are larger than what the module costs. Here both sides
run at once, so whatever slows the machine slows both alike:

- two instances of the server (A and B), each with a listener with the module and one
  without, every thread of both pinned to the first core; wrk pinned to the second;
- each round loads one listener of A and one of B at the same time for DURATION, with the
  module on A's side in even rounds and on B's in odd ones (so a difference between the two
  instances cancels out);
- the figure is each instance's CPU time (every thread's, from `/proc/<pid>/task/*/schedstat`,
  in nanoseconds) divided by the requests it answered: requests per CPU-second is what a
  server saturating its cores serves. The round's ratio is the side without the module's CPU
  per request over the side with it (a throughput ratio, 1.0 = free). Rounds go in pairs (the
  module on a, then on b); a pair's figure is the geometric mean of its two ratios, in which
  a difference between the two instances cancels out; the run's figure is the median of the
  pairs', with a 95 % bootstrap interval over pairs. CONTROL=1 puts no module on either side:
  an A/A control of the method.

What it does not show: the two instances share the first core's caches, so the side without
the module also pays for some of the misses the module causes (a bias towards 1.0, which the
A/A control cannot see), and both see more misses than a server alone on its core would. Each
round prints how busy the first core was: well below 100 %, the servers were waiting for wrk
(or, in `envoy-proxy`, for the upstream nginx, which shares wrk's core and is not counted),
and CPU per request at low load is not what a saturated server pays.

Requests carry the valid tickets of VISITORS distinct admitted visitors in turn (wrk's Lua
script), the tickets each instance issued itself: each request opens its ticket (the cold path
of a sale). The scheduler need not share the core evenly (requests/s are printed too, and
differ): CPU time per request does not depend on how much of the core a side got.

Usage: benches/side_by_side.py nginx|envoy|envoy-proxy|fastify. Environment: VISITORS
(10000), ROUNDS (20, even), DURATION (2, seconds), CONNECTIONS (32), CONTROL=1; the module
builds as for `benches/instructions.py`. A failed run keeps its servers' logs and says where.
"""

import http.client
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import instructions as servers

VISITORS = int(os.environ.get("VISITORS", "10000"))
ROUNDS = int(os.environ.get("ROUNDS", "20"))
DURATION = int(os.environ.get("DURATION", "2"))
CONNECTIONS = os.environ.get("CONNECTIONS", "32")
CONTROL = os.environ.get("CONTROL") == "1"


def cpu_ns(pid):
    """CPU time of each of the process's threads so far, in nanoseconds, by thread id."""
    times = {}
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                times[task] = int(f.read().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that ended meanwhile
    return times


def cpu_between(before, after, what):
    """CPU time spent between two `cpu_ns` readings; warns when a thread ended in between
    (its time since `before` is lost)."""
    gone = before.keys() - after.keys()
    if gone:
        print(f"  ({what}: {len(gone)} thread(s) ended during the round; their CPU time is "
              "not counted)", flush=True)
    return sum(t - before.get(task, 0) for task, t in after.items())


def tickets(server, tmp, name):
    """Each of VISITORS visitors admitted by `server`; returns the path of a wrk script that
    sends their cookies in turn, and the cookies."""
    cookies = []
    c = http.client.HTTPConnection("127.0.0.1", server["with_port"], timeout=10)
    for _ in range(VISITORS):
        c.request("GET", server["admit_path"])
        r = c.getresponse()
        body = r.read().decode()
        set_cookie = r.getheader("Set-Cookie")
        assert r.status == 200 and body == server["body"] and set_cookie, (r.status, body[:80])
        cookies.append(set_cookie.split(";")[0])
    c.close()
    script = os.path.join(tmp, f"{name}.lua")
    with open(script, "w") as f:
        f.write("cookies = {%s}\n" % ",".join('"%s"' % x for x in cookies))
        f.write("i = 0\nrequest = function()\n  i = i % #cookies + 1\n"
                "  return wrk.format(nil, nil, {Cookie = cookies[i]})\nend\n")
    return script, cookies


def wrk(port, path, script):
    """wrk on the second core against one listener, started now (returns the process)."""
    return subprocess.Popen(["taskset", "-c", "1", "wrk", "-t1", f"-c{CONNECTIONS}",
                             f"-d{DURATION}s", "-s", script, f"http://127.0.0.1:{port}{path}"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def requests_of(out, port):
    if "Non-2xx" in out or "Socket errors" in out or " requests in " not in out:
        sys.exit(f"side_by_side.py: errors on {port}:\n{out}")
    n = int(re.search(r"(\d+) requests in ", out).group(1))
    return n, float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))


def round_(a, b, a_port, b_port):
    """Loads `a_port` of instance a and `b_port` of instance b at once; returns each side's
    (CPU ns per request, requests/s), and how busy the first core was (both instances' CPU
    time over the round's length, which includes starting and stopping wrk: a few percent
    below 1 is the most it reads)."""
    before = (cpu_ns(a["proc"].pid), cpu_ns(b["proc"].pid))
    start = time.monotonic()
    runs = [wrk(a_port, a["path"], a["script"]), wrk(b_port, b["path"], b["script"])]
    outs = [r.communicate()[0] for r in runs]
    elapsed = time.monotonic() - start
    after = (cpu_ns(a["proc"].pid), cpu_ns(b["proc"].pid))
    result, busy = [], 0
    for i, (out, port) in enumerate(zip(outs, (a_port, b_port))):
        n, rps = requests_of(out, port)
        spent = cpu_between(before[i], after[i], "ab"[i])
        busy += spent
        result.append((spent / n, rps))
    return result, busy / (elapsed * 1e9)


def upstream_nginx(tmp):
    """Debian's nginx (one process, no module) serving the page on the second core, with wrk:
    the upstream both Envoys proxy to in `envoy-proxy`. Returns (process, port)."""
    for d in ("logs", "tmp", "html"):
        os.makedirs(os.path.join(tmp, d), exist_ok=True)
    with open(os.path.join(tmp, "html", "page.html"), "w") as f:
        f.write(servers.PAGE)
    port = servers.free_port()
    conf = os.path.join(tmp, "nginx.conf")
    with open(conf, "w") as f:
        f.write(f"""
user root; daemon off; master_process off; worker_processes 1;
error_log {tmp}/logs/error.log warn; pid {tmp}/logs/nginx.pid;
events {{ worker_connections 256; }}
http {{
    access_log off; default_type text/html; keepalive_requests 1000000;
    client_body_temp_path {tmp}/tmp/body; proxy_temp_path {tmp}/tmp/proxy;
    fastcgi_temp_path {tmp}/tmp/fastcgi; uwsgi_temp_path {tmp}/tmp/uwsgi;
    scgi_temp_path {tmp}/tmp/scgi;
    server {{ listen 127.0.0.1:{port}; root {tmp}/html; }}
}}
""")
    proc = subprocess.Popen(["taskset", "-c", "1", "/usr/sbin/nginx", "-p", tmp, "-c", conf])
    return proc, port


def interval(values):
    """A 95 % bootstrap interval of the median (resampling the values; fixed seed)."""
    rng = random.Random(1)
    meds = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(10000))
    return meds[250], meds[9749]


def main():
    upstream = {}
    kinds = {"nginx": servers.nginx_server, "envoy": servers.envoy_server,
             "envoy-proxy": lambda tmp: servers.envoy_server(
                 tmp, upstream=True, upstream_port=upstream["port"]),
             "fastify": servers.fastify_server}
    if len(sys.argv) != 2 or sys.argv[1] not in kinds or ROUNDS < 2 or ROUNDS % 2:
        sys.exit(__doc__)
    kind = sys.argv[1]
    if os.cpu_count() < 2:
        sys.exit("side_by_side.py: needs two cores (the servers on one, wrk on the other)")
    # Tickets stay in their hour-wide bucket for the whole run: start after the hour turns
    # if the run could reach it (the rounds, four warm-up rounds, issuing the tickets at
    # about 1,000 a second, starting the servers).
    run_secs = (ROUNDS + 4) * (DURATION + 1) + 2 * VISITORS / 1000 + 120
    if run_secs > 3000:
        sys.exit("side_by_side.py: the run would not fit in an hour (the tickets' bucket); "
                 "fewer ROUNDS or VISITORS")
    left = 3600 - time.time() % 3600
    if left < run_secs:
        print(f"waiting {left:.0f} s for the hour to turn (the tickets' bucket)", flush=True)
        time.sleep(left + 1)
    tmp = tempfile.mkdtemp(prefix=f"velvet-rope-side-by-side-{kind}-")
    instances, ok = {}, False
    try:
        if kind == "envoy-proxy":
            upstream["proc"], upstream["port"] = upstream_nginx(os.path.join(tmp, "upstream"))
            servers.wait_for_port(upstream["port"], "the upstream nginx", 30)
        # Both instances' ports are picked before either starts (so neither takes the other's).
        for name in ("a", "b"):
            os.makedirs(os.path.join(tmp, name))
            instances[name] = kinds[kind](os.path.join(tmp, name))
        for name, server in instances.items():
            server["log"] = open(os.path.join(tmp, name, "server.log"), "w")
            server["proc"] = subprocess.Popen(["taskset", "-c", "0"] + server["command"],
                                              stdout=server["log"], stderr=subprocess.STDOUT,
                                              env=server["env"])
        for name, server in instances.items():
            servers.wait_for_port(server["with_port"], kind, 60)
            servers.wait_for_port(server["without_port"], kind, 60)
            print(f"{kind} {name}: issuing {VISITORS} visitors their tickets", flush=True)
            server["script"], server["cookies"] = tickets(server, tmp, name)
        a, b = instances["a"], instances["b"]
        # The module's side of a round, and the other: in CONTROL, neither has it.
        on = "without_port" if CONTROL else "with_port"
        print("warming up (four rounds, not counted)", flush=True)
        for i in range(2):
            round_(a, b, a[on], b["without_port"])
            round_(a, b, a["without_port"], b[on])
        ratios, rps_ratios, busy = [], [], []
        label = "A/A control: neither side has the module" if CONTROL else "with the module"
        print(f"{ROUNDS} rounds of {DURATION} s, both sides at once ({label}); "
              "CPU us per request, requests/s:", flush=True)
        for i in range(ROUNDS):
            if i % 2 == 0:
                ((cpu_on, rps_on), (cpu_off, rps_off)), load = round_(
                    a, b, a[on], b["without_port"])
            else:
                ((cpu_off, rps_off), (cpu_on, rps_on)), load = round_(
                    a, b, a["without_port"], b[on])
            ratios.append(cpu_off / cpu_on)
            rps_ratios.append(rps_on / rps_off)
            busy.append(load)
            print(f"round {i + 1:2}: module on {'a' if i % 2 == 0 else 'b'}: "
                  f"with {cpu_on / 1000:.2f} us ({rps_on:.0f}/s), "
                  f"without {cpu_off / 1000:.2f} us ({rps_off:.0f}/s); "
                  f"without / with {ratios[-1]:.4f}; first core {load:.0%} busy", flush=True)
        # Pairs of rounds (module on a, then on b): the geometric mean cancels the instances'
        # difference.
        pairs = [(ratios[i] * ratios[i + 1]) ** 0.5 for i in range(0, ROUNDS, 2)]
        rps_pairs = [(rps_ratios[i] * rps_ratios[i + 1]) ** 0.5 for i in range(0, ROUNDS, 2)]
        lo, hi = interval(pairs)
        rlo, rhi = interval(rps_pairs)
        print(f"{kind}{' (A/A control)' if CONTROL else ''}, {VISITORS} visitors: CPU per "
              f"request without / with, median of {len(pairs)} pairs of rounds "
              f"{statistics.median(pairs):.3f} (95 % interval {lo:.3f}-{hi:.3f}; rounds with the "
              f"module on a {statistics.median(ratios[0::2]):.3f}, on b "
              f"{statistics.median(ratios[1::2]):.3f}); requests/s with / without "
              f"{statistics.median(rps_pairs):.3f} ({rlo:.3f}-{rhi:.3f}); first core busy "
              f"{min(busy):.0%}-{max(busy):.0%}", flush=True)
        if min(busy) < 0.85:
            print("warning: the first core was idle for part of some rounds (see above): the "
                  "servers waited on wrk or the upstream, and CPU per request then includes "
                  "work a saturated server would not do", flush=True)
        if not CONTROL:
            # The run measured the steady path: every instance's visitors admitted, their
            # tickets not renewed (a sample of 100 spread over them).
            for server in instances.values():
                c = http.client.HTTPConnection("127.0.0.1", server["with_port"], timeout=10)
                for cookie in server["cookies"][:: max(1, VISITORS // 100)]:
                    c.request("GET", server["path"], headers={"Cookie": cookie})
                    r = c.getresponse()
                    r.read()
                    assert r.status == 200 and r.getheader("Set-Cookie") is None, \
                        ("a visitor's ticket was renewed during the run: the figures above "
                         "include renewals", r.getheaders())
                c.close()
        ok = True
    finally:
        started = [server for server in instances.values() if "proc" in server]
        for server in started:
            server["proc"].terminate()
        for server in started:
            try:
                server["proc"].wait(timeout=30)
            except subprocess.TimeoutExpired:
                server["proc"].kill()
                server["proc"].wait()
            server["log"].close()
        for server in instances.values():
            if server.get("stop"):
                server["stop"]()
        if upstream.get("proc"):
            upstream["proc"].terminate()
            try:
                upstream["proc"].wait(timeout=30)
            except subprocess.TimeoutExpired:
                upstream["proc"].kill()
                upstream["proc"].wait()
        if ok:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"side_by_side.py: the run failed; the servers' logs are in {tmp}",
                  file=sys.stderr)


if __name__ == "__main__":
    main()
