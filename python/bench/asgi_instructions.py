"""The waiting room's own cost per request in instructions (callgrind), which repeat where
this machine's timings do not (`asgi_overhead.py` moves by a third between two runs): the
ASGI app called in process for 2,000 visitors with valid tickets in turn, bare and behind
the middleware, each counted at N requests and at none (the set-up alone), so that what is
left is the requests' (`make bench-python`; needs valgrind).

Usage: asgi_instructions.py [N]   (N requests per count, 3,000 by default)
Run with `--one plain|roomed N` it is the program being counted."""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import subprocess
import sys
import tempfile

VISITORS = 2000


async def requests(which: str, n: int) -> None:
    from asgi_app import plain, roomed, visitors

    app = roomed if which == "roomed" else plain
    scopes, receive, send = await visitors(VISITORS)
    sent = send.sent
    turn = itertools.cycle(scopes)
    for _ in range(n):
        sent.clear()
        await app(next(turn), receive, send)


def counted(which: str, n: int) -> int:
    """Instructions of a whole run of `requests(which, n)` (interpreter start included)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg.out")
        subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
             sys.executable, __file__, "--one", which, str(n)],
            check=True, capture_output=True,
            # The same hash seed each run: dicts and sets then do the same work.
            env={**os.environ, "PYTHONHASHSEED": "0"},
        )
        with open(out) as f:
            for line in f:
                m = re.match(r"(?:summary|totals): (\d+)", line)
                if m:
                    return int(m.group(1))
    raise RuntimeError("callgrind wrote no total")


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    per = {w: (counted(w, n) - counted(w, 0)) / n for w in ("plain", "roomed")}
    print(f"instructions per request (callgrind, {n:,} requests, {VISITORS:,} visitors in turn): "
          f"bare app {per['plain']:,.0f}; behind the waiting room {per['roomed']:,.0f}; "
          f"the middleware adds {per['roomed'] - per['plain']:,.0f}")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--one":
        asyncio.run(requests(sys.argv[2], int(sys.argv[3])))
    else:
        main()
