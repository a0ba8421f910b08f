"""Requests per second of a minimal ASGI app under uvicorn, behind the waiting room and bare,
in interleaved rounds (`make bench-python`). Visitors hold valid tickets: 2,000 distinct ones
in turn (wrk's Lua script picks the next cookie per request), as during a sale.

The servers run pinned to the first CPU and wrk to the second (`taskset`), one side at a time,
alternating which goes first. `CONTROL=1` serves the bare app on both sides: an A/A control
that shows how well the method resolves a few percent on this machine. Prints every round and
the median of the per-round ratios (roomed / plain)."""

from __future__ import annotations

import http.client
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).parent
ROUNDS = int(os.environ.get("ROUNDS", "10"))
SECONDS = int(os.environ.get("SECONDS_PER_ROUND", "3"))
VISITORS = 2000


CONTROL = os.environ.get("CONTROL") == "1"
SERVER_CPU, WRK_CPU = "0", "1"


def start(app: str, port: int) -> subprocess.Popen[bytes]:
    p = subprocess.Popen(
        ["taskset", "-c", SERVER_CPU, sys.executable, "-m", "uvicorn", f"asgi_app:{app}", "--port", str(port),
         "--host", "127.0.0.1", "--log-level", "error", "--no-access-log"],
        cwd=HERE, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            c.request("GET", "/")
            c.getresponse().read()
            c.close()
            return p
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"uvicorn {app} did not start")


def wrk(port: int, script: str) -> float:
    out = subprocess.run(["taskset", "-c", WRK_CPU, "wrk", "-t1", "-c32", f"-d{SECONDS}s", "-s", script,
                          f"http://127.0.0.1:{port}/"], capture_output=True, text=True).stdout
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if not m:
        raise RuntimeError(out)
    return float(m.group(1))


def main() -> None:
    ports = {"plain": 18001, "roomed": 18002}
    apps = {"plain": "plain", "roomed": "plain" if CONTROL else "roomed"}
    procs = [start(apps[side], port) for side, port in ports.items()]
    cookie_port = ports["roomed"] if not CONTROL else None
    try:
        cookies = []
        helper = None
        if cookie_port is None:  # the control still sends the tickets, to a bare app
            helper = start("roomed", 18003)
            cookie_port = 18003
        for _ in range(VISITORS):
            c = http.client.HTTPConnection("127.0.0.1", cookie_port)
            c.request("GET", "/")
            r = c.getresponse()
            r.read()
            cookies.append(r.getheader("set-cookie").split(";", 1)[0])
            c.close()
        if helper is not None:
            helper.terminate()
            helper.wait()
        with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
            f.write("cookies = {" + ",".join(f'"{c}"' for c in cookies) + "}\n")
            f.write("i = 0\nrequest = function()\n  i = i % #cookies + 1\n"
                    "  return wrk.format(nil, nil, {Cookie = cookies[i]})\nend\n")
            script = f.name
        ratios = []
        for r in range(ROUNDS):
            order = ["plain", "roomed"] if r % 2 == 0 else ["roomed", "plain"]
            got = {app: wrk(ports[app], script) for app in order}
            ratios.append(got["roomed"] / got["plain"])
            print(f"round {r + 1}: plain {got['plain']:.0f} req/s, roomed {got['roomed']:.0f} "
                  f"req/s, ratio {ratios[-1]:.3f}", flush=True)
        label = "A/A control (bare / bare)" if CONTROL else "roomed / plain"
        print(f"median ratio ({label}) over {ROUNDS} rounds: {statistics.median(ratios):.3f}; "
              f"rounds from {min(ratios):.3f} to {max(ratios):.3f}")
    finally:
        for p in procs:
            p.terminate()
            p.wait()


if __name__ == "__main__":
    main()
