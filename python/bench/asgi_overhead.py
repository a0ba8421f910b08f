"""The waiting room's own cost per request, in process: the ASGI app called directly with a
fake `receive`/`send`, bare and behind the middleware, for 2,000 visitors with valid tickets in
turn (`make bench-python`). The difference is what the middleware adds to every request."""

from __future__ import annotations

import asyncio
import itertools
import time

from asgi_app import plain, roomed, visitors

VISITORS = 2000
CALLS = 100_000


async def main() -> None:
    scopes, receive, send = await visitors(VISITORS)
    sent = send.sent
    best: dict[str, float] = {}
    for _ in range(5):
        for name, app in (("plain", plain), ("roomed", roomed)):
            turn = itertools.cycle(scopes)
            t = time.perf_counter()
            for _ in range(CALLS):
                sent.clear()
                await app(next(turn), receive, send)
            per = (time.perf_counter() - t) / CALLS * 1e6
            best[name] = min(best.get(name, per), per)
    print(f"bare app: {best['plain']:.2f} us per request; behind the waiting room: "
          f"{best['roomed']:.2f} us; the middleware adds {best['roomed'] - best['plain']:.2f} us "
          f"(best of 5 runs of {CALLS:,} requests, {VISITORS:,} visitors in turn)")


asyncio.run(main())
