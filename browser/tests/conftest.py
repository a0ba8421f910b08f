"""Fixtures of the browser tests: `start` (a front door from a room configuration), `browser`
(a headless chromium), and a watchdog that ends the run, and everything it started, when it
overruns (BROWSER_WATCHDOG_SECS, default 300). A failed test's report carries its front
doors' logs. A new test is a few lines:

    def test_a_page_in_arabic(start, browser):
        site = start("nginx", config(room("wait", total_active_users=1,
                                          default_template_language="ar")))
        holder = harness.Holder(site)               # takes the one place
        driver = browser(lang="ar", viewport=(1024, 640))
        driver.get(site.url("/"))
        assert driver.find_element(By.TAG_NAME, "html").get_attribute("dir") == "rtl"
        holder.leave()

(`room(..., extra="[[rooms.events]]\n...")` appends TOML to the room: scheduled events.)
"""

from __future__ import annotations

import atexit
import os
import signal
from collections.abc import Callable, Iterator

import pytest

import harness

WATCHDOG_SECS = int(os.environ.get("BROWSER_WATCHDOG_SECS", "300"))

atexit.register(harness.kill_everything)


def pytest_sessionstart(session: pytest.Session) -> None:
    harness.ensure_nginx()
    for path, what in ((harness.CHROMIUM, "chromium"), (harness.CHROMEDRIVER, "chromium-driver"),
                       (harness.MODULE, "the nginx module (bindings/nginx/build.sh)")):
        if not os.path.exists(path):
            raise pytest.UsageError(f"missing {path}: install {what}")

    def on_alarm(signum: int, frame: object) -> None:
        harness.kill_everything()
        pytest.exit(f"watchdog: the browser tests ran over {WATCHDOG_SECS} s", returncode=1)

    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(WATCHDOG_SECS)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    signal.alarm(0)
    harness.kill_everything()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    report = yield
    if report.failed:
        for site in getattr(item, "_vr_sites", []):
            if isinstance(site, harness.Nginx):
                report.sections.append((f"nginx error log ({site.prefix})", site.log_tail(30)))
            elif isinstance(site, harness.Uvicorn):
                with open(site.log) as f:
                    report.sections.append((f"uvicorn log ({site.log})", f.read()[-3000:]))
    return report


@pytest.fixture
def start(request: pytest.FixtureRequest, tmp_path) -> Iterator[Callable[..., harness.Site]]:
    """`start(kind, config_text, ...)`: a running front door, `kind` "nginx" or "uvicorn"
    (keyword arguments: nginx `locations=`, uvicorn `rooms=` and `workers=`, each a map of
    path prefix -> room, `/` to the first room by default). Stopped after the test."""
    sites: list[harness.Site] = []
    request.node._vr_sites = sites

    def start_site(kind: str, config_text: str, **kw: object) -> harness.Site:
        site = harness.FRONT_DOORS[kind](config_text, workdir=str(tmp_path), **kw)
        sites.append(site)
        return site

    yield start_site
    for site in reversed(sites):
        site.stop()


@pytest.fixture
def browser(tmp_path) -> Iterator[Callable[..., object]]:
    """`browser(lang="en-US", viewport=None)`: a fresh headless chromium (its own profile, no
    cookies). Quit after the test."""
    drivers = []

    def new_browser(**kw: object):  # type: ignore[no-untyped-def]
        driver = harness.chrome(str(tmp_path / f"profile-{len(drivers)}"), **kw)
        drivers.append(driver)
        return driver

    yield new_browser
    for driver in drivers:
        harness.quit_chrome(driver)
