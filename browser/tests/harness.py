"""What the browser tests run: front doors (Debian's nginx with the module, uvicorn with the
ASGI middleware) started from a room configuration, and headless chromium driven by selenium.

Everything listens on 127.0.0.1 on free ports. The browser resolves no name but `*.test`,
which it maps to 127.0.0.1 (a host name that is not a potentially trustworthy origin, where
127.0.0.1 is one): it cannot reach anything else. Every process started here is registered in
`LIVE` until it is stopped, so that the watchdog (conftest.py) can end whatever is left.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "bindings", "nginx", "tests"))
# The nginx suite's helpers: the module's path, its HTTP client and process helpers.
from test_nginx import MODULE, NGINX, Jar, children, ensure_nginx, free_port, get, wait_until  # noqa: E402,F401

# selenium-manager (selenium's driver downloader) must never run: the paths below are given,
# and it is told to stay offline should anything still ask it.
os.environ.setdefault("SE_OFFLINE", "true")
os.environ.setdefault("SE_AVOID_STATS", "true")

from selenium import webdriver  # noqa: E402
from selenium.common.exceptions import WebDriverException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")

ORIGIN = "ORIGIN-PAGE"          # marker of the page behind the room
ORIGIN_TITLE = "Origin page"
ORIGIN_HTML = (f"<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
               f"<title>{ORIGIN_TITLE}</title></head>"
               f"<body><p id=\"origin\">{ORIGIN}</p></body></html>\n")

# Processes still running: key -> a function that ends them (and their children) at once.
LIVE: dict[int, object] = {}
_keys = itertools.count()


def kill_tree(pid: int) -> None:
    """SIGKILL `pid` and every process below it (collected first: orphans are reparented)."""
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo.extend(children(p))
    for p in tree:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass


def kill_everything() -> None:
    for key in list(LIVE):
        try:
            LIVE.pop(key)()
        except Exception:  # the watchdog must reach every process
            pass


# ------------------------------------------------------------------------------------------
# Configuration

def toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)    # a TOML basic string
    raise TypeError(f"no TOML for {v!r}")


def room(name: str, *, cookie: dict | None = None, extra: str = "", **fields: object) -> str:
    """A `[[rooms]]` table. `new_users_per_minute` defaults to 1000; `cookie` is the
    `[rooms.cookie]` table, `{"secure": False}` unless given (the tests speak plain HTTP;
    `{}` keeps the engine's defaults); `extra` is TOML appended as is (`[[rooms.events]]`)."""
    fields.setdefault("new_users_per_minute", 1000)
    lines = ["[[rooms]]", f"name = {toml_value(name)}"]
    lines += [f"{k} = {toml_value(v)}" for k, v in fields.items()]
    cookie = {"secure": False} if cookie is None else cookie
    if cookie:
        lines.append("[rooms.cookie]")
        lines += [f"{k} = {toml_value(v)}" for k, v in cookie.items()]
    return "\n".join(lines) + "\n" + extra + "\n"


def config(*rooms: str, bucket_width_secs: int = 2) -> str:
    """An engine configuration with `rooms` (from `room()`), a short bucket (a room "minute"
    of `bucket_width_secs`, so sessions end within seconds) and a fresh ticket key.

    Keep a room's session (`session_duration` x `bucket_width_secs`) at least two buckets and
    longer than its `refresh_interval`: a ticket expires one session after it was last
    re-issued, and the engine re-issues it once per bucket (admitted) or refresh (queued), so
    a one-bucket session loses an active visitor's seat and a session no longer than the
    refresh sends a waiter to the back of the line at every refresh."""
    secret = base64.urlsafe_b64encode(os.urandom(32)).rstrip(b"=").decode()
    head = (f"[settings]\nbucket_width_secs = {bucket_width_secs}\n\n"
            f"[[tickets.keys]]\nid = 1\nsecret = \"{secret}\"\n\n")
    return head + "\n".join(rooms)


def first_room(config_text: str) -> str:
    for line in config_text.splitlines():
        if line.startswith("name = "):
            return json.loads(line.split("=", 1)[1].strip())
    raise ValueError("no room in the configuration")


# ------------------------------------------------------------------------------------------
# Front doors

class Site:
    """A running front door: its port, URLs and the engine's stats."""

    kind = "site"
    port: int

    def url(self, path: str = "/", host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def get(self, path: str = "/", jar: Jar | None = None, headers: dict | None = None):
        return get(self.port, path, jar, headers)

    def stats(self, room: str) -> dict:
        r = get(self.port, "/vr-status")
        assert r.status == 200, f"{self.kind} status answered {r}"
        return json.loads(r.body)["rooms"][room]

    def settled_stats(self, room: str) -> dict:
        """The stats once every worker has folded its counts (once a second)."""
        time.sleep(1.3)
        return self.stats(room)

    def stop(self) -> None:
        raise NotImplementedError


def _nginx_conf(prefix: str, port: int, locations: dict[str, str]) -> str:
    blocks = "\n".join(f"        location {p} {{ velvet_rope {r}; }}" for p, r in locations.items())
    return f"""
load_module {MODULE};
user root;
worker_processes 2;
error_log {prefix}/logs/error.log info;
pid {prefix}/logs/nginx.pid;
events {{ worker_connections 256; }}
http {{
    access_log {prefix}/logs/access.log;
    client_body_temp_path {prefix}/tmp/body;
    proxy_temp_path       {prefix}/tmp/proxy;
    fastcgi_temp_path     {prefix}/tmp/fastcgi;
    uwsgi_temp_path       {prefix}/tmp/uwsgi;
    scgi_temp_path        {prefix}/tmp/scgi;
    default_type text/html;
    charset utf-8;
    # The origin pages are never cached, so that every load reaches the room.
    add_header Cache-Control no-store;

    velvet_rope_config {prefix}/conf/velvet-rope.toml;

    server {{
        listen 127.0.0.1:{port};
        root {prefix}/html;
{blocks}
        location = /vr-status {{ velvet_rope_status; }}
        location = /favicon.ico {{ access_log off; return 204; }}
    }}
}}
"""


class Nginx(Site):
    """Debian's nginx (master and 2 workers) with the module, from an engine configuration:
    `locations` maps location prefixes to rooms (default: `/` to the first room). Each
    location serves the origin page (never cached) at `<prefix>` and `<prefix>page.html`;
    `/favicon.ico` is in no room (an empty 204), so that a browser's icon requests do not
    count as visits; `/vr-status` is the module's status report."""

    kind = "nginx"

    def __init__(self, config_text: str, locations: dict[str, str] | None = None,
                 workdir: str | None = None) -> None:
        self.prefix = tempfile.mkdtemp(prefix="nginx-", dir=workdir)
        self.port = free_port()
        self.proc = None
        locations = locations or {"/": first_room(config_text)}
        for d in ("conf", "logs", "tmp"):
            os.makedirs(os.path.join(self.prefix, d))
        for loc in locations:
            html = os.path.join(self.prefix, "html", loc.strip("/"))
            os.makedirs(html, exist_ok=True)
            for name in ("index.html", "page.html"):
                with open(os.path.join(html, name), "w") as f:
                    f.write(ORIGIN_HTML)
        self._write("conf/velvet-rope.toml", config_text)
        conf = self._write("conf/nginx.conf", _nginx_conf(self.prefix, self.port, locations))
        stderr = open(os.path.join(self.prefix, "logs", "stderr.log"), "w")
        self.proc = subprocess.Popen([NGINX, "-p", self.prefix, "-c", conf, "-g", "daemon off;"],
                                     stdout=stderr, stderr=subprocess.STDOUT)
        stderr.close()
        self._key = next(_keys)
        pid = self.proc.pid
        LIVE[self._key] = lambda: kill_tree(pid)
        ok = wait_until(lambda: self.proc.poll() is not None or
                        len(children(self.proc.pid)) == 2 and self._answers(), 10)
        if self.proc.poll() is not None or not ok:
            self.stop()
            raise RuntimeError(f"nginx did not start:\n{self.log_tail()}")

    def _write(self, rel: str, text: str) -> str:
        path = os.path.join(self.prefix, rel)
        with open(path, "w") as f:
            f.write(text)
        return path

    def _answers(self) -> bool:
        try:
            return get(self.port, "/vr-status").status == 200
        except OSError:
            return False

    def log_tail(self, n: int = 20) -> str:
        text = ""
        for name in ("error.log", "stderr.log"):
            try:
                with open(os.path.join(self.prefix, "logs", name)) as f:
                    text += f.read()
            except OSError:
                pass
        return "\n".join(text.splitlines()[-n:])

    def stop(self) -> None:
        """Graceful stop (QUIT), then SIGKILL to whatever is left."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        kill = LIVE.pop(self._key, None)
        if kill is not None and self.proc.poll() is None:
            kill()
            self.proc.wait(timeout=5)


class Uvicorn(Site):
    """uvicorn serving asgi_app.py (the ASGI middleware in front of an origin page), `workers`
    processes sharing the room through a state file; `rooms` maps path prefixes to rooms
    (default: `/` to the first room)."""

    kind = "uvicorn"

    def __init__(self, config_text: str, rooms: dict[str, str] | None = None,
                 workers: int = 1, workdir: str | None = None) -> None:
        self.dir = tempfile.mkdtemp(prefix="uvicorn-", dir=workdir)
        self.port = free_port()
        conf = os.path.join(self.dir, "velvet-rope.toml")
        with open(conf, "w") as f:
            f.write(config_text)
        env = dict(os.environ, VR_CONFIG=conf, VR_STATE=os.path.join(self.dir, "rooms.state"),
                   VR_ROOMS=json.dumps(rooms or {"/": first_room(config_text)}),
                   PYTHONPATH=HERE)
        self.log = os.path.join(self.dir, "uvicorn.log")
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "uvicorn", "asgi_app:app", "--host", "127.0.0.1",
                 "--port", str(self.port), "--workers", str(workers), "--log-level", "warning"],
                cwd=HERE, env=env, stdout=log, stderr=subprocess.STDOUT)
        self._key = next(_keys)
        pid = self.proc.pid
        LIVE[self._key] = lambda: kill_tree(pid)

        def up() -> bool:
            try:
                return get(self.port, "/health").status == 200
            except OSError:
                return False

        ok = wait_until(lambda: self.proc.poll() is not None or up(), 20)
        if self.proc.poll() is not None or not ok:
            self.stop()
            with open(self.log) as f:
                raise RuntimeError(f"uvicorn did not start:\n{f.read()[-2000:]}")

    def stop(self) -> None:
        """Graceful stop (SIGTERM), then SIGKILL to whatever is left."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        kill = LIVE.pop(self._key, None)
        if kill is not None and self.proc.poll() is None:
            kill()
            self.proc.wait(timeout=5)


FRONT_DOORS = {"nginx": Nginx, "uvicorn": Uvicorn}


def admitted(r) -> bool:  # type: ignore[no-untyped-def]
    """Whether a response (test_nginx's client) is the origin page."""
    return r.status == 200 and ORIGIN in r.body


class Holder:
    """A plain HTTP visitor holding a place: it requests the page every 0.3 s (so its session
    never ends) until `leave()`; its session then ends `session_duration` buckets later."""

    def __init__(self, site: Site, path: str = "/") -> None:
        self.site, self.path, self.jar = site, path, Jar()
        r = site.get(path, self.jar)
        assert admitted(r), f"the holder was not admitted: {r}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._hold, daemon=True)
        self._thread.start()

    def _hold(self) -> None:
        while not self._stop.wait(0.3):
            try:
                self.site.get(self.path, self.jar)
            except OSError:
                pass

    def leave(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


# ------------------------------------------------------------------------------------------
# The browser

def chrome(profile_dir: str, *, lang: str = "en-US",
           viewport: tuple[int, int] | None = None) -> webdriver.Chrome:
    """Headless chromium through Debian's chromedriver, with its own profile (no cookies),
    `lang` as its UI and Accept-Language language, and the viewport `viewport` (CSS pixels
    at device scale factor 1) when given."""
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--user-data-dir={profile_dir}", f"--lang={lang}",
                "--window-size=1280,900", "--hide-scrollbars", "--force-device-scale-factor=1",
                "--no-first-run", "--no-default-browser-check", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--disable-default-apps",
                "--disable-crash-reporter",
                "--disable-features=HttpsUpgrades,Translate,MediaRouter,OptimizationHints",
                # No name resolves but *.test, which is 127.0.0.1 (IP literals are left alone).
                "--host-resolver-rules=MAP *.test 127.0.0.1, EXCLUDE 127.0.0.1, MAP * ~NOTFOUND"):
        opts.add_argument(arg)
    opts.add_experimental_option("prefs", {"intl.accept_languages": lang})
    # XDG_CONFIG_HOME: chromium keeps its crash reports' database (crashpad's) there, not in
    # ~/.config/chromium.
    service = Service(executable_path=CHROMEDRIVER, log_output=profile_dir + ".chromedriver.log",
                      env=dict(os.environ, XDG_CONFIG_HOME=profile_dir + ".config"))
    driver = webdriver.Chrome(options=opts, service=service)
    pid = driver.service.process.pid
    key = next(_keys)
    LIVE[key] = lambda: kill_tree(pid)
    driver._vr_live_key = key  # type: ignore[attr-defined]
    driver.set_page_load_timeout(15)
    if viewport is not None:
        set_viewport(driver, *viewport)
    return driver


def quit_chrome(driver: webdriver.Chrome) -> None:
    pid = driver.service.process.pid
    try:
        driver.quit()
    finally:
        LIVE.pop(getattr(driver, "_vr_live_key", -1), None)
        if driver.service.process.poll() is None:
            kill_tree(pid)


def set_viewport(driver: webdriver.Chrome, width: int, height: int) -> None:
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600})


def page(driver: webdriver.Chrome) -> str:
    """The current document's HTML, or "" while the browser is between documents."""
    try:
        return driver.page_source
    except WebDriverException:
        return ""


def document_id(driver: webdriver.Chrome) -> float | None:
    """When the current document started loading (differs for every load, a refresh too)."""
    try:
        return driver.execute_script("return performance.timeOrigin")
    except WebDriverException:
        return None


def png_size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR", "not a PNG"
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
