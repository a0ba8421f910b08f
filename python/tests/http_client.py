"""A small HTTP client for the server tests: one request per connection, a cookie jar."""

from __future__ import annotations

import http.client
import json
import re
from dataclasses import dataclass, field


@dataclass
class Response:
    status: int
    headers: list[tuple[str, str]]
    body: str

    def header(self, name: str) -> str | None:
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return None

    def all(self, name: str) -> list[str]:
        return [v for k, v in self.headers if k.lower() == name.lower()]

    @property
    def admitted(self) -> bool:
        if self.status != 200:
            return False
        try:
            return bool(json.loads(self.body).get("origin"))
        except ValueError:
            return False

    @property
    def waiting(self) -> bool:
        return 'id="position"' in self.body or '"position"' in self.body


@dataclass
class Jar:
    """A visitor's cookies, kept from Set-Cookie like a browser."""

    cookies: dict[str, str] = field(default_factory=dict)

    def update(self, r: Response) -> None:
        for sc in r.all("Set-Cookie"):
            pair, _, attrs = sc.partition(";")
            name, _, value = pair.strip().partition("=")
            if re.search(r"(?:^|;)\s*max-age\s*=\s*0\s*(?:;|$)", attrs, re.IGNORECASE):
                self.cookies.pop(name, None)  # cleared, as a browser drops it
            else:
                self.cookies[name] = value

    def header(self) -> str:
        return "; ".join(f"{k}={v}" for k, v in self.cookies.items())


def get(port: int, path: str, jar: Jar | None = None, headers: dict[str, str] | None = None) -> Response:
    h = {"Connection": "close"}
    if jar is not None and jar.cookies:
        h["Cookie"] = jar.header()
    h.update(headers or {})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    try:
        conn.request("GET", path, headers=h)
        r = conn.getresponse()
        resp = Response(r.status, r.getheaders(), r.read().decode("utf-8", "replace"))
    finally:
        conn.close()
    if jar is not None:
        jar.update(resp)
    return resp


def raw_get(port: int, target: str, headers: list[tuple[str, str]] | None = None,
            jar: Jar | None = None) -> Response:
    """GETs `target` exactly as written (no resolving of `..`, absolute forms kept), with
    `headers` as separate lines in order (a name may repeat: two `Cookie` lines)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    try:
        conn.putrequest("GET", target, skip_accept_encoding=True)
        conn.putheader("Connection", "close")
        for name, value in headers or []:
            conn.putheader(name, value)
        conn.endheaders()
        r = conn.getresponse()
        resp = Response(r.status, r.getheaders(), r.read().decode("utf-8", "replace"))
    finally:
        conn.close()
    if jar is not None:
        jar.update(resp)
    return resp


def attack_targets(count: int = 400) -> tuple[list[str], list[str]]:
    """Request targets that name a protected path in some encoding, for trying to get past a
    room: `/static/` (a bypass prefix) then `..` segments in their spellings and separators,
    then the vault's page; and the shop's route in several spellings. A seeded choice among
    the combinations, the same on every run (as `node/test/helpers.js` makes them)."""
    import random

    rng = random.Random(0x5EED)
    starts = ["/static/", "/STATIC/", "//static/", "/static//", "/static/./", "/health/",
              "/static/x/", "/./static/", "/static;/", "/static/%2e/", "/static%2f"]
    dots = ["..", "%2e%2e", "%2E%2E", ".%2e", "%2e.", "%2E.", "..;", "%252e%252e", ".%2E"]
    seps = ["/", "%2f", "%2F", "\\", "%5c", "//", "/./", ";/", "/%2e/"]
    vaults = ["vault.html", "%76ault.html", "v%61ult.html", "vault%2ehtml", "vault.html?x=1",
              "vault.html#x", "VAULT.html", "%56ault.html"]
    hosts = ["", "", "", "http://x", "http://u@x:80", "HTTP://X"]
    vault: set[str] = set()
    while len(vault) < count:
        t = rng.choice(hosts) + rng.choice(starts)
        for _ in range(rng.choice([1, 1, 2])):
            t += rng.choice(dots) + rng.choice(seps)
        vault.add(t + rng.choice(vaults))
    shops = ["/shop/", "/%73hop/", "/sh%6fp/", "//shop/", "/./shop/", "/static/../shop/",
             "/static/%2e%2e/shop/", "/x/..%2fshop/", "/shop//", "/shop/./"]
    shop: set[str] = set()
    while len(shop) < 120:  # of 10 x 4 x 4 distinct
        shop.add(rng.choice(hosts) + rng.choice(shops) + rng.choice(["e", "e?x=1", "e#y", "%65"]))
    return sorted(vault), sorted(shop)


def position(r: Response) -> int | None:
    m = re.search(r'id="position"[^>]*>\s*(\d+)', r.body)
    return int(m.group(1)) if m else None
