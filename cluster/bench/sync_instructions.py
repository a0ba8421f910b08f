"""Instructions a redis-server spends per room's sync of `cluster/src/sync.lua`, counted by
callgrind: deterministic to about 0.2 %, where timing the same script on this machine moves by
15 % or more (BENCHMARKS.md, 2026-11-27 evening). For comparing variants of the script.

The server (Debian's `redis-server`) runs under `valgrind --tool=callgrind`, counting only
inside `EVALSHA` (`--toggle-collect=evalShaCommand`): the script, the commands it runs, the
MessagePack of its arguments and answers. H host identities sync R rooms (one script call per
host per round, as the syncer batches them) for 5 rounds plus ROUNDS, one virtual second apart
(the store's clock is given to the script, as the tests give it), with reports like
`many_hosts`'s (a steady share of a busy room, a waiter now and then).

Usage (needs valgrind and the Python packages `redis` and `msgpack`):

    python3 cluster/bench/sync_instructions.py [SCRIPT] [--hosts 100] [--rooms 10] [--rounds 3]

SCRIPT defaults to the repository's `cluster/src/sync.lua`. Prints the total and the
instructions per room's sync; with KEEP_CG=1 in the environment, keeps callgrind's output
(where the instructions go, by function) and prints its path.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import time

import msgpack
import redis

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("script", nargs="?", default=os.path.join(HERE, "..", "src", "sync.lua"))
    ap.add_argument("--hosts", type=int, default=100)
    ap.add_argument("--rooms", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    out = tempfile.NamedTemporaryFile(prefix="sync-cg.", delete=False).name
    server = subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--toggle-collect=evalShaCommand",
         f"--callgrind-out-file={out}", "redis-server", "--port", str(port),
         "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    r = redis.Redis(port=port)
    for _ in range(600):
        try:
            r.ping()
            break
        except redis.exceptions.ConnectionError:
            time.sleep(0.05)
    try:
        sha = r.script_load(open(a.script).read())
        terms = {"total": 4000, "minute": 100000, "lease": 3000, "hold": 1000, "learn": 3000}
        grants: dict[tuple[int, int], dict[str, int]] = {}
        t = 1_800_000_000_000
        rnd = random.Random(1)
        syncs = 0
        for _ in range(5 + a.rounds):
            for h in range(a.hosts):
                keys, calls = [], []
                for room in range(a.rooms):
                    keys += [f"{{vr:room{room}}}:s", f"{{vr:room{room}}}:r",
                             f"{{vr:room{room}}}:d"]
                    g = grants.get((h, room), {"seq": 0, "gt": 0, "gm0": 0, "gm1": 0})
                    b = t // 60000
                    report = {
                        "seq": g["seq"], "b": b, "active": rnd.randint(0, 8),
                        "admitted": rnd.randint(0, 3), "traffic": rnd.randint(0, 20),
                        "demand": 1, "at": g["gt"], "am0": g["gm0"], "am1": g["gm1"],
                        "live": [[b, rnd.randint(1, 2)]] if rnd.random() < 0.1 else [],
                        "held": 0,
                    }
                    calls.append([f"host-{h:05d}", report, terms])
                answers = r.evalsha(sha, len(keys), *keys, msgpack.packb(calls), "",
                                    "run/bench", str(t + h))
                for room, answer in enumerate(answers):
                    fields = msgpack.unpackb(answer)
                    seq, gt, _, gm0, gm1 = fields[:5]
                    grants[(h, room)] = {"seq": seq, "gt": gt, "gm0": gm0, "gm1": gm1}
                syncs += a.rooms
            t += 1000
    finally:
        try:
            r.shutdown(nosave=True)
        except redis.exceptions.ConnectionError:
            pass
        server.wait()
    text = open(out).read()
    if os.environ.get("KEEP_CG"):
        print("callgrind output (for callgrind_annotate):", out)
    else:
        os.unlink(out)
    total = int(re.search(r"^(?:summary|totals): (\d+)", text, re.M).group(1))
    print(f"{a.script}: {total:,} instructions in EVALSHA, {syncs:,} room syncs: "
          f"{total / syncs:,.0f} per room's sync ({a.hosts} hosts x {a.rooms} rooms)")


if __name__ == "__main__":
    sys.exit(main())
