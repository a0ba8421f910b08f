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
            pair = sc.split(";", 1)[0]
            name, _, value = pair.strip().partition("=")
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


def position(r: Response) -> int | None:
    m = re.search(r'id="position"[^>]*>\s*(\d+)', r.body)
    return int(m.group(1)) if m else None
